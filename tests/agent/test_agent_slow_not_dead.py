"""End to end: slow is not dead (issue 25, item 1).

A broker answers its liveness (is its event loop making progress?) and its lease renewals
from a thread of its own, not behind the loop's backlog (:mod:`broker.liveness_server`).
With real agents, brokers and ZooKeeper at ``--broker-timeout 2``:

- a primary whose loop is kept busy (one callback spinning 500 ms at every turn of its
  50 ms watch: its management API times out the agent's 0.4 s checks) is not fenced, and
  its lease holds;
- a primary whose loop is blocked in one callback is fenced (its liveness says the loop
  stopped making progress), and so is a SIGSTOPped one (nothing answers at all), whose
  clients (pika, aio-pika, kombu) publish on the new primary within the fail-over time
  plus two client heartbeats, nothing confirmed lost (issue 26, item 4).

The busy loop is the broker's test-only hook ``$QPIDD_TEST_BUSY_LOOP_FILE``
(:class:`broker.liveness_server.BusyLoopHook`): a file the test writes once the cluster
settled, so only the primary is busy, and only then.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import time

import pytest

from common.polling import holds_for, poll_until
from tests.agent.agent_cluster import AgentCluster, Node
from tests.agent.publishers import HEARTBEAT, PUBLISHERS, Confirms, drain

pytestmark = pytest.mark.timeout(180)

BUSY = "QPIDD_TEST_BUSY_LOOP_FILE"


def events(node: Node, name: str, after: int = 0) -> list[dict[str, object]]:
    return [e for e in node.agent_events()[after:] if e["event"] == name]


def confirmed_at_least(confirms: Confirms, count: int) -> bool:
    return len(confirms.confirmed) >= count


def start(agents: AgentCluster) -> Node:
    for node in agents.nodes:
        node.env[BUSY] = str(node.dir / "busy")
    agents.start("--broker-timeout=2")
    return agents.wait_settled(timeout=40)


def test_a_busy_primary_is_not_fenced_and_keeps_its_lease(agents: AgentCluster) -> None:
    primary = start(agents)
    mark = len(primary.agent_events())
    pid = primary.broker_pid()
    (primary.dir / "busy").write_text("500 50")
    try:

        def untouched() -> bool:
            return not events(primary, "agent_fenced", mark) and not any(
                e["event"] in ("ha_fenced",) for e in primary.broker_events()
            )

        holds_for(untouched, 8)  # four times --broker-timeout
    finally:
        (primary.dir / "busy").unlink()
    slow = [e for e in events(primary, "promotion_eligibility", mark) if "slow" in str(e["reason"])]
    assert slow, "the busy primary's checks never timed out: the test tested nothing"
    assert primary.broker_pid() == pid
    assert agents.wait_settled(timeout=30) is primary
    assert not events(primary, "broker_killed", mark)


def test_a_primary_whose_loop_is_blocked_is_fenced(agents: AgentCluster) -> None:
    primary = start(agents)
    mark = len(primary.agent_events())
    pid = primary.broker_pid()
    blocked_at = time.monotonic()
    (primary.dir / "busy").write_text("60000 100000")  # one callback that does not end
    (killed,) = poll_until(
        lambda: [e for e in events(primary, "broker_killed", mark) if e["pid"] == pid], 20
    )
    took = time.monotonic() - blocked_at
    (primary.dir / "busy").unlink()
    assert "fenced" in str(killed["reason"])
    assert took >= 2.0  # not before --broker-timeout
    new = agents.wait_settled(timeout=40)
    assert new is not primary


def test_a_sigstopped_primary_is_fenced_and_its_clients_leave_it(agents: AgentCluster) -> None:
    """... and clients leave it (issue 26, item 4): real pika, aio-pika and kombu clients,
    each with the settings docs/clients.md documents (heartbeat 1 s, the brokers' URL list,
    a connect and a confirm deadline), publish with confirms throughout. Each publishes with
    confirms on the new primary within the fail-over time plus two client heartbeats, and
    every message any of them had confirmed is on the new primary."""
    primary = start(agents)
    ports = agents.amqp_ports  # every client's URL list
    confirms = {name: Confirms(name, f"frozen-{name}") for name in PUBLISHERS}
    publishers = [PUBLISHERS[name](confirms[name], ports).start() for name in PUBLISHERS]
    try:
        for c in confirms.values():
            poll_until(functools.partial(confirmed_at_least, c, 5), 20, f"{c.name} publishes")
        mark = len(primary.agent_events())
        pid = primary.broker_pid()
        os.kill(pid, signal.SIGSTOP)  # its sockets stay open; nothing answers
        frozen_at = time.monotonic()
        try:
            poll_until(
                lambda: [e for e in events(primary, "broker_killed", mark) if e["pid"] == pid], 20
            )
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        new = poll_until(lambda: next(iter(agents.primaries()), None), 30, "a new primary")
        poll_until(lambda: new.state() == "active", 30, "the new primary active")
        failover = time.monotonic() - frozen_at
        assert new is not primary
        bound = failover + 2 * HEARTBEAT
        took = {}
        for c in confirms.values():
            there = functools.partial(c.first_on, {new.port}, frozen_at)
            first = poll_until(there, bound + 5, f"{c.name} there")
            took[c.name] = first - frozen_at
        print(
            f"SIGSTOPped primary: the new primary active after {failover:.2f} s; the first"
            " confirm there: "
            + ", ".join(f"{name} {t:.2f} s" for name, t in took.items())
            + f" (bound {bound:.2f} s)"
        )
        for name, t in took.items():
            assert t <= bound, (name, t, bound, confirms[name].errors[-3:])
        for c in confirms.values():  # and they go on publishing there
            more = functools.partial(confirmed_at_least, c, len(c.confirmed) + 5)
            poll_until(more, 10, c.name)
    finally:
        for publisher in publishers:
            publisher.stop()
    for c in confirms.values():
        lost = sorted(set(c.numbers()) - set(drain(new.port, c.queue)))
        assert not lost, (c.name, len(lost), lost[:10])
    assert agents.wait_settled(timeout=40) is new
