"""Shared fixtures: a real broker process per test that asks for one; one real ZooKeeper
per test session (per pytest-xdist worker) and a cluster name per test."""

from __future__ import annotations

import gc
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from tests.agent.agent_cluster import AgentCluster
from tests.broker_process import BrokerProcess
from tests.zookeeper import ZooKeeper, start_zookeeper

# No per-example deadline for any property test: on 2 loaded cores hypothesis's default
# 200 ms deadline fails a correct example now and then (DeadlineExceeded, then Flaky). A
# test's own @settings keep what they set; what they leave out comes from this profile.
settings.register_profile("qpidd", deadline=None)
settings.load_profile("qpidd")

#: The longest tests outside the xdist groups, longest first (``--durations`` of a whole
#: run at load 30-70, 2026-11-29). ``--dist loadgroup`` hands out the groups first (most
#: tests first: the Spark group, then the console's and the CLI's), then the other tests
#: in collection order: listed here they start early, not last, where one would run on
#: while the other worker has nothing left (the rolling upgrade and the wheel install came
#: last). A node-id prefix each (a whole file where its module fixture serves all its
#: tests, so that it is not set up twice); tests/test_slow_first.py checks each matches.
SLOW_FIRST = (
    "tests/analytics/test_cluster_mode.py",
    "tests/deploy/test_ocf_agent.py::test_ocf_tester_passes_with_a_real_broker",
    "tests/ha/test_replication_contract.py::test_what_the_contract_accepts_the_wire_carries",
    "tests/nemesis/test_nemesis_drill.py::test_kill_partition_and_stale_backup",
    "tests/ha/test_public_url.py::test_public_url_reaches_clients_and_operators",
    "tests/deploy/test_ocf_in_sync.py",
    "tests/deploy/test_ocf_agent.py::test_two_brokers_one_promoted_the_other_ready",
    "tests/ha/test_replication_format2.py::test_every_field_table_the_amqp_codec_accepts",
    "tests/security/test_ha_tls.py",
    "tests/security/test_fuzz.py::test_mutated_amqp_sessions",
    "tests/agent/test_total_failure_cycles.py",
    "tests/deploy/test_ocf_agent.py::test_crm_resource_force_actions_give_pacemakers_codes",
    "tests/ha/test_replication_errors_cluster.py::test_a_snapshot_the_primary_cannot_send",
    "tests/security/test_zk_tls.py::test_agent_over_tls_and_qpid_ha_with_the_digest",
    "tests/security/test_users_file.py::test_users_verbs",
    "tests/ha/test_queue_replication_durable.py::test_a_confirm_means_the_copy_has",
    "tests/deploy/test_ocf_agent.py::test_a_joining_broker_is_not_promoted_while_another",
    "tests/ha/test_store_history.py::test_a_diverged_backup_moves_its_store_aside",
    "tests/store/test_priority_paging.py::test_a_backup_pages_its_copy_of_a_priority_queue",
    "tests/drill/test_drill_failover.py",
    "tests/upgrade/test_rolling_upgrade.py",
    "tests/test_wheel_install.py",
    "tests/agent/test_agent_netns.py",
)


def slow_first_rank(nodeid: str) -> int:
    """Where a test goes in :data:`SLOW_FIRST`'s order; after them all when not listed."""
    for rank, prefix in enumerate(SLOW_FIRST):
        if nodeid.startswith(prefix):
            return rank
    return len(SLOW_FIRST)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every ``xdist_group`` kept (:func:`keep_xdist_groups`); then the tests of
    :data:`SLOW_FIRST` first, in its order, the others keeping theirs (a stable sort: every
    worker collects the same order, as xdist requires)."""
    keep_xdist_groups(config, items)
    items.sort(key=lambda item: slow_first_rank(item.nodeid))


def keep_xdist_groups(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``--dist loadgroup`` pytest-xdist 3.8 marks a test's group by rewriting
    ``item._nodeid`` (``id@group``), but pytest 9 reads a node id from ``item._id``: the
    suffix was lost and a group's tests went to any worker (tests/cli/test_admin.py's
    cluster, meant to be started once, was started by each worker that got one of its
    tests). Where xdist left the suffix, it is put where pytest reads it, for every group
    (tests/console and tests/analytics did it for theirs)."""
    if not getattr(config.option, "loadgroup", False):
        return
    from _pytest.nodeid import NodeId

    for item in items:
        grouped = item.__dict__.get("_nodeid")
        if isinstance(grouped, str) and "@" in grouped and grouped != item.nodeid:
            item._id = NodeId.parse(grouped)


@pytest.fixture
def no_cyclic_collector() -> Iterator[None]:
    """The cyclic garbage collector off for the test: what it alone would free (a
    reference cycle, kept for good in a broker's frozen heap, broker.collector) is what
    such a test looks for; freed by reference counting, an object is gone without it."""
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A stand-alone qpidd on free loopback ports, stopped (by PID) after the test."""
    process = BrokerProcess(tmp_path / "qpidd").start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeper]:
    """One ZooKeeper for the whole run (container or Debian package), stopped at the end."""
    server = start_zookeeper(tmp_path_factory.mktemp("zookeeper"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def cluster() -> str:
    """A cluster name of this test alone, so tests sharing the ZooKeeper never meet."""
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def agents(tmp_path: Path, zookeeper: ZooKeeper, cluster: str) -> Iterator[AgentCluster]:
    """Three nodes (agent + supervised broker) on the session's ZooKeeper, not started; their
    logs under ``tmp_path / "cluster"``; every process stopped by PID afterwards."""
    agents = AgentCluster(tmp_path / "cluster", zookeeper.hosts, cluster, size=3)
    try:
        yield agents
    finally:
        agents.stop()
