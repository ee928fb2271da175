"""Fixtures of the console's browser tests: a real 3-node agent cluster with a users file,
shared by a module, and one headless Chromium (Debian's ``chromium`` and
``chromium-driver``, installed by ``make system-packages``) for the session."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.agent.agent_cluster import AgentCluster
from tests.chromium import headless_chromium
from tests.console.support import screenshot_dir, write_users
from tests.zookeeper import ZooKeeper

#: A laptop's screen.
WINDOW = (1366, 860)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep ``--dist loadgroup``'s groups for these tests under pytest 9.

    pytest-xdist 3.8 marks a test's group by rewriting ``item._nodeid`` (``id@group``), but
    pytest 9 reads a node id from ``item._id``: the suffix is lost and each test of a group
    may go to another worker (each then starts its own cluster and browser). Where xdist
    left the suffix, put it where pytest reads it. Only for ``tests/console``: the other
    groups (``tests/cli``, ``tests/analytics``) have the same problem (reported)."""
    if not getattr(config.option, "loadgroup", False):
        return
    from _pytest.nodeid import NodeId

    here = Path(__file__).parent
    for item in items:
        grouped = item.__dict__.get("_nodeid")
        if here in Path(item.path).parents and isinstance(grouped, str) and "@" in grouped:
            item._id = NodeId.parse(grouped)


@pytest.fixture(scope="module")
def console_cluster(
    tmp_path_factory: pytest.TempPathFactory, zookeeper: ZooKeeper
) -> Iterator[AgentCluster]:
    """Three agents, each supervising its broker, with the users of ``support.USERS``;
    settled (one active primary, two ready backups in the in-sync set)."""
    root = tmp_path_factory.mktemp("console-cluster")
    users = write_users(root / "users")
    cluster = AgentCluster(root, zookeeper.hosts, f"console-{uuid.uuid4().hex[:8]}", size=3)
    try:
        for node in cluster.nodes:
            node.broker_command += [
                f"--sasl-users={users}",
                f"--console-zk={zookeeper.hosts}",  # the agents' view on the cluster page
                f"--console-cluster={cluster.cluster}",
                f"--console-agent-log={node.agent_log}",  # its agent's won and promoted
            ]
        cluster.start("--watchdog-timeout=0")  # a test stops a broker: keep it
        cluster.wait_settled(timeout=60)
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """Headless Chromium through chromedriver (selenium), one for the test worker's run
    (the browser tests share an xdist group, so one worker and one browser)."""
    with headless_chromium(
        *WINDOW,
        "--metrics-recording-only",
        "--ignore-certificate-errors",  # the TLS test's own CA (loopback only)
    ) as driver:
        yield driver


@pytest.fixture(scope="module")
def shots() -> Path:
    return screenshot_dir()
