"""The loop-step core (broker/loop_steps.py) without a loop, and its shell on a real one:
a step is the loop thread's CPU time between two turns, other threads' collections added;
a long step keeps where the sampler saw the loop; time spent waiting (asleep, or for a CPU)
is not a step."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.loop_step_watch import StepWatch, where_of
from broker.loop_steps import IDLE_STEP, IDLE_TICK_INTERVAL, LONG_STEP, TICK_INTERVAL, LoopSteps


@pytest.fixture(autouse=True)
def unfrozen() -> Iterator[None]:
    """A watch on a real loop may freeze the heap after a long collection: this process is
    left as it was found (tests/ha/test_catch_up_path.py counts frozen objects)."""
    yield
    gc.unfreeze()


def test_a_step_is_the_cpu_time_between_two_turns() -> None:
    steps = LoopSteps()
    assert steps.tick(now=1.0, cpu=0.5) is None  # the first turn opens the first step
    assert steps.tick(now=1.01, cpu=0.502) is None
    long_step = steps.tick(now=3.0, cpu=0.652)  # 2 s of wall, 150 ms of it CPU
    assert long_step is not None and round(long_step.cpu, 6) == 0.15
    view = steps.view(now=4.0)
    assert view["step_max_ms"] == 150.0 and view["long_steps_total"] == 1
    assert view["long_steps"] == [
        {"cpu_ms": 150.0, "ago_s": 1.0, "gc_ms": 0.0, "gc_generation": None, "where": None}
    ]


def test_the_tick_slows_after_an_idle_step_and_quickens_after_a_step_of_work() -> None:
    steps = LoopSteps()
    assert steps.next_interval() == TICK_INTERVAL  # before any step: as if working
    steps.tick(0.0, 0.0)
    steps.tick(0.01, 0.0002)  # 0.2 ms of CPU in 10 ms: idle
    assert steps.idle and steps.next_interval() == IDLE_TICK_INTERVAL
    steps.tick(0.05, 0.0002 + IDLE_STEP)  # a step of work after the idle one
    assert not steps.idle and steps.next_interval() == TICK_INTERVAL
    steps.tick(0.06, 0.0002 + IDLE_STEP)
    assert steps.next_interval() == IDLE_TICK_INTERVAL
    steps.gc_paused(IDLE_STEP, on_loop=False)  # another thread's collection held the loop
    steps.tick(0.1, 0.0002 + IDLE_STEP)
    assert steps.next_interval() == TICK_INTERVAL


def test_other_threads_collections_are_added_and_the_loops_own_are_not_counted_twice() -> None:
    steps = LoopSteps()
    steps.tick(0.0, 0.0)
    steps.gc_paused(0.04, on_loop=True)  # inside the loop thread's CPU time already
    steps.gc_paused(0.07, on_loop=False)  # another thread held the interpreter lock
    long_step = steps.tick(0.2, 0.05)
    assert long_step is not None
    assert round(long_step.cpu, 6) == 0.12 and round(long_step.gc, 6) == 0.11
    assert long_step.gc_generation == 0  # both young: which the step's pause was
    assert steps.gc.count == 2 and steps.gc.longest == 0.07
    assert steps.view(0.2)["gc_max_ms"] == 70.0


def test_a_long_step_names_the_oldest_generation_it_collected() -> None:
    steps = LoopSteps()
    steps.tick(0.0, 0.0)
    steps.gc_paused(0.03, on_loop=True, generation=0)
    steps.gc_paused(0.06, on_loop=True, generation=1)
    long_step = steps.tick(0.2, 0.11)
    assert long_step is not None and long_step.gc_generation == 1
    assert steps.view(0.2)["long_steps"][0]["gc_generation"] == 1


def test_the_sampler_sees_a_step_grow_and_names_where_it_is() -> None:
    steps = LoopSteps()
    steps.tick(0.0, 0.0)
    turn, since, cpu = steps.in_progress(now=0.3, cpu=0.25)
    assert (since, cpu) == (0.3, 0.25)
    assert steps.wants_where(turn)
    steps.note_where(turn, "broker/x.py:1 slow")
    steps.note_where(turn, "broker/x.py:2 later")  # the first one seen is kept
    assert not steps.wants_where(turn)
    long_step = steps.tick(0.31, 0.26)
    assert long_step is not None and long_step.where == "broker/x.py:1 slow"
    steps.note_where(turn, "stale")  # a note for a step that ended is dropped
    assert steps.tick(0.32, 0.261) is None
    assert steps.view(1.0)["step_max_where"] == "broker/x.py:1 slow"


@given(st.lists(st.integers(0, 500).filter(lambda ms: ms != 100), min_size=1, max_size=100))
def test_the_max_is_the_longest_step_and_long_ones_are_those_over_the_bound(
    cpu_ms: list[int],
) -> None:
    steps = LoopSteps()
    steps.tick(0.0, 0.0)
    for i, _ms in enumerate(cpu_ms, 1):
        steps.tick(float(i), sum(cpu_ms[:i]) / 1000.0)
    view = steps.view(float(len(cpu_ms)))
    assert abs(view["step_max_ms"] - max(cpu_ms)) < 0.11
    assert view["long_steps_total"] == sum(1 for ms in cpu_ms if ms > LONG_STEP * 1000)
    summary, _gc = steps.window()
    assert summary.count == len(cpu_ms)
    assert summary.p50 <= summary.p99 <= summary.max


def _spin(seconds: float) -> None:
    until = time.thread_time() + seconds
    while time.thread_time() < until:
        pass


def test_on_a_real_loop_cpu_counts_and_sleeping_does_not() -> None:
    steps = LoopSteps()

    async def scenario() -> None:
        watch = StepWatch(steps)
        watch.start()
        try:
            await asyncio.sleep(0.05)
            time.sleep(0.3)  # the loop blocked, but not on the CPU: not a long step
            await asyncio.sleep(0.03)
            assert steps.view(time.monotonic())["long_steps_total"] == 0
            _spin(0.2)  # a callback that holds the loop on the CPU
            await asyncio.sleep(0.03)
        finally:
            watch.stop()

    asyncio.run(scenario())
    view = steps.view(time.monotonic())
    assert view["long_steps_total"] == 1
    (long_step,) = view["long_steps"]
    assert 190.0 <= long_step["cpu_ms"] < 400.0
    assert long_step["where"] is not None and "test_loop_steps.py" in long_step["where"]
    assert "_spin" in long_step["where"]


class _Recorded(LoopSteps):
    """The steps, with each interval the tick was given."""

    def __init__(self) -> None:
        super().__init__()
        self.intervals: list[float] = []

    def next_interval(self) -> float:
        self.intervals.append(super().next_interval())
        return self.intervals[-1]


def test_an_idle_loop_turns_its_tick_less_often_and_a_working_one_every_interval() -> None:
    """Idle: a turn every IDLE_TICK_INTERVAL at most (the timer may run late on a loaded
    machine, never early); the first step of work brings back TICK_INTERVAL."""
    steps = _Recorded()

    async def scenario() -> None:
        watch = StepWatch(steps)
        watch.start()
        try:
            began = time.monotonic()
            await asyncio.sleep(0.4)
            turns = steps.steps.window().count
            assert turns <= (time.monotonic() - began) / IDLE_TICK_INTERVAL + 3
            assert steps.intervals[-1] == IDLE_TICK_INTERVAL
            marked = len(steps.intervals)
            _spin(0.02)  # a step of work
            deadline = time.monotonic() + 10
            while len(steps.intervals) == marked and time.monotonic() < deadline:
                await asyncio.sleep(0.005)
            assert steps.intervals[marked] == TICK_INTERVAL
        finally:
            watch.stop()

    asyncio.run(scenario())


def test_a_collection_in_another_thread_is_counted_in_the_step() -> None:
    steps = LoopSteps()
    garbage = [[i] for i in range(100_000)]  # something for the collector to walk

    async def scenario() -> None:
        watch = StepWatch(steps)
        watch.start()
        try:
            await asyncio.sleep(0.03)
            thread = threading.Thread(target=gc.collect)
            thread.start()
            await asyncio.to_thread(thread.join)
            # the collection is read at the tick's next turn (up to IDLE_TICK_INTERVAL
            # later on an idle loop, more on a loaded machine)
            deadline = time.monotonic() + 10
            while steps.gc.count == 0 and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
        finally:
            watch.stop()

    asyncio.run(scenario())
    assert len(garbage) == 100_000
    assert steps.gc.count > 0, "a collection timed"
    assert steps.gc.longest > 0.0
    # the other thread's collection held the loop: it is in the step it fell in
    assert steps.view(time.monotonic())["step_max_ms"] >= round(steps.gc.longest * 1000, 1) - 0.2


def test_where_names_our_frames_after_the_innermost_one() -> None:
    import sys

    where = where_of(sys._getframe())
    assert where.startswith("tests/") or "test_loop_steps.py" in where
    assert "test_where_names_our_frames_after_the_innermost_one" in where


def test_a_collection_inside_the_cores_lock_does_not_wait_for_itself() -> None:
    """The collector's callback runs in whatever thread allocated, possibly the loop's
    inside the core's lock (a turn creating its LongStep): it must take no lock. (With one,
    a 10,000-queue broker hung for good on its first such collection.)"""
    steps = LoopSteps()
    steps.tick(0.0, 0.0)
    done = threading.Event()

    def collect_inside_the_lock() -> None:
        with steps._lock:
            steps.gc_paused(0.02, on_loop=False)
        done.set()

    thread = threading.Thread(target=collect_inside_the_lock, daemon=True)
    thread.start()
    assert done.wait(5.0), "the collector's callback waited for the lock its thread held"
    assert round(steps.in_progress(0.1, 0.01)[2], 6) == 0.03  # seen by the sampler already
    long_step = steps.tick(0.2, 0.09)  # 90 ms on the loop's CPU + 20 ms of the other thread
    assert long_step is not None and round(long_step.cpu, 6) == 0.11
    assert steps.gc.count == 1


def test_a_long_full_collection_asks_for_one_freeze() -> None:
    steps = LoopSteps()
    steps.tick(0.0, 0.0)
    steps.gc_paused(0.01, on_loop=True, generation=2)  # full, but short
    steps.gc_paused(0.002, on_loop=True, generation=0)  # young: moves nothing to the old
    steps.tick(0.5, 0.3)
    assert not steps.take_freeze()
    steps.gc_paused(0.08, on_loop=False, generation=2)
    assert not steps.take_freeze()  # seen at the next turn
    steps.tick(0.6, 0.31)
    assert steps.take_freeze() and not steps.take_freeze()  # once
    view = steps.view(0.6)
    assert view["gc_freezes"] == 1
    assert view["gc_max_ms_by_generation"] == [2.0, 0.0, 80.0]
    assert sum(count for _bound, count in view["gc_counts"]) == 3


def test_middle_collections_that_grow_the_old_generation_ask_for_a_freeze_first() -> None:
    """A full collection would walk what the middle collections moved: the heap is frozen
    before that walk reaches the budget, not after a long one (docs/reliability.md)."""
    steps = LoopSteps()
    steps.tick(0.0, 0.0)
    steps.gc_paused(0.015, on_loop=True, generation=2)  # what is left: 15 ms to walk again
    steps.gc_paused(0.006, on_loop=True, generation=1)
    steps.tick(0.1, 0.05)
    assert not steps.take_freeze()  # 21 ms
    steps.gc_paused(0.006, on_loop=True, generation=1)
    steps.tick(0.2, 0.1)
    assert steps.take_freeze()  # 27 ms: the next full collection could take 25 ms or more
    steps.gc_paused(0.006, on_loop=True, generation=1)
    steps.tick(0.3, 0.15)
    assert not steps.take_freeze()  # frozen: only what came after counts
