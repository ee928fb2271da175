"""Total failures with the nodes restarted in every order, end to end (issue 12, items 3
and 7): real agents, brokers and ZooKeeper, one cluster failing again and again.

Each cycle starts from a settled cluster (an active primary, two ready backups in the
committed in-sync set) and gives its nodes roles: the primary, one backup (in sync) and the
other backup, made *stale*: SIGKILLed first, so it falls out of the set while messages are
confirmed without it, and a queue it still holds is deleted meanwhile (by the older rule,
the sum of its queues' last ids, it would look the most advanced). Then the primary and the
backup are SIGKILLed too (no clean stop anywhere), the sessions expire, and the three
agents are started again in the cycle's order. The agents must promote a store of the
in-sync set, never the stale one; every message confirmed before the failure is on the new
primary (drained, so the next cycle starts from an empty queue); the cluster settles again
(the stale node's store, diverged, is moved aside and it catches up), ready for the next
cycle.

The cycles run the 3 rotations of (primary, backup, stale) in one cluster (one set-up
instead of three): each role comes back first, second and last once (a Latin square; the
6 orders, each role twice in each place, took twice the time for no other case). That the
choice itself does not depend on the order, with members seen late, is shown on the pure
rules over all 6 orders in tests/agent/test_total_failure_orders.py; this runs each
position of each role once, not every timing.
"""

from __future__ import annotations

import contextlib
import os
import signal

import pika
import pika.exceptions
import pytest

from common.polling import poll_until
from tests.agent.agent_cluster import AgentCluster, Node

pytestmark = pytest.mark.timeout(420)

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


def connect(params: list[pika.ConnectionParameters]) -> pika.BlockingConnection | None:
    """One round of the URL list (None: no broker admitted the client this round)."""
    try:
        return pika.BlockingConnection(params)
    except pika.exceptions.AMQPConnectionError:
        return None


def publish(ports: list[int], queue: str, bodies: list[str]) -> None:
    """Publish ``bodies`` with confirms. The connection goes round the URL list until a
    broker admits it, as a client does: a primary may refuse a client for a moment after
    the set changed (530 "not serving", or "began serving during this connection's
    handshake"), with the others backups (it failed a loaded run). Only connecting is
    retried: nothing is published twice."""
    params = [pika.ConnectionParameters("127.0.0.1", port) for port in ports]
    connection = poll_until(lambda: connect(params), 20, "a broker admitting the publisher")
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


ROLES = ("primary", "backup", "stale")
#: Each role first, second and last once.
ORDERS = [ROLES[i:] + ROLES[:i] for i in range(len(ROLES))]


def one_failure(agents: AgentCluster, cycle: int, order: tuple[str, ...]) -> None:
    primary = agents.wait_settled(timeout=60)
    backup, stale = sorted((n for n in agents.nodes if n is not primary), key=lambda n: n.name)
    if cycle % 2:  # each backup is the stale one in turn
        backup, stale = stale, backup
    before = [f"{cycle}a{i}" for i in range(100)]
    publish(agents.amqp_ports, "orders", before)
    publish(agents.amqp_ports, "extra", [f"{cycle}x{i}" for i in range(150)])

    kill_node(stale)  # it leaves the in-sync set; confirms go on without it
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", primary.port))
    connection.channel().queue_delete("extra")  # held until the set without it is committed
    connection.close()
    after = [f"{cycle}b{i}" for i in range(100)]
    publish(agents.amqp_ports, "orders", after)

    kill_node(primary)
    kill_node(backup)
    poll_until(lambda: agents.primary_record() is None, 15)  # sessions expired
    roles: dict[str, Node] = {"primary": primary, "backup": backup, "stale": stale}
    for name in order:
        node = roles[name]
        node.start_agent(agents.zk_hosts, agents.cluster, *AGENT_ARGS)
        poll_until(lambda: node.status() is not None, 20)  # noqa: B023 - called at once
    winner = agents.wait_settled(timeout=60)
    assert winner is not stale, f"cycle {cycle}, order {order}: the stale store won"
    promoted = [e for e in winner.agent_events() if e["event"] == "agent_promoted"][-1]
    assert "of the stores the in-sync record of epoch" in str(promoted["reason"])
    assert drain(winner.port, "orders") == before + after, f"cycle {cycle}, order {order}"


def test_total_failures_restarted_with_each_role_in_each_place(agents: AgentCluster) -> None:
    agents.start(session_timeout=2.0)
    for cycle, order in enumerate(ORDERS):
        one_failure(agents, cycle, order)
