"""The ``broker_loop`` line's hysteresis (ha_agent/loop_report.py; issue 25), sans I/O.

A loaded machine made the event flip about once a minute per agent, in pairs a second or
three apart ("running", then "progressing"), though nothing the agent decides changed: a
running loop counts as answering, late or not. Reported now: a late spell once, on time
again after 30 s of on-time answers; any judgement that does not count, at once."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from ha_agent.broker_check import LivenessView
from ha_agent.local_broker import LocalBroker
from ha_agent.loop_liveness import LoopState, LoopTimes, LoopVerdict
from ha_agent.loop_report import LATE_PROGRESS, ON_TIME_FOR, LoopReport

PATIENCE = 2.0
RUNNING = LoopVerdict(LoopState.RUNNING, "ran 0.1 s and waited 2.5 s of 2.8 s")
STOPPED = LoopVerdict(LoopState.STOPPED, "neither ran nor waited")
VERDICTS = {s: LoopVerdict(s, s.value) for s in LoopState}


def test_blips_of_a_starved_loop_are_one_spell_not_a_flip_a_minute() -> None:
    """The soak's pattern: answers twice a second; the loop on time but for a blip every
    20 s (0.6 s late, or 1.2 s late every third), for five minutes: before, 30 lines."""
    report = LoopReport(PATIENCE)
    lines = []
    for tick in range(600):
        now = tick * 0.5
        blip = tick % 40 == 0 and tick
        late = (1.2 if tick % 120 == 0 else 0.6) if blip else 0.05
        change = report.judged(now, late, RUNNING)
        if change is not None:
            lines.append((now, change))
    for tick in range(600, 700):  # on time from here
        change = report.judged(tick * 0.5, 0.05, RUNNING)
        if change is not None:
            lines.append((tick * 0.5, change))
    assert [c.loop for _t, c in lines] == ["running", "progressing"]
    (entered, running), (left, progressing) = lines
    assert entered == 60.0 and running.counted
    assert left == 280.5 + ON_TIME_FOR  # the last blip at 280 s, then 30 s on time
    assert progressing.late_max == 1.2 and progressing.late_for == left - entered


def test_a_stopped_loop_is_reported_at_once_and_its_return_too() -> None:
    report = LoopReport(PATIENCE)
    first = report.judged(0.0, 0.6, STOPPED)  # not counted: reported though under 1 s late
    assert first is not None and (first.loop, first.counted) == ("stopped", False)
    back = report.judged(0.5, 0.01, RUNNING)
    assert back is not None and back.loop == "progressing" and back.counted
    late = report.judged(1.0, 1.5, RUNNING)
    assert late is not None and late.loop == "running"
    stopped = report.judged(1.5, 2.0, STOPPED)  # a change the agent acts on: at once
    assert stopped is not None and stopped.loop == "stopped"


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(0.0, 5.0),  # seconds since the previous answer
            st.floats(0.0, 3.0),  # last progress
            st.sampled_from(list(LoopState)),
        ),
        max_size=80,
    )
)
@example([(0.0, LATE_PROGRESS, LoopState.STOPPED), (0.5, 0.0, LoopState.UNJUDGED)])
@example([(0.0, 1.0, LoopState.RUNNING), (ON_TIME_FOR, 0.0, LoopState.RUNNING)])
def test_every_report_is_a_change_and_no_uncounted_judgement_is_hidden(
    answers: list[tuple[float, float, LoopState]],
) -> None:
    report = LoopReport(PATIENCE)
    now = 0.0
    last = "progressing"
    on_time_since: float | None = None
    for step, progress, state in answers:
        now += step
        verdict = VERDICTS[state]
        change = report.judged(now, progress, verdict)
        on_time_since = (
            None if progress >= LATE_PROGRESS else now if on_time_since is None else on_time_since
        )
        if change is not None:
            assert change.loop != last  # a change, never the same line twice
            if change.loop == "progressing":  # on time for 30 s, or right after not counted
                assert on_time_since is not None
                assert now - on_time_since >= ON_TIME_FOR or last in ("stopped", "spinning")
            last = change.loop
        if progress >= LATE_PROGRESS and not verdict.running:
            assert last == state.value  # a late loop that does not count is always told
        assert report.reported == last


def test_the_agents_record_logs_through_the_hysteresis() -> None:
    broker = LocalBroker(PATIENCE)
    times = LoopTimes(clock=0.0, cpu=0.0, wait=0.0, cpu_since_progress=0.0)
    live = LivenessView(last_progress=0.8, ha_state="active", pid=7, times=times)
    broker.heard(0.0, 0.1, live)  # unjudged, 0.8 s late, not counted: told
    assert broker.report.reported == "unjudged"
    for tick in range(1, 80):
        at = tick * 0.5
        times = LoopTimes(clock=at, cpu=at / 2, wait=at / 2, cpu_since_progress=0.0)
        live = LivenessView(last_progress=0.05, ha_state="active", pid=7, times=times)
        broker.heard(at, at + 0.1, live)
    assert broker.report.reported == "progressing"
