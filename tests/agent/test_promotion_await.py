"""A promotion call that timed out is awaited on the broker's liveness, not fenced at once
(issue 25, item 1: slow is not dead). Sans I/O: :func:`ha_agent.promotion_await.await_step`.

At 10,000 queues and load 9-45 on 2 cores, the newly elected broker's ``POST
/api/ha/promote`` was answered after the call's timeout (80 % of the lease) and its own
agent fenced it: a second fail-over for a queue of work.
"""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from ha_agent.broker_check import LivenessView
from ha_agent.promotion_await import AWAIT_LIMIT, AwaitStep, await_step

EPOCH, PID = 7, 4242


def live(state: str = "ready", epoch: int = 6, progress: float = 0.3, **kw: object) -> LivenessView:
    return LivenessView(last_progress=progress, ha_state=state, epoch=epoch, pid=PID, **kw)  # type: ignore[arg-type]


def step(view: LivenessView | None, **kw: object) -> AwaitStep:
    silent = view.last_progress if view is not None else 0.5
    args: dict[str, object] = {
        "refused": False, "silent_for": silent, "epoch": EPOCH, "pid": PID,
        "lease_left": 1.5, "waited": 1.0, "patience": 2.0,
    }  # fmt: skip
    args.update(kw)
    return await_step(view, **args).step  # type: ignore[arg-type]


def test_a_busy_backup_whose_loop_progresses_is_awaited() -> None:
    assert step(live("ready", progress=1.9)) is AwaitStep.WAIT


def test_primary_at_the_epoch_is_promoted_active_or_recovering() -> None:
    assert step(live("recovering", epoch=EPOCH)) is AwaitStep.PROMOTED
    assert step(live("active", epoch=EPOCH, progress=5.0), lease_left=None) is AwaitStep.PROMOTED


def test_an_unanswered_liveness_probe_is_awaited_within_the_patience() -> None:
    assert step(None, silent_for=1.9) is AwaitStep.WAIT  # the thread waits for a CPU too
    assert step(None, silent_for=2.0) is AwaitStep.FENCE  # nothing said it progresses


def test_fenced_as_before_when_the_outcome_stays_unknown_or_the_broker_is_not_well() -> None:
    assert step(None, refused=True) is AwaitStep.FENCE  # nothing listens: gone
    assert step(live(progress=2.0)) is AwaitStep.FENCE  # its loop stopped
    assert step(live(), lease_left=None) is AwaitStep.FENCE  # the session's lease ran out
    assert step(live(), waited=AWAIT_LIMIT) is AwaitStep.FENCE  # in vain
    assert step(live("active", epoch=EPOCH + 1)) is AwaitStep.FENCE  # another epoch
    assert step(live("active", epoch=EPOCH, fenced=True)) is AwaitStep.FENCE
    other = LivenessView(last_progress=0.1, ha_state="joining", pid=PID + 1)
    assert step(other) is AwaitStep.FENCE  # restarted: not the instance promoted
    assert step(live(), patience=0.0) is AwaitStep.FENCE  # --broker-timeout 0: at once


states = st.sampled_from(["joining", "catch-up", "ready", "active", "recovering", "standalone"])


@given(
    state=states,
    epoch=st.integers(0, 9),
    silent_for=st.floats(0, 10),
    fenced=st.booleans(),
    same_pid=st.booleans(),
    lease_left=st.none() | st.floats(0.01, 5),
    waited=st.floats(0, 60),
    patience=st.floats(0, 8),
    answered=st.booleans(),
    refused=st.booleans(),
)
@example("ready", 6, 2.0, False, True, 1.0, 0.0, 2.0, True, False)  # silence at patience
@example("ready", 6, 0.0, False, True, 1.0, AWAIT_LIMIT, 2.0, True, False)  # the limit
@example("active", EPOCH, 0.0, False, True, None, 0.0, 2.0, True, False)  # lease gone
@example("active", EPOCH, 0.0, False, True, 1.0, 0.0, 2.0, False, False)  # no answer
def test_the_rule(
    state: str,
    epoch: int,
    silent_for: float,
    fenced: bool,
    same_pid: bool,
    lease_left: float | None,
    waited: float,
    patience: float,
    answered: bool,
    refused: bool,
) -> None:
    pid = PID if same_pid else PID + 1
    answer = LivenessView(silent_for, state, epoch=epoch, pid=pid, fenced=fenced)
    view = answer if answered and not refused else None
    got = step(
        view,
        refused=refused,
        silent_for=silent_for,
        lease_left=lease_left,
        waited=waited,
        patience=patience,
    )
    said = view is not None
    ours = said and same_pid and not fenced
    primary = state in ("active", "recovering")
    # promoted only when the instance promoted said it is primary at this epoch and serves
    assert (got is AwaitStep.PROMOTED) == (ours and primary and epoch == EPOCH)
    # waited for only while nothing says it is gone, stopped, elsewhere or out of time
    waits = (
        not refused
        and (not said or (ours and not primary))
        and lease_left is not None
        and silent_for < patience
        and waited < AWAIT_LIMIT
    )
    assert (got is AwaitStep.WAIT) == waits
