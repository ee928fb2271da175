"""No cluster left without a primary when a safe choice exists (issue 25, item 3).

The stuck state the scale run met twice, with real agents, brokers and ZooKeeper: the
backups left the committed in-sync set (their brokers froze; the primary's agent committed
their removal), then the primary's broker died. Its agent restarts it as a joining broker;
the backup comes back ready, out of the set, which is empty. Before, every agent waited for
an operator: the old primary's "not every member is joining: n2, n3", the backups' "a ready
backup out of the in-sync set (epoch 1), which is empty ... for an operator to restart the
backups" (3 nodes; the same with 2, which is quicker). The last committed record names one
store, the primary's: it holds every confirmed message, and the agents promote it by
protocol, the ready backup never.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest

from common.polling import poll_until
from ha_agent.agent_status import read_statuses
from tests.agent.agent_cluster import AgentCluster
from tests.agent.netns_client import confirming_channel
from tests.zookeeper import ZooKeeper

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def pair(tmp_path: Path, zookeeper: ZooKeeper, cluster: str) -> Iterator[AgentCluster]:
    agents = AgentCluster(tmp_path / "cluster", zookeeper.hosts, cluster, size=2)
    try:
        yield agents
    finally:
        agents.stop()


def test_the_store_the_empty_set_names_is_promoted_and_the_ready_backup_follows(
    pair: AgentCluster,
) -> None:
    agents = pair
    agents.start("--watchdog-timeout=0")  # the frozen brokers are frozen on purpose
    primary = agents.wait_settled()
    backups = [n for n in agents.nodes if n is not primary]
    first = agents.primary_record()
    assert first is not None
    connection = pika.BlockingConnection(
        pika.ConnectionParameters("127.0.0.1", primary.port, socket_timeout=5)
    )
    try:
        channel = confirming_channel(connection, "stall")
        channel.basic_publish("", "stall", b"with-backups", pika.BasicProperties(delivery_mode=2))
        frozen = [b.broker_pid() for b in backups]
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)
        # confirmed once the primary's agent committed both removals: the set is empty
        channel.basic_publish("", "stall", b"alone", pika.BasicProperties(delivery_mode=2))
    finally:
        connection.close()
    assert agents.in_sync() == set()
    dead = primary.broker_pid()
    os.kill(dead, signal.SIGKILL)  # its agent restarts it: joining
    poll_until(lambda: primary.state() == "joining", 30)
    for pid in frozen:
        os.kill(pid, signal.SIGCONT)  # ready again, out of the (empty) set

    def promoted_again() -> bool:
        record = agents.primary_record()
        return record is not None and record.epoch > first.epoch

    poll_until(promoted_again, 30)
    record = agents.primary_record()
    assert record is not None and record.node == primary.name  # the one store named
    poll_until(lambda: sorted(agents.states()) == ["active", "ready"], 30)
    for backup in backups:
        assert not [e for e in backup.agent_events() if e["event"] == "agent_promoted"]
    # each agent says why in its status record (qpid-ha status --all, the console)
    names = {n.name for n in agents.nodes}
    poll_until(lambda: set(read_statuses(agents.zk, agents.cluster)) == names, 15)

    def says_primary() -> bool:
        said = read_statuses(agents.zk, agents.cluster).get(primary.name)
        return said is not None and said.eligibility.startswith("the broker is already the")

    poll_until(says_primary, 15)
    connection = pika.BlockingConnection(
        pika.ConnectionParameters("127.0.0.1", primary.port, socket_timeout=5)
    )
    try:
        got = [connection.channel().basic_get("stall", auto_ack=True)[2] for _ in range(2)]
    finally:
        connection.close()
    assert got == [b"with-backups", b"alone"]
