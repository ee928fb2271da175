"""Fixtures of the in-process ``qpid-ha`` tests: real brokers (processes, stopped by PID),
started once per test session (per xdist worker) and shared, as no test changes what
another asserts; and :func:`qpid_ha`, which runs the CLI in this process with typer's
CliRunner."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from typer.testing import CliRunner, Result

from qpid_ha_cli.context import Environment
from qpid_ha_cli.main import app
from tests.broker_process import BrokerProcess
from tests.ha.cluster import Cluster

#: What ha-queue-replication needs on both brokers (tests/ha/test_remote_queue_replication.py).
REPLICATION_ARGS = [
    "--ha-queue-replication=yes",
    "--ha-username=guest",
    "--ha-password=guest",
    "--link-maintenance-interval=0.1",
    "--link-heartbeat-interval=2",
]


def qpid_ha(*args: str, env: Environment | None = None) -> Result:
    """``qpid-ha ARGS`` in this process: exit code, stdout and stderr apart."""
    return CliRunner().invoke(app, list(args), obj=env, prog_name="qpid-ha")


def address(broker: BrokerProcess, credentials: str = "guest/guest") -> str:
    """The broker's management address for ``-b``."""
    prefix = f"{credentials}@" if credentials else ""
    return f"{prefix}127.0.0.1:{broker.mgmt_port}"


@pytest.fixture(scope="session")
def solo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A stand-alone qpidd that can copy a queue from another (ha-queue-replication)."""
    broker = BrokerProcess(tmp_path_factory.mktemp("solo"), args=REPLICATION_ARGS).start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A primary (broker 0, epoch 1, active) and a ready backup (broker 1)."""
    for attempt in range(3):
        cluster = Cluster(tmp_path_factory.mktemp("pair"), 2)
        try:
            cluster.start()  # a failed start stops what it started
            break
        except RuntimeError as exc:
            # free_port's port can be taken by another worker's process before qpidd binds
            # it: new ports and again (the fixture serves a whole module's tests)
            if "address already in use" not in str(exc) or attempt == 2:
                raise
    try:
        cluster.promote(0, epoch=1)
        cluster.wait_state(0, "active")
        cluster.wait_state(1, "ready")
        yield cluster
    finally:
        cluster.stop()
