"""End to end: a broker its qpid-ha-agent manages refuses ``qpid-ha --cluster-manager
promote`` by hand, while the agents' primary keeps serving, and the agents' own fail-over
(SIGKILL of the primary broker) still promotes a backup.

Real agents on a real ZooKeeper, each supervising a real qpidd; a pika publisher with
confirms on the URL list; qpid-ha as a subprocess.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from common.polling import poll_until
from tests.agent.agent_cluster import AgentCluster
from tests.agent.test_agent_failover import Publisher, drain
from tests.ha.cluster import http

pytestmark = pytest.mark.timeout(180)

QPID_HA = str(Path(sys.executable).with_name("qpid-ha"))


def test_a_hand_promote_is_refused_and_the_agents_still_fail_over(agents: AgentCluster) -> None:
    agents.start()
    primary = agents.wait_settled()
    record = agents.primary_record()
    assert record is not None
    backup = next(n for n in agents.nodes if n is not primary)
    # the backup's agent has read it as its own (the mark is sticky from that read on)
    poll_until(lambda: http("GET", backup.mgmt_port, "/api/ha")["managed_by"] == backup.name, 10)
    publisher = Publisher(agents.amqp_ports, "orders")
    publisher.publish(100)

    cli = subprocess.run(
        [QPID_HA, "-b", f"guest/guest@127.0.0.1:{backup.mgmt_port}", "--cluster-manager",
         "promote"],
        capture_output=True,
        text=True,
        timeout=30,
    )  # fmt: skip
    assert (cli.returncode, cli.stdout) == (1, ""), cli.stderr
    assert cli.stderr.count("\n") == 1, cli.stderr
    assert "HTTP 409" in cli.stderr and f"qpid-ha-agent of node {backup.name}" in cli.stderr
    assert "--force" in cli.stderr
    refused = [e for e in backup.broker_events() if e["event"] == "ha_promote_refused"]
    assert [e["managed_by"] for e in refused] == [backup.name]

    # nothing changed: one primary, the agents', which keeps confirming
    assert backup.state() == "ready"
    assert [n.name for n in agents.primaries()] == [primary.name]
    publisher.publish(100)
    assert agents.primary_record() == record

    # the agents' own fail-over still promotes a backup, with the agent's mark
    old_pid = primary.broker_pid()
    os.kill(old_pid, signal.SIGKILL)
    publisher.publish(100)  # through the fail-over: the URL list finds the new primary
    publisher.close()
    new = next(n for n in agents.nodes if n.state() in ("active", "recovering"))
    assert new is not primary
    new_record = agents.primary_record()
    assert new_record is not None and new_record.node == new.name
    assert new_record.epoch > record.epoch
    promoted = [e for e in new.broker_events() if e["event"] == "ha_promote_requested"]
    assert [(e["epoch"], e["agent"]) for e in promoted] == [(new_record.epoch, new.name)]
    poll_until(lambda: primary.state() == "ready", 30)  # restarted by its agent, a backup
    agents.wait_settled()

    received = drain(agents.amqp_ports, "orders")
    lost = publisher.confirmed - set(received)
    assert not lost, f"confirmed messages lost: {sorted(lost)[:10]}"
    assert len(publisher.confirmed) == 300
