"""Starved is not stopped (ha_agent/loop_liveness.py; issue 25, item 1), sans I/O.

A model of the broker's loop thread: segments of time in which it is active (running or
waiting on a run queue for a CPU) a share of the time, split between the two at some
ratio; the liveness answers read its clocks at arbitrary moments. Hypothesis checks the
rule's promises for every such timeline:

- a thread that neither ran nor waited since ``T`` (SIGSTOP, blocked in a system call) is
  never judged running at ``T + patience`` or later, and the agent's record of its broker
  (:class:`~ha_agent.local_broker.LocalBroker`) counts it silent since ``T`` at least;
- a thread always running or waiting whose callbacks each use less than ``patience`` of
  CPU (starved, progressing) is judged running at every answer after its first, however
  little of the CPU it gets;
- a loop that used ``patience`` of CPU since its last progress (spinning) never is.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ha_agent.broker_check import LivenessView, liveness_view
from ha_agent.local_broker import LocalBroker
from ha_agent.loop_liveness import LoopJudge, LoopState, LoopTimes, loop_verdict

PATIENCE = 2.0


@dataclass(frozen=True)
class Segment:
    duration: float
    active: float  # share of the segment the thread runs or waits for a CPU
    running: float  # share of that active time it runs (the rest it waits)


class Timeline:
    """The thread's cumulative CPU time and run-queue wait; nothing after the last
    segment (stopped)."""

    def __init__(self, segments: list[Segment]) -> None:
        self.starts = [0.0]
        self.cpu = [0.0]
        self.wait = [0.0]
        self.segments = segments
        for s in segments:
            self.starts.append(self.starts[-1] + s.duration)
            self.cpu.append(self.cpu[-1] + s.duration * s.active * s.running)
            self.wait.append(self.wait[-1] + s.duration * s.active * (1.0 - s.running))

    @property
    def end(self) -> float:
        return self.starts[-1]

    def at(self, t: float) -> tuple[float, float]:
        i = bisect.bisect_right(self.starts, t) - 1
        if i >= len(self.segments):
            return self.cpu[-1], self.wait[-1]
        s, into = self.segments[i], t - self.starts[i]
        return (
            self.cpu[i] + into * s.active * s.running,
            self.wait[i] + into * s.active * (1.0 - s.running),
        )


segments = st.lists(
    st.builds(
        Segment,
        st.floats(0.001, 3.0),
        st.floats(0.0, 1.0),
        st.floats(0.0, 1.0),
    ),
    min_size=1,
    max_size=12,
)
#: the gaps between answers (an agent checks every 0.1 s; a blocked one, seconds apart)
gaps = st.lists(st.floats(0.001, 3.0), min_size=1, max_size=40)


def answers(
    timeline: Timeline, gaps: list[float], since: float, wait: bool = True
) -> Iterator[tuple[float, LoopTimes]]:
    t = 0.0
    for gap in gaps:
        t += gap
        cpu, waited = timeline.at(t)
        yield t, LoopTimes(t, cpu, waited if wait else None, since)


@given(segments, gaps, st.booleans())
@settings(max_examples=150)
@example([Segment(1.0, 1.0, 0.5)], [0.9, 0.2, 1.9], True)  # stops between two answers
@example([Segment(3.0, 1.0, 0.0)], [2.9, PATIENCE + 0.1], True)  # starved, then stopped
@example([Segment(0.001, 0.0, 0.0)], [0.001, 0.001], False)  # never ran at all
def test_a_stopped_thread_is_never_running_past_the_patience(
    segments: list[Segment], gaps: list[float], wait: bool
) -> None:
    timeline = Timeline(segments)
    stopped_at = timeline.end  # nothing after the last segment
    judge = LoopJudge(PATIENCE)
    for t, times in answers(timeline, gaps, since=0.0, wait=wait):
        verdict = judge.judge(7, times)
        if t >= stopped_at + PATIENCE:
            assert not verdict.running, (t, stopped_at, verdict)
        if verdict.running:  # counted from before its idle time: never after it stopped
            assert t - verdict.idle <= stopped_at + 1e-9, (t, stopped_at, verdict)


@given(segments, gaps, st.floats(0.001, PATIENCE * 0.99))
@settings(max_examples=150)
@example([Segment(5.0, 1.0, 0.01)], [0.1] * 30, 0.5)  # 1 % of a CPU: still running
@example([Segment(5.0, 1.0, 1.0)], [0.5, 0.5], PATIENCE * 0.99)  # busy, not starved
@example([Segment(5.0, 1.0, 0.0)], [0.2, 3.0, 0.001], 1.0)  # waits only, long gaps
def test_a_starved_thread_that_progresses_is_running(
    segments: list[Segment], gaps: list[float], callback: float
) -> None:
    starved = [Segment(s.duration, 1.0, s.running) for s in segments]  # always active
    timeline = Timeline(starved)
    judge = LoopJudge(PATIENCE)
    for i, (t, times) in enumerate(answers(timeline, gaps, since=0.0)):
        since = times.cpu % callback  # progress after each callback's CPU
        verdict = judge.judge(7, LoopTimes(t, times.cpu, times.wait, since))
        if t > timeline.end:
            break  # (the model stops after its segments)
        assert verdict.running == (i > 0), (i, t, verdict)


@given(
    st.floats(0.001, 100.0),
    st.floats(0.0, 100.0),
    st.floats(0.0, 100.0),
    st.floats(PATIENCE, 1000.0),
)
def test_a_spinning_loop_is_never_running(
    span: float, cpu: float, wait: float, since: float
) -> None:
    before = LoopTimes(0.0, 0.0, 0.0, 0.0)
    now = LoopTimes(span, cpu, wait, since)
    assert loop_verdict(before, now, PATIENCE).state is LoopState.SPINNING


def test_the_rules_edges() -> None:
    before = LoopTimes(10.0, 1.0, 1.0, 0.0)
    # half the span exactly counts; less does not
    assert loop_verdict(before, LoopTimes(11.0, 1.25, 1.25, 0.1), PATIENCE).running
    assert not loop_verdict(before, LoopTimes(11.0, 1.25, 1.2, 0.1), PATIENCE).running
    # an idle time of the patience is stopped, whatever the share
    long = LoopTimes(10.0 + 2 * PATIENCE, 1.0 + PATIENCE, 1.0, 0.1)
    assert loop_verdict(before, long, PATIENCE).state is LoopState.STOPPED
    # without a run-queue figure, the CPU time alone (a busy loop, not a starved one)
    assert loop_verdict(
        LoopTimes(0.0, 0.0, None, 0.0), LoopTimes(1.0, 0.9, None, 0.1), PATIENCE
    ).running
    # patience 0 (--broker-timeout 0): never running
    assert not loop_verdict(before, LoopTimes(11.0, 2.0, 1.0, 0.0), 0.0).running
    # no time between the answers: no verdict
    assert loop_verdict(before, before, PATIENCE).state is LoopState.UNJUDGED


def test_the_judge_compares_with_an_answer_at_least_the_min_span_older() -> None:
    judge = LoopJudge(PATIENCE, min_span=0.5)
    assert judge.judge(1, LoopTimes(0.0, 0.0, 0.0, 0.0)).state is LoopState.UNJUDGED
    # 0.1 s later: against the first (none is 0.5 s older yet)
    assert judge.judge(1, LoopTimes(0.1, 0.05, 0.05, 0.0)).running
    # a burst of wait counted late is averaged over 0.5 s or more, not 0.1 s
    judge.judge(1, LoopTimes(0.6, 0.1, 0.5, 0.0))
    verdict = judge.judge(1, LoopTimes(0.7, 0.1, 0.5, 0.0))  # 0.1 s of nothing
    assert verdict.running and "of 0.60 s" in verdict.reason
    # another instance starts over; an answer without clocks is unjudged
    assert judge.judge(2, LoopTimes(0.8, 0.0, 0.0, 0.0)).state is LoopState.UNJUDGED
    assert judge.judge(2, None).state is LoopState.UNJUDGED


@given(segments, gaps)
@settings(max_examples=100)
@example([Segment(3.0, 1.0, 0.1)], [0.1] * 40)
def test_the_agent_counts_a_stopped_broker_silent_since_it_stopped(
    segments: list[Segment], gaps: list[float]
) -> None:
    """The agent's record of its broker, fed the answers at the times they were made (the
    agent's and the broker's clocks one), counts a broker whose thread stopped at ``T``
    silent for ``t - T`` at least at every ``t``: fenced by ``T + --broker-timeout``, as a
    loop that stopped making progress then; while it ran, the silence it counts stays
    under the time between answers plus the patience."""
    timeline = Timeline(segments)
    stopped_at = timeline.end
    broker = LocalBroker(PATIENCE)
    for t, times in answers(timeline, gaps, since=0.0):
        # its last progress: at the latest when it stopped (a starved loop: any earlier)
        live = LivenessView(max(0.0, t - stopped_at), "active", pid=9, times=times)
        broker.heard(t, t, live)
        silent, _ = broker.silence(t)
        assert silent >= t - stopped_at - 1e-9, (t, stopped_at, silent)


def test_the_liveness_answer_carries_the_loops_clocks() -> None:
    answer = {
        "alive": True,
        "last_progress_ms": 2200.0,
        "ha_state": "active",
        "pid": 5,
        "loop_clock_ms": 1000.0,
        "loop_cpu_ms": 300.0,
        "loop_wait_ms": 600.0,
        "loop_cpu_since_progress_ms": 40.0,
    }
    view = liveness_view(answer)
    assert view is not None and view.times == LoopTimes(1.0, 0.3, 0.6, 0.04)
    assert liveness_view({**answer, "loop_wait_ms": None}).times == LoopTimes(  # type: ignore[union-attr]
        1.0, 0.3, None, 0.04
    )
    bad_values: list[dict[str, object]] = [
        {"loop_cpu_ms": -1},
        {"loop_clock_ms": True},
        {"loop_wait_ms": "x"},
        {"loop_cpu_ms": float("inf")},
        {"loop_cpu_since_progress_ms": 10**400},
    ]
    for bad in bad_values:
        view = liveness_view({**answer, **bad})
        assert view is not None and view.times is None, bad  # judged by its progress alone
    older = {k: v for k, v in answer.items() if not k.startswith("loop_")}
    assert liveness_view(older).times is None  # type: ignore[union-attr]


@pytest.mark.parametrize("progress", [0.1, 3.0])
def test_a_late_loop_that_runs_counts_as_answering_now(progress: float) -> None:
    broker = LocalBroker(PATIENCE)
    first = LoopTimes(10.0, 1.0, 1.0, 0.0)
    later = LoopTimes(11.0, 1.2, 1.8, 0.05)  # 1 s: ran 0.2 s, waited 0.8 s
    broker.heard(10.0, 10.0, LivenessView(progress, "active", pid=3, times=first))
    broker.heard(11.0, 11.01, LivenessView(progress, "active", pid=3, times=later))
    assert broker.running()
    assert broker.silence(11.5)[0] == pytest.approx(0.5)  # counted when the probe was sent
