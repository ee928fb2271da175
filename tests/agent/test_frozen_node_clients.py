"""End to end: clients leave a frozen node (issue 26, item 4).

A frozen node (a paused VM or container, a hung host: nothing on it runs) can do nothing for
its clients: its sockets stay open and nothing answers. Only the clients' own deadlines take
them away. Here the primary's node is frozen as a paused container is (its agent and its
broker SIGSTOPped: the kernel still acknowledges what the clients send), with real agents,
brokers and ZooKeeper; real pika (BlockingConnection), aio-pika and kombu clients publish
with confirms throughout, each with the settings docs/clients.md documents. Each publishes
with confirms on the new primary within the fail-over time plus two client heartbeats, and
every message any of them had confirmed is on the new primary.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import time
from collections.abc import Iterator

import pytest

from common.polling import poll_until
from tests.agent.agent_cluster import AgentCluster, Node
from tests.agent.publishers import HEARTBEAT, PUBLISHERS, Confirms, drain

pytestmark = pytest.mark.timeout(180)


def confirmed_at_least(confirms: Confirms, count: int) -> bool:
    return len(confirms.confirmed) >= count


@contextlib.contextmanager
def frozen(node: Node) -> Iterator[list[int]]:
    """The node's agent and broker SIGSTOPped (its sockets stay open), SIGCONTed after."""
    pids = [node.broker_pid()]
    assert node.agent is not None
    pids.insert(0, node.agent.pid)
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield pids
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def test_clients_leave_a_frozen_primary_node(agents: AgentCluster) -> None:
    agents.start("--broker-timeout=2")
    primary = agents.wait_settled(timeout=60)  # at load 50 a broker took 20 s to start
    ports = agents.amqp_ports  # every client's URL list
    confirms = {name: Confirms(name, f"frozen-node-{name}") for name in PUBLISHERS}
    publishers = [PUBLISHERS[name](confirms[name], ports).start() for name in PUBLISHERS]
    others = [n for n in agents.nodes if n is not primary]
    took: dict[str, float] = {}
    try:
        for c in confirms.values():
            poll_until(functools.partial(confirmed_at_least, c, 5), 20, f"{c.name} publishes")
        with frozen(primary):
            frozen_at = time.monotonic()

            def active() -> Node | None:
                return next((n for n in others if n.state() == "active"), None)

            new = poll_until(active, 30, "a new primary active")
            failover = time.monotonic() - frozen_at
            bound = failover + 2 * HEARTBEAT
            for c in confirms.values():
                there = functools.partial(c.first_on, {new.port}, frozen_at)
                with contextlib.suppress(AssertionError):
                    took[c.name] = poll_until(there, frozen_at + bound + 15 - time.monotonic())
                    took[c.name] -= frozen_at
        print(
            f"frozen primary node: the new primary active after {failover:.2f} s; the first"
            " confirm there: "
            + ", ".join(f"{name} {t:.2f} s" for name, t in took.items())
            + f" (bound {bound:.2f} s)"
        )
        for c in confirms.values():  # how each left the frozen node
            print(f"  {c.name} (new primary {new.port}): {c.failures_since(frozen_at)[:8]}")
        for name in PUBLISHERS:
            failures = confirms[name].failures_since(frozen_at)
            assert name in took, (name, failures)
            assert took[name] <= bound, (name, took[name], bound, new.port, failures)
        for c in confirms.values():  # and they go on publishing there
            more = functools.partial(confirmed_at_least, c, len(c.confirmed) + 5)
            poll_until(more, 10, c.name)
    finally:
        for publisher in publishers:
            publisher.stop()
    for c in confirms.values():
        lost = sorted(set(c.numbers()) - set(drain(new.port, c.queue)))
        assert not lost, (c.name, len(lost), lost[:10])
