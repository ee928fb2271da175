"""Issue 10, item 7 (found by the nemesis drill at a 1 s session, ``zk-loss``): a primary
record that names this node while its agent neither leads nor promoted is deleted by that
agent, so the cluster does not wait for ever for a primary no agent leads.

What the drill saw: during the whole ensemble's loss the leader's session expired while its
promotion was under way; the promotion completed on a new session (the broker promoted,
the ephemeral primary record written by the new session), the election's end then cleared
the promotion, and the broker's lease ran out (it came back joining). Every agent then read
"joining a cluster whose primary is n1", n1's included, for good.

Here the agent's loop runs in this process with its real broker and the real ZooKeeper; a
hook in the loop thread puts it in that state (the term ends, the broker is killed and
restarted, the record stays).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from common.polling import poll_until
from ha_agent.primary_record import read_primary
from tests.agent.test_agent_loop import LoopAgent, make_loop_agent

pytestmark = pytest.mark.timeout(120)

__all__ = ["make_loop_agent"]  # the fixture, shared with test_agent_loop.py


def test_a_primary_record_no_agent_leads_is_deleted_by_the_agent_that_wrote_it(
    make_loop_agent: Callable[[float], LoopAgent], zk: Any, cluster: str
) -> None:
    loop = make_loop_agent(0)
    # the agent records itself primary just after its broker is active: wait for it
    record = poll_until(lambda: read_primary(zk, cluster), 10, "the primary record")
    assert record is not None and record.node == "n1"
    old_pid = loop.broker_pid()

    def strand() -> None:
        agent = loop.agent
        assert agent.election is not None
        agent.election.cancel(timeout=5)  # the term ended (as on a LOST session)...
        agent.promoted_epoch = None
        agent.fencer.kill_broker("test: the lease ran out", old_pid)  # ...back joining
        poll_until(
            lambda: (p := loop.broker_pid()) is not None and p != old_pid,
            30,
            "the broker restarted",
        )
        # the record this session wrote still names n1

    loop.run_in_loop(strand)

    def primary_again() -> bool:
        now = read_primary(zk, cluster)
        return now is not None and now.epoch > record.epoch and loop.node.state() == "active"

    # Before the fix: "joining a cluster whose primary is n1" for ever.
    poll_until(primary_again, 40, lambda: f"a new primary; broker {loop.node.state()}")
    # the agent notes its epoch once the promotion's steps returned: just after the record
    poll_until(
        lambda: loop.agent.promoted_epoch == read_primary(zk, cluster).epoch,  # type: ignore[union-attr]
        10,
        "the agent's promoted epoch",
    )
