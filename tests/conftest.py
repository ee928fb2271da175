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
