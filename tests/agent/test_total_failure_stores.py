"""Total failure of a cluster with stores (issue 12, item 3), real agents, brokers and
ZooKeeper: every agent and broker SIGKILLed, then restarted one by one; the agents promote
a broker whose store is in the last in-sync set, never one that fell out of it, and every
confirmed persistent message on a durable queue is there afterwards.

The stale node is built to look the most advanced by the older rule (the sum of its queues'
last ids): it holds a queue the others deleted after it left."""

from __future__ import annotations

import contextlib
import os
import signal
from itertools import permutations

import pika
import pytest

from common.polling import poll_until
from tests.agent.agent_cluster import AgentCluster, Node

pytestmark = pytest.mark.timeout(240)

PERSISTENT = pika.BasicProperties(delivery_mode=2)
AGENT_ARGS = ("--cluster-size=3", "--session-timeout=2.0", "--check-interval=0.1")


def kill_node(node: Node) -> None:
    """SIGKILL the node's agent and broker (no clean stop anywhere)."""
    node.status()  # note the broker's pid
    assert node.agent is not None
    os.kill(node.agent.pid, signal.SIGKILL)
    node.agent.wait()
    for pid in node.broker_pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    poll_until(lambda: node.status() is None, 10)


def publish(ports: list[int], queue: str, bodies: list[str]) -> None:
    params = [pika.ConnectionParameters("127.0.0.1", port) for port in ports]
    connection = pika.BlockingConnection(params)
    try:
        channel = connection.channel()
        channel.confirm_delivery()  # each basic_publish returns once confirmed
        channel.queue_declare(queue, durable=True)
        for body in bodies:
            channel.basic_publish("", queue, body.encode(), PERSISTENT)
    finally:
        connection.close()


def drain(port: int, queue: str) -> list[str]:
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    try:
        channel = connection.channel()
        bodies: list[str] = []
        while True:
            method, _props, body = channel.basic_get(queue, auto_ack=True)
            if method is None:
                return bodies
            bodies.append(body.decode())
    finally:
        connection.close()


ORDERS = list(permutations(("stale", "primary", "backup")))


@pytest.mark.parametrize("order", [ORDERS[0], ORDERS[-1]], ids="-".join)
def test_a_total_failure_restarts_from_a_store_of_the_in_sync_set(
    agents: AgentCluster, order: tuple[str, ...]
) -> None:
    agents.start(session_timeout=2.0)
    primary = agents.wait_settled()
    backup, stale = [n for n in agents.nodes if n is not primary]
    before = [f"a{i}" for i in range(200)]
    publish(agents.amqp_ports, "orders", before)
    publish(agents.amqp_ports, "extra", [f"x{i}" for i in range(300)])
    poll_until(lambda: stale.status() is not None, 5)

    kill_node(stale)  # it leaves the in-sync set; confirms go on without it
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", primary.port))
    connection.channel().queue_delete("extra")  # held until the set without it is committed
    connection.close()
    after = [f"b{i}" for i in range(200)]
    publish(agents.amqp_ports, "orders", after)

    kill_node(primary)
    kill_node(backup)
    poll_until(lambda: agents.primary_record() is None, 15)  # sessions expired
    roles = {"stale": stale, "primary": primary, "backup": backup}
    for name in order:
        node = roles[name]
        node.start_agent(agents.zk_hosts, agents.cluster, *AGENT_ARGS)
        poll_until(lambda: node.status() is not None, 20)  # noqa: B023 - called at once
    winner = agents.wait_settled(timeout=60)
    assert winner is not stale
    promoted = [e for e in winner.agent_events() if e["event"] == "agent_promoted"][-1]
    assert "with the stores of the in-sync set" in str(promoted["reason"])
    assert drain(winner.port, "orders") == before + after
