"""End to end: slow is not dead (issue 25, item 1).

A broker answers its liveness (is its event loop making progress?) and its lease renewals
from a thread of its own, not behind the loop's backlog (:mod:`broker.liveness_server`).
With real agents, brokers and ZooKeeper at ``--broker-timeout 2``:

- a primary whose loop is kept busy (one callback spinning 500 ms at every turn of its
  50 ms watch: its management API times out the agent's 0.4 s checks) is not fenced, and
  its lease holds;
- a primary whose loop is blocked in one callback is fenced (its liveness says the loop
  stopped making progress), and so is a SIGSTOPped one (nothing answers at all).

The busy loop is the broker's test-only hook ``$QPIDD_TEST_BUSY_LOOP_FILE``
(:class:`broker.liveness_server.BusyLoopHook`): a file the test writes once the cluster
settled, so only the primary is busy, and only then.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time

import pytest

from common.polling import holds_for, poll_until
from tests.agent.agent_cluster import AgentCluster, Node

pytestmark = pytest.mark.timeout(180)

BUSY = "QPIDD_TEST_BUSY_LOOP_FILE"


def events(node: Node, name: str, after: int = 0) -> list[dict[str, object]]:
    return [e for e in node.agent_events()[after:] if e["event"] == name]


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


def test_a_sigstopped_primary_is_fenced(agents: AgentCluster) -> None:
    primary = start(agents)
    mark = len(primary.agent_events())
    pid = primary.broker_pid()
    os.kill(pid, signal.SIGSTOP)
    try:
        poll_until(
            lambda: [e for e in events(primary, "broker_killed", mark) if e["pid"] == pid], 20
        )
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
    assert agents.wait_settled(timeout=40) is not primary
