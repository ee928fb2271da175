"""The shells of :mod:`broker.loop_steps`: the loop's step tick, the sampler thread and the
garbage collector's callback.

:Status: Beta

- :class:`StepWatch` turns a tick on the loop every :data:`~broker.loop_steps.TICK_INTERVAL`
  (10 ms) while the loop works, every :data:`~broker.loop_steps.IDLE_TICK_INTERVAL` (40 ms)
  after an idle step (:meth:`LoopSteps.next_interval`): the monotonic time and the loop
  thread's CPU time (``time.thread_time``, the thread's own CPU clock) go to
  :meth:`LoopSteps.tick`; a long step is logged (``loop_step_long``, with where the sampler
  saw the loop).
- A sampler thread wakes every :data:`SAMPLE_INTERVAL` (every
  :data:`~broker.loop_steps.IDLE_TICK_INTERVAL` while the loop is idle and the step in
  progress has used less than :data:`~broker.loop_steps.IDLE_STEP` of CPU); while a step
  grows (no turn of the tick), it reads the loop thread's CPU clock
  (``time.pthread_getcpuclockid``) and, once the step passed
  :data:`~broker.loop_steps.WHERE_AFTER` of CPU, takes the loop thread's stack once
  (``sys._current_frames``): the few innermost frames of the project's code, so a long step
  names the code that made it. A loop stopped for good never ends its step; the sampler
  still sees it grow.
- ``gc.callbacks`` times each collection with the CPU clock of the thread that runs it
  (a collection holds the interpreter lock: a collection in another thread stops the loop
  too, and is added to its step); once the next full collection could take 25 ms or
  more (:class:`broker.collector.FreezePolicy`) the tick freezes the heap
  (``gc.freeze()``, :meth:`LoopSteps.take_freeze`), logged as ``gc_frozen``.

Costs: 100 tick callbacks a second while the loop works, 25 while it is idle; as many
wake-ups of the sampler, 50 and 25 (a clock read and a lock); two short calls per
collection. An idle broker's loop thread and sampler used 1.6 % and 0.6 % of a core at
100 and 50 a second (each wake-up costs the process a scheduling round trip).

Error Handling
==============

Nothing raises into the loop or the collector; a platform without per-thread CPU clocks
(not Linux) measures nothing and says so once in the log (``loop_steps_unmeasured``).
"""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import threading
import time
from types import FrameType
from typing import Any

from broker.loop_steps import IDLE_STEP, IDLE_TICK_INTERVAL, WHERE_AFTER, LoopSteps
from common.log import get_logger

__all__ = ["SAMPLE_INTERVAL", "StepWatch", "where_of"]

#: How often the sampler thread looks at the step in progress (seconds).
SAMPLE_INTERVAL = 0.02
#: Frames of the project's code a stack is named by (innermost first).
WHERE_FRAMES = 4

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_OURS = tuple(_ROOT + package + os.sep for package in ("broker", "common"))


def where_of(frame: FrameType | None) -> str:
    """``frame``'s stack as the innermost frames of the project's code, innermost first
    (``broker/ha/primary.py:120 promote < ...``), after the innermost frame when it is
    not ours (a library's, where the time went)."""
    parts: list[str] = []
    first = True
    while frame is not None and len(parts) < WHERE_FRAMES:
        code = frame.f_code
        name = code.co_filename
        ours = name.startswith(_OURS)
        if ours or first:
            shown = name[len(_ROOT) :] if ours else _library_path(name)
            parts.append(f"{shown}:{frame.f_lineno} {code.co_name}")
        first = False
        frame = frame.f_back
    return " < ".join(parts)


def _library_path(name: str) -> str:
    """A library file's path from its package (``json/encoder.py``), not the machine's."""
    head, tail = os.path.split(name)
    return f"{os.path.basename(head)}/{tail}"


class StepWatch:
    """The tick, the sampler thread and the collector's callback of one loop's steps.
    :meth:`start` on the loop, :meth:`stop` from it."""

    def __init__(self, steps: LoopSteps) -> None:
        self.steps = steps
        self._log = get_logger("broker")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._ident = 0
        self._clock: int | None = None
        self._stopped = threading.Event()
        self._sampler: threading.Thread | None = None
        self._gc_started = 0.0

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._ident = threading.get_ident()
        try:
            self._clock = time.pthread_getcpuclockid(self._ident)
            time.clock_gettime(self._clock)
        except (AttributeError, OSError) as exc:  # no per-thread CPU clock here
            self._log.warning("loop_steps_unmeasured", reason=str(exc) or type(exc).__name__)
            return
        gc.callbacks.append(self._collected)
        self._sampler = threading.Thread(target=self._sample, name="loop-steps", daemon=True)
        self._sampler.start()
        self._turn()

    def stop(self) -> None:
        self._stopped.set()
        if self._handle is not None:
            self._handle.cancel()
        if self._collected in gc.callbacks:
            gc.callbacks.remove(self._collected)

    # the loop ------------------------------------------------------------------------------
    def _turn(self) -> None:
        assert self._loop is not None
        long_step = self.steps.tick(time.monotonic(), time.thread_time())
        self._handle = self._loop.call_later(self.steps.next_interval(), self._turn)
        if self.steps.take_freeze():
            gc.freeze()  # constant time: the collector's lists are moved, not walked
            self._log.info("gc_frozen", freezes=self.steps.freezes)
        if long_step is not None:
            self._log.warning(
                "loop_step_long",
                cpu_ms=round(long_step.cpu * 1000.0, 1),
                gc_ms=round(long_step.gc * 1000.0, 1),
                gc_generation=long_step.gc_generation,
                where=long_step.where,
            )

    # the collector (any thread, the interpreter lock held) ----------------------------------
    def _collected(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_started = time.thread_time()
        else:
            self.steps.gc_paused(
                max(0.0, time.thread_time() - self._gc_started),
                on_loop=threading.get_ident() == self._ident,
                generation=int(info.get("generation", 0)),
            )

    # the sampler thread ----------------------------------------------------------------------
    def _sample(self) -> None:
        clock = self._clock
        assert clock is not None
        wait = SAMPLE_INTERVAL
        while not self._stopped.wait(wait):
            try:
                turn, _since, cpu = self.steps.in_progress(
                    time.monotonic(), time.clock_gettime(clock)
                )
            except OSError:  # the loop's thread is gone
                return
            idle = self.steps.idle and cpu < IDLE_STEP
            wait = IDLE_TICK_INTERVAL if idle else SAMPLE_INTERVAL
            if cpu >= WHERE_AFTER and self.steps.wants_where(turn):
                frame = sys._current_frames().get(self._ident)
                self.steps.note_where(turn, where_of(frame))
                del frame
