"""The job on the logs of a real fail-over: three real agents on a real ZooKeeper, each
supervising a real qpidd; the primary's broker is SIGKILLed, the agents fail over; then the
job reads the JSON logs the processes wrote."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from analytics import job
from tests.agent.agent_cluster import AgentCluster
from tests.agent.conftest import cluster, zookeeper  # noqa: F401  (fixtures)
from tests.broker_process import wait_until
from tests.zookeeper import ZooKeeper

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def agents(tmp_path: Path, zookeeper: ZooKeeper, cluster: str) -> Iterator[AgentCluster]:  # noqa: F811
    agents = AgentCluster(tmp_path / "cluster", zookeeper.hosts, cluster, size=3)
    try:
        yield agents
    finally:
        agents.stop()


def test_sigkill_of_the_primary_one_failover_with_the_new_epoch_no_anomalies(
    spark: SparkSession, agents: AgentCluster, tmp_path: Path
) -> None:
    agents.start()
    old = agents.wait_settled()
    first = agents.primary_record()
    assert first is not None
    os.kill(old.broker_pid(), signal.SIGKILL)
    wait_until(
        lambda: (r := agents.primary_record()) is not None and r.epoch > first.epoch,
        timeout=30,
    )
    new = agents.wait_settled(timeout=60)  # the old broker is back as a ready backup
    record = agents.primary_record()
    assert record is not None and new is not old
    agents.stop()

    result = job.run(spark, [str(tmp_path / "cluster")], tmp_path / "report")
    failovers = [r for r in result.tables["failovers"] if r["kind"] == "failover"]
    # stopping the cluster (agents in turn, each stopping its broker) may hand the primary
    # role on once more, with a later epoch: the SIGKILL's fail-over is the one to the
    # epoch ZooKeeper named before the stop
    (fo,) = [r for r in failovers if r["epoch"] == record.epoch]
    assert [r for r in failovers if r["epoch"] < record.epoch] == []
    assert (fo["cluster"], fo["epoch"], fo["node"], fo["old_node"]) == (
        agents.cluster, record.epoch, new.name, old.name)  # fmt: skip
    assert fo["failure_by"] == "broker_process_exited"
    assert fo["old_state"] == "ready"
    for phase in ("detection", "election", "promotion", "recovering", "failover"):
        assert fo[f"{phase}_ms"] is not None and fo[f"{phase}_ms"] >= 0, phase
    assert fo["failover_ms"] == pytest.approx(
        fo["detection_ms"] + fo["election_ms"] + fo["promotion_ms"] + fo["recovering_ms"]
    )
    assert fo["client_outage_ms"] is None  # no drill
    assert fo["config"] == "session-timeout 2s"
    assert result.tables["anomalies"] == [], result.tables["anomalies"]
    assert "no anomalies" in result.html.read_text()
