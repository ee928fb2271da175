"""End to end: three HA clusters on one ZooKeeper and one set of three nodes (issue 32,
item 4: every core of a machine), placed as colocated pairs: cluster 0 on nodes a and b,
cluster 1 on b and c, cluster 2 on c and a, so each node (two cores: two brokers) runs one
broker of two clusters, each broker its own cluster's member.

The agents of one node share its name (``--node``), so each cluster's primary record names
the node its primary runs on. New clusters started one after the other take their
primaries to the nodes running none (ha_agent.spread): one primary per node. The loss of
one node (SIGKILL of its agents and brokers, by PID) moves only the primary that was there,
nothing confirmed lost, and the other clusters keep theirs (same broker, same epoch), the
one that lost a backup too.
"""

from __future__ import annotations

import contextlib
import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.polling import poll_until
from tests.agent.agent_cluster import AgentCluster
from tests.agent.test_agent_failover import Publisher, drain
from tests.cli.conftest import qpid_ha
from tests.zookeeper import ZooKeeper

pytestmark = pytest.mark.timeout(180)

#: messages each cluster confirms before the node's loss
COUNT = 50


@pytest.fixture
def clusters(tmp_path: Path, zookeeper: ZooKeeper) -> Iterator[list[AgentCluster]]:
    """Cluster i on nodes i and i+1 (mod 3) of a, b, c, on the session's ZooKeeper; the
    nodes' names are this test's own (other tests' clusters there use n1, n2, n3)."""
    tag = uuid.uuid4().hex[:8]
    names = [f"{tag}-a", f"{tag}-b", f"{tag}-c"]
    made = [
        AgentCluster(
            tmp_path / f"c{i}",
            zookeeper.hosts,
            f"m-{tag}-{i}",
            names=[names[i], names[(i + 1) % 3]],
        )
        for i in range(3)
    ]
    try:
        yield made
    finally:
        # every process of every node at once (by PID), then each cluster's own stop
        for agents in made:
            for node in agents.nodes:
                for pid in [node.agent.pid] if node.agent is not None else []:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                for broker in node.brokers:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(broker.pid, signal.SIGKILL)
        for agents in made:
            agents.stop()


def kill_node(clusters: list[AgentCluster], name: str) -> None:
    """SIGKILL the agent and the broker of node ``name`` in every cluster there (by PID)."""
    there = [n for agents in clusters for n in agents.nodes if n.name == name]
    for node in there:
        (broker,) = node.brokers
        assert node.agent is not None
        os.kill(node.agent.pid, signal.SIGKILL)
        os.kill(broker.pid, signal.SIGKILL)
    for node in there:
        assert node.agent is not None
        node.agent.wait(timeout=10)
        node.brokers[0].wait(timeout=10)


def test_three_clusters_spread_their_primaries_and_a_node_loss_moves_only_its_own(
    clusters: list[AgentCluster],
) -> None:
    # Every broker at once (the slow part), then the agents cluster after cluster: each new
    # cluster sees where the others' primaries run.
    for agents in clusters:
        for node in agents.nodes:
            node.start_broker(agents.cluster)
    every = [node for agents in clusters for node in agents.nodes]
    poll_until(lambda: all(node.state() == "joining" for node in every), 60)
    for agents in clusters:
        for node in agents.nodes:
            agents.start_node(node, supervise=False)
        poll_until(agents.primary_record, 30)
    primaries = [agents.wait_settled(30) for agents in clusters]
    names = [agents.nodes[0].name for agents in clusters]
    assert [p.name for p in primaries] == names  # one per node
    records = [agents.primary_record() for agents in clusters]
    assert all(r is not None for r in records)
    # qpid-ha --zk HOSTS status --all: every cluster, and one primary on each node
    result = qpid_ha("--zk", clusters[0].zk_hosts, "status", "--all")
    assert result.exit_code == 0, result.stderr
    for agents, primary in zip(clusters, primaries, strict=True):
        (row,) = [r for r in result.stdout.splitlines() if r.startswith(f"{agents.cluster} ")]
        assert row.split()[1] == primary.name
    assert all(f"{name} 1" in result.stdout.splitlines()[-1] for name in names)

    publishers = [Publisher(agents.amqp_ports, "orders") for agents in clusters]
    for publisher in publishers:
        publisher.publish(COUNT)
        publisher.close()

    lost_node = names[0]
    kept_pids = {
        agents.cluster: p.broker_pid() for agents, p in zip(clusters, primaries, strict=True)
    }
    kill_node(clusters, lost_node)

    # Cluster 0 fails over to its backup's node (b, which runs cluster 1's primary too).
    def moved() -> str | None:
        record = clusters[0].primary_record()
        return None if record is None or record.node == lost_node else record.node

    new_node = poll_until(moved, 30)
    assert new_node == names[1]
    new_primary = clusters[0].node(new_node)
    poll_until(lambda: new_primary.state() == "active", 30)

    # The others kept theirs (cluster 2 lost its backup on a): same node, same epoch, same
    # broker, still active.
    for agents, record in zip(clusters[1:], records[1:], strict=True):
        assert record is not None and agents.primary_record() == record
        kept = agents.node(record.node)
        assert kept.state() == "active"
        assert kept.broker_pid() == kept_pids[agents.cluster]

    # Nothing confirmed is lost, in any cluster.
    for agents, publisher in zip(clusters, publishers, strict=True):
        alive = [n.port for n in agents.nodes if n.name != lost_node]
        received = drain(alive, "orders")
        lost = publisher.confirmed - set(received)
        assert not lost, f"{agents.cluster}: confirmed messages lost: {sorted(lost)[:10]}"
        assert len(publisher.confirmed) == COUNT
