"""Shared fixtures: a real broker process per test that asks for one; one real ZooKeeper
per test session (per pytest-xdist worker) and a cluster name per test."""

from __future__ import annotations

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

#: The longest tests outside the xdist groups (tens of seconds each, quiet), longest
#: first. ``--dist loadgroup`` hands out the groups first (most tests first: the Spark
#: group, then the console's), then the other tests in collection order: listed here they
#: start early, not last, where one would run on while the other worker has nothing left.
#: A node-id prefix each (a whole file only where all its tests are long, so a module's
#: fixtures are not set up twice); tests/test_slow_first.py checks each still matches.
SLOW_FIRST = (
    "tests/upgrade/test_rolling_upgrade.py",
    "tests/agent/test_total_failure_cycles.py",
    "tests/nemesis/test_nemesis_drill.py::test_kill_partition_and_stale_backup",
    "tests/test_wheel_install.py",
    "tests/drill/test_drill_failover.py",
    "tests/agent/test_agent_netns.py",
)


def slow_first_rank(nodeid: str) -> int:
    """Where a test goes in :data:`SLOW_FIRST`'s order; after them all when not listed."""
    for rank, prefix in enumerate(SLOW_FIRST):
        if nodeid.startswith(prefix):
            return rank
    return len(SLOW_FIRST)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests of :data:`SLOW_FIRST` first, in its order; the others keep theirs (a
    stable sort: every worker collects the same order, as xdist requires)."""
    items.sort(key=lambda item: slow_first_rank(item.nodeid))


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
