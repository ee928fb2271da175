"""A whole site lost and restored with its agents (issue 12, item 6; docs/store.md,
"Whole-site loss", followed step by step): real agents, brokers, ZooKeeper and ``qpid-ha``.

A settled 3-node cluster is backed up from its primary while a publisher keeps publishing
with confirms; every node is SIGKILLed and every data directory deleted. On a new site (new
ports, a new cluster path in ZooKeeper: the old site's ZooKeeper is gone too) the backup is
restored into one node's data directory and the three agents are started (the restored
node's not first): they promote the restored store, the most advanced; the two others,
empty, join as backups and catch up. Every message
confirmed before the backup was asked for is there, in order, once.
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import pika
import pytest

from common.polling import poll_until
from tests.agent.agent_cluster import AgentCluster
from tests.agent.test_total_failure_cycles import AGENT_ARGS, kill_node
from tests.cli.conftest import qpid_ha as qpid_ha_here
from tests.store.test_backup_restore import QUEUES, Publisher, back_up_under_load
from tests.zookeeper import ZooKeeper

pytestmark = pytest.mark.timeout(240)


def test_a_site_restored_from_a_backup_by_its_agents(
    tmp_path: Path, zookeeper: ZooKeeper, agents: AgentCluster
) -> None:
    agents.start()
    primary = agents.wait_settled()
    url = f"amqp://guest:guest@127.0.0.1:{primary.port}/%2F"
    publisher = Publisher(url)
    new = AgentCluster(tmp_path / "new", zookeeper.hosts, f"t-{uuid.uuid4().hex[:12]}")
    try:
        setup = pika.BlockingConnection(pika.URLParameters(url))
        for queue in QUEUES:
            setup.channel().queue_declare(queue, durable=True)
        setup.close()
        backup = tmp_path / "backup"
        management = f"guest/guest@127.0.0.1:{primary.mgmt_port}"
        before, _result = back_up_under_load(publisher, management, backup)

        for node in agents.nodes:  # the whole site is lost
            kill_node(node)
        agents.stop()
        for node in agents.nodes:
            shutil.rmtree(node.dir / "data")

        first = new.nodes[1]  # not the old primary's name: nothing ties a store to one
        restored = qpid_ha_here("restore", str(backup), "--data-dir", str(first.dir / "data"))
        assert restored.exit_code == 0, restored.stderr
        # a new cluster's agents wait for --cluster-size members, then promote the most
        # advanced store: the restored one (its epoch and positions; the others are empty)
        for node in (new.nodes[2], first, new.nodes[0]):
            node.start_agent(new.zk_hosts, new.cluster, *AGENT_ARGS)
        assert new.wait_settled(60) is first

        connection = pika.BlockingConnection(
            pika.URLParameters(f"amqp://guest:guest@127.0.0.1:{first.port}/%2F")
        )
        channel = connection.channel()
        found: list[int] = []
        for queue in QUEUES:
            numbers: list[int] = []
            expected = channel.queue_declare(queue, durable=True, passive=True)
            count = expected.method.message_count

            def drained(
                queue: str = queue, numbers: list[int] = numbers, count: int = count
            ) -> bool:
                while (got := channel.basic_get(queue, auto_ack=True))[0] is not None:
                    numbers.append(int(got[2]))
                return len(numbers) >= count

            poll_until(drained, 30)  # get-empty until the delivery gate opens
            assert numbers == sorted(numbers), queue
            found += numbers
        connection.close()
        assert before <= set(found), sorted(before - set(found))[:10]
        assert len(found) == len(set(found))
        (promoted,) = [e for e in first.agent_events() if e["event"] == "agent_promoted"]
        assert promoted["reason"].startswith("the most advanced of 3 joining members (epoch 1,")
    finally:
        publisher.stop.set()
        new.stop()
