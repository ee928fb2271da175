"""The job on the logs of a real fail-over: three real agents on a real ZooKeeper, each
supervising a real qpidd; the primary's broker is SIGKILLed, the agents fail over; then the
job reads the JSON logs the processes wrote."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from analytics import job
from tests.agent.agent_cluster import AgentCluster
from tests.broker_process import wait_until
from tests.ha.cluster import http

pytestmark = pytest.mark.timeout(300)

QPID_HA = str(Path(sys.executable).with_name("qpid-ha"))


QUEUE = "analytics-drill"


def connected(log: Path) -> bool:
    """Both of the drill's clients are connected."""
    text = log.read_text() if log.exists() else ""
    return text.count('"client_connected"') >= 2


def enqueued(mgmt_port: int) -> int:
    """Messages the drill's queue has taken on this broker (0 if unknown)."""
    try:
        return int(http("GET", mgmt_port, f"/api/queues/{QUEUE}").get("enqueued_total", 0))
    except (OSError, ValueError):
        return 0


def test_sigkill_of_the_primary_one_failover_with_the_new_epoch_no_anomalies(
    spark: SparkSession, agents: AgentCluster, tmp_path: Path
) -> None:
    agents.start()
    old = agents.wait_settled()
    first = agents.primary_record()
    assert first is not None
    # A real drill (qpid-ha drill: pika publisher and consumer on the URL list) runs
    # through the fail-over and logs beside the brokers and agents.
    drill_log = tmp_path / "cluster" / "drill.log"
    url = "amqp:guest/guest@" + ",".join(f"127.0.0.1:{port}" for port in agents.amqp_ports)
    drill = subprocess.Popen(
        [QPID_HA, "drill", f"--url={url}", "--duration=5", "--rate=100",
         f"--log-file={drill_log}", f"--cluster={agents.cluster}", f"--queue={QUEUE}",
         "--scenario=sigkill-primary-broker"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_until(lambda: connected(drill_log), timeout=30)
        wait_until(lambda: enqueued(old.mgmt_port) >= 50, timeout=30)  # traffic before
        os.kill(old.broker_pid(), signal.SIGKILL)
        wait_until(
            lambda: (r := agents.primary_record()) is not None and r.epoch > first.epoch,
            timeout=30,
        )
        out, err = drill.communicate(timeout=90)
    finally:
        if drill.poll() is None:
            drill.kill()
            drill.wait()
    assert drill.returncode == 0, (out, err)
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
    # the earliest evidence (no drill record of the kill here): the supervisor's exit
    # event, the agent's check that found the broker gone, or the backups' links dropping
    assert fo["failure_by"] in ("broker_process_exited", "broker_state", "ha_link_down")
    assert fo["failure_source"] in ("old primary", "backups") and fo["withheld"] is None
    assert fo["old_state"] == "ready"
    for phase in ("detection", "election", "promotion", "recovering", "failover"):
        assert fo[f"{phase}_ms"] is not None and fo[f"{phase}_ms"] >= 0, phase
    assert fo["failover_ms"] == pytest.approx(
        fo["detection_ms"] + fo["election_ms"] + fo["promotion_ms"] + fo["recovering_ms"]
    )
    # the drill's confirm gap around the fail-over
    assert fo["client_outage_ms"] is not None and fo["client_outage_ms"] > 0
    assert fo["scenario"] == "sigkill-primary-broker"
    assert fo["config"] == "session-timeout 2s"
    # the brokers' settings from their ha_started (tests/agent/agent_cluster.py's options)
    assert (fo["link_heartbeat_s"], fo["ha_backup_timeout_s"]) == (2.0, 5.0)
    assert fo["detection_per_heartbeat"] == pytest.approx(fo["detection_ms"] / 2000.0)
    assert result.tables["anomalies"] == [], result.tables["anomalies"]
    assert "no anomalies" in result.html.read_text()
