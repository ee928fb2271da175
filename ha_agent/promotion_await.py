"""A promotion call that timed out: await its outcome on the broker's liveness (pure).

:Status: Beta

``POST /api/ha/promote`` is answered by the broker's event loop, after the promotion's
work. On a busy broker (10,000 queues, load 9-45 on 2 cores) the answer came later than the
call's timeout (at most 80 % of the lease, about 1.4 s at ``--session-timeout 2``), and the
agent fenced the broker it had just promoted, a fail-over caused by nothing but a queue of
work (issue 25, item 1: slow is not dead). The outcome of such a call is unknown, which is
why the agent fenced: if it resigned, the broker could still take the promotion afterwards,
beside the next primary. But the agent need not resign: its multi-op already committed the
epoch and the primary record, and while it leads, its broker becoming primary at that epoch
is what it asked for. So it waits, still leading, on what the broker's liveness (answered
off the loop, :mod:`broker.liveness`) says: the role the loop last published, and whether
the loop makes progress.

:func:`await_step` says what one liveness answer means: promoted (primary at the epoch),
wait, or fence (with why). Safety does not change: the agent keeps its ZooKeeper session
and its session fence kills the broker when the session's lease runs out, as it does for a
broker whose promotion answered (``docs/agent.md``); a broker that is gone, restarted,
fenced itself, is primary at another epoch, or whose loop stopped making progress is fenced
as before, and so is one still not primary after :data:`AWAIT_LIMIT`.

Error Handling
==============

Pure: raises nothing. A liveness probe that is refused means fence; one unanswered means
wait, while the loop's last known progress is within ``--broker-timeout``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from ha_agent.broker_check import LivenessView

__all__ = ["AWAIT_LIMIT", "AwaitStep", "Awaited", "await_step"]

#: The longest the agent waits for a timed-out promotion to show on the broker's liveness
#: (seconds, from the call's timeout): a promotion of 10,000 queues on loaded cores takes
#: seconds, not minutes.
AWAIT_LIMIT = 30.0


class AwaitStep(StrEnum):
    PROMOTED = "promoted"
    WAIT = "wait"
    FENCE = "fence"


@dataclass(frozen=True)
class Awaited:
    """What came of one look at the broker's liveness, and why."""

    step: AwaitStep
    reason: str


def await_step(
    live: LivenessView | None,
    *,
    refused: bool,
    silent_for: float,
    epoch: int,
    pid: int | None,
    lease_left: float | None,
    waited: float,
    patience: float,
    limit: float = AWAIT_LIMIT,
) -> Awaited:
    """What the liveness answer ``live`` (None: none this time; ``refused``: nothing
    listens) means for a promotion to ``epoch`` of the broker instance ``pid`` whose call
    timed out ``waited`` seconds ago, with ``lease_left`` seconds left of the agent's lease
    on its session (None: none) and ``patience`` (``--broker-timeout``): the longest the
    broker's loop may go without progress, as its liveness last said (``silent_for``: since
    then, or since the call was sent when no answer came yet; a loop judged running on its
    thread's clocks, starved not stopped, counts as progressing when it was last asked:
    :mod:`ha_agent.loop_liveness`), before it counts as stopped. An unanswered liveness
    probe alone is no fence (the thread, too, waits for a CPU)."""
    fence = AwaitStep.FENCE
    if refused:
        return Awaited(fence, "its liveness port refuses: the broker is gone")
    if live is not None:
        if pid is not None and live.pid is not None and live.pid != pid:
            return Awaited(fence, f"the broker restarted (pid {live.pid}, promoted {pid})")
        if live.fenced:
            return Awaited(fence, "the broker fenced itself")
        if live.is_primary:
            if live.epoch == epoch:
                return Awaited(AwaitStep.PROMOTED, f"{live.ha_state} at epoch {epoch}")
            return Awaited(fence, f"{live.ha_state} at epoch {live.epoch}, not {epoch}")
    if lease_left is None:
        return Awaited(fence, "no lease left on the ZooKeeper session")
    if silent_for >= patience:
        return Awaited(
            fence,
            f"its loop made no progress its liveness told for {silent_for:.1f} s"
            f" (--broker-timeout {patience:g} s)",
        )
    if waited >= limit:
        return Awaited(fence, f"still not primary {waited:.1f} s after the call timed out")
    state = "no liveness answer this time" if live is None else live.ha_state
    return Awaited(AwaitStep.WAIT, f"{state}, its loop progressing ({silent_for:.1f} s ago)")
