"""The event loop's steps, measured as CPU time on its thread (issue 25, "no long stalls").

:Status: Beta

A *step* is the work the loop ran between two turns of its step tick (a callback every
:data:`TICK_INTERVAL` while the loop works, every :data:`IDLE_TICK_INTERVAL` after an idle
step: :meth:`LoopSteps.next_interval`): the CPU time the loop's thread used between the
two turns, plus
the garbage collections other threads ran meanwhile (a collection holds the interpreter
lock: the loop waits for it). One callback that holds the loop makes one long step; a turn
of many short callbacks makes a step as long as their sum, which holds every other client
of the loop just as long. So a step bounds one callback's run time from above (by at most a
tick interval's worth of other work: uvloop does not let Python time its callbacks one by
one; the first step after an idle one, by up to an idle interval's worth). CPU time, not
wall-clock: on a loaded machine the wall-clock gap between two turns
also counts the wait for a CPU, which is the machine's doing, not the loop's (that is the
loop's *lag*, :class:`broker.liveness.Durations` in the progress timer).

The shells (:mod:`broker.loop_step_watch`) feed this core: the tick with the monotonic time
and the loop thread's CPU time, the garbage collector's callbacks with each pause, and a
sampler thread with where the loop was while a step grew long (the stack it saw). The
core keeps:

- a histogram of the steps (:class:`~broker.liveness.Durations`: a window for the periodic
  ``loop_lag`` event, the whole run for ``/metrics``);
- the longest step since the start and the last long ones (at least :data:`LONG_STEP`),
  each with where the sampler saw the loop (``GET /api/status``'s ``loop``, the
  ``loop_step_long`` event);
- the garbage collector's pauses (count, total, longest, longest per generation and a
  histogram; those of the loop's thread and those of the others), and when to freeze the
  heap before a full collection would be long (:meth:`LoopSteps.take_freeze`,
  :class:`broker.collector.FreezePolicy`).

Plain data and arithmetic, times passed in (seconds). THREAD SAFE: one lock for the loop's
thread and the sampler thread; the collector's callback takes no lock (it runs in whatever
thread allocated, possibly the loop's inside this very lock: it would wait for itself) and
only appends to a deque, which the next turn of the tick reads.

Error Handling
==============

Raises nothing. A CPU clock that goes backwards (it does not) would count as a step of 0.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from broker.collector import FREEZE_AFTER, FreezePolicy
from broker.liveness import LAG_BOUNDS, Durations, LagSummary

__all__ = [
    "FREEZE_AFTER",
    "IDLE_STEP",
    "IDLE_TICK_INTERVAL",
    "LONG_STEP",
    "TICK_INTERVAL",
    "GcPauses",
    "LongStep",
    "LoopSteps",
]

#: How often the loop turns its step tick while it works (seconds).
TICK_INTERVAL = 0.01
#: How often after a step of less than :data:`IDLE_STEP` of CPU: an idle loop (seconds).
IDLE_TICK_INTERVAL = 0.04
#: A step of less CPU than this (seconds) leaves the loop idle (:attr:`LoopSteps.idle`).
IDLE_STEP = 0.001
#: A step at least this long (CPU seconds) is a long one: logged, kept with where it was.
LONG_STEP = 0.1
#: A step in progress this long (CPU seconds) has its stack taken by the sampler.
WHERE_AFTER = 0.03
#: Long steps kept for the status (the latest).
LONG_STEPS_KEPT = 10


@dataclass(frozen=True)
class LongStep:
    """One long step: its CPU time, when it ended (monotonic seconds), the part of it that
    was garbage collection (the loop thread's and other threads'), and where the sampler
    saw the loop."""

    cpu: float
    ended_at: float
    gc: float = 0.0
    where: str | None = None
    #: the oldest generation collected within it (2: a full collection), None for none
    gc_generation: int | None = None

    def view(self, now: float) -> dict[str, Any]:
        return {
            "cpu_ms": round(self.cpu * 1000.0, 1),
            "ago_s": round(max(0.0, now - self.ended_at), 1),
            "gc_ms": round(self.gc * 1000.0, 1),
            "gc_generation": self.gc_generation,
            "where": self.where,
        }


@dataclass
class GcPauses:
    """The garbage collector's pauses: count, total and longest (CPU seconds), the longest
    of each generation, and their histogram (for a p99)."""

    count: int = 0
    total: float = 0.0
    longest: float = 0.0
    window_longest: float = 0.0
    by_generation: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    pauses: Durations = field(default_factory=Durations)

    def add(self, seconds: float, generation: int = 0) -> None:
        self.count += 1
        self.total += seconds
        self.longest = max(self.longest, seconds)
        self.window_longest = max(self.window_longest, seconds)
        g = min(max(generation, 0), 2)
        self.by_generation[g] = max(self.by_generation[g], seconds)
        self.pauses.record(seconds)


class LoopSteps:
    """See the module docstring. The tick calls :meth:`tick`, the collector's callback
    :meth:`gc_paused`, the sampler :meth:`in_progress` and :meth:`note_where`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.steps = Durations()
        self.gc = GcPauses()
        self.longest: LongStep | None = None
        self.long_steps: deque[LongStep] = deque(maxlen=LONG_STEPS_KEPT)
        #: long steps since the start
        self.long_total = 0
        self._last: tuple[float, float] | None = None  # (monotonic, loop CPU) of the last turn
        self._turns = 0
        #: collections not read yet (seconds, on the loop's thread?): appended by the
        #: collector's callback without a lock, read by the tick and the sampler
        self._collections: deque[tuple[float, bool, int]] = deque()
        self._freeze = False
        self._policy = FreezePolicy(FREEZE_AFTER)
        #: the heap was frozen before a long full collection, how many times
        self.freezes = 0
        self._where: tuple[int, str] | None = None  # (turn, stack) the sampler noted
        #: the last step had less than IDLE_STEP of CPU (read by the sampler thread too)
        self.idle = False

    # the loop's tick ----------------------------------------------------------------------
    def tick(self, now: float, cpu: float) -> LongStep | None:
        """A turn of the tick at ``now`` with the loop thread's CPU clock at ``cpu``: the
        step since the last turn is recorded; the step when it was a long one."""
        foreign = collected = 0.0
        oldest: int | None = None
        for seconds, on_loop, generation in _drain(self._collections):
            self.gc.add(seconds, generation)
            collected += seconds
            oldest = generation if oldest is None else max(oldest, generation)
            if not on_loop:
                foreign += seconds
            if self._policy.collected(generation, seconds):
                self._freeze = True
        with self._lock:
            last, self._last = self._last, (now, cpu)
            turn, self._turns = self._turns, self._turns + 1
            noted, self._where = self._where, None
            if last is None:
                return None
            step = max(0.0, cpu - last[1]) + foreign
            self.steps.record(step)
            self.idle = step < IDLE_STEP
            where = noted[1] if noted is not None and noted[0] == turn else None
            longer = self.longest is None or step > self.longest.cpu
            if not longer and step < LONG_STEP:
                return None
            record = LongStep(step, now, collected, where, oldest)
            if longer:
                self.longest = record
            if step < LONG_STEP:
                return None
            self.long_steps.append(record)
            self.long_total += 1
            return record

    # the garbage collector ---------------------------------------------------------------
    def next_interval(self) -> float:
        """When the tick should turn next (seconds from now): :data:`TICK_INTERVAL` after a
        step of work, :data:`IDLE_TICK_INTERVAL` after an idle one. An idle broker turned
        100 ticks a second for nothing (1 % of a core; its sampler thread, woken as often,
        half as much again): now 25. The price: the first step of work after an idle
        one is measured over up to :data:`IDLE_TICK_INTERVAL`, so it bounds its longest
        callback from above by up to that much other work (then the tick turns every
        :data:`TICK_INTERVAL` again): an over-count, never an under-count."""
        return IDLE_TICK_INTERVAL if self.idle else TICK_INTERVAL

    def gc_paused(self, seconds: float, on_loop: bool, generation: int = 0) -> None:
        """A collection of ``generation`` took ``seconds`` of CPU; ``on_loop``: on the
        loop's thread (whose CPU clock counts it already), else it is added to the step in
        progress. No lock (see the module docstring): a deque's append is atomic."""
        self._collections.append((seconds, on_loop, generation))

    def take_freeze(self) -> bool:
        """Whether to freeze the heap now (``gc.freeze()``), once: the next full collection
        could take :data:`FREEZE_AFTER` or more (:class:`broker.collector.FreezePolicy`).
        A full collection walks every object the collector tracks and that is not frozen;
        with thousands of queues that was hundreds of milliseconds in one step (10,000
        queues: 250-460 ms), however the rest of the work is sliced. Frozen objects are
        walked no more (the next full collections walk what came after). The price: a
        reference cycle among frozen objects that dies later is not freed (reference
        counting frees the rest as always) until a backup's catch-up ends
        (``broker.ha.queue_replicator.CatchUpGc`` unfreezes), as after a store's recovery
        (``broker.server``); docs/reliability.md, "No long stalls"."""
        if not self._freeze:
            return False
        self._freeze = False
        self._policy.frozen()
        self.freezes += 1
        return True

    # the sampler ----------------------------------------------------------------------------
    def in_progress(self, now: float, cpu: float) -> tuple[int, float, float]:
        """(turn, seconds since the last turn, CPU seconds since it) for the sampler, which
        reads the loop thread's CPU clock at ``now``."""
        foreign = sum(seconds for seconds, on_loop, _g in list(self._collections) if not on_loop)
        with self._lock:
            if self._last is None:
                return self._turns, 0.0, 0.0
            return (
                self._turns,
                max(0.0, now - self._last[0]),
                max(0.0, cpu - self._last[1]) + foreign,
            )

    def wants_where(self, turn: int) -> bool:
        """Whether the step after ``turn`` turns has no stack noted yet."""
        with self._lock:
            return self._where is None or self._where[0] != turn

    def note_where(self, turn: int, where: str) -> None:
        """Where the loop was during the step after ``turn`` turns (the first stack seen
        once it passed :data:`WHERE_AFTER` is kept)."""
        with self._lock:
            if self._turns == turn and (self._where is None or self._where[0] != turn):
                self._where = (turn, where)

    # what is shown ------------------------------------------------------------------------
    def window(self) -> tuple[LagSummary, float]:
        """The steps' summary since the last call and the longest collection meanwhile."""
        summary = self.steps.window()
        gc_longest, self.gc.window_longest = self.gc.window_longest, 0.0
        return summary, gc_longest

    def view(self, now: float) -> dict[str, Any]:
        """The status's ``loop``: the longest step since the start, the last window's p50
        and p99, the long steps kept (latest last), the collector's pauses, and the steps
        since the start by bucket (``[upper bound ms or None, count]``: a client's diff of
        two reads is what the loop ran between them)."""
        with self._lock:
            longest = self.longest
            long_steps = list(self.long_steps)
            long_total = self.long_total
        gc = GcPauses(self.gc.count, self.gc.total, self.gc.longest)
        last = self.steps.last
        return {
            "step_max_ms": 0.0 if longest is None else round(longest.cpu * 1000.0, 1),
            "step_max_where": None if longest is None else longest.where,
            "step_p50_ms": round(last.p50 * 1000.0, 3),
            "step_p99_ms": round(last.p99 * 1000.0, 3),
            "long_steps_total": long_total,
            "long_steps": [step.view(now) for step in long_steps],
            "gc_pauses": gc.count,
            "gc_max_ms": round(gc.longest * 1000.0, 1),
            "gc_max_ms_by_generation": [round(g * 1000.0, 1) for g in self.gc.by_generation],
            "gc_counts": _counts(self.gc.pauses),
            "gc_freezes": self.freezes,
            "step_counts": _counts(self.steps),
        }


def _counts(durations: Durations) -> list[list[Any]]:
    """A histogram since the start by bucket: ``[upper bound ms or None, count]``."""
    return [
        [None if i == len(LAG_BOUNDS) else round(LAG_BOUNDS[i] * 1000.0, 3), count]
        for i, count in enumerate(list(durations.total))
    ]


def _drain(collections: deque[tuple[float, bool, int]]) -> Iterator[tuple[float, bool, int]]:
    """What the collector's callback appended so far (it may append meanwhile)."""
    while True:
        try:
            yield collections.popleft()
        except IndexError:
            return
