"""Starved is not stopped: whether a broker's event loop runs, from its liveness answers.

:Status: Beta

The broker answers ``GET /liveness`` off its event loop (:mod:`broker.liveness`): how long
ago its loop last made progress, and the loop thread's clocks: its CPU time, its time
waiting on a run queue for a CPU, and the CPU time it used since its last progress. At
10,000 queues on 2 cores at load 9-45, a healthy primary was fenced by its agent: its
loop ran its progress timer 2.2 s late, waiting for a CPU. A rule on the wall clock alone
cannot tell a loop that runs late from one that stopped; the thread's clocks can:

- a thread that runs, or waits on a run queue for a CPU, grows its CPU time plus its
  run-queue wait as fast as the wall clock (a starved one mostly waits, a busy one mostly
  runs: both are running);
- a thread that is stopped (SIGSTOP) or blocked in a system call grows neither; one that
  sleeps between timers (an idle loop) grows little, but its progress is fresh.
- a wait under way is not counted yet (the kernel adds it when it ends), so a starved
  thread caught in a long wait looks idle; the kernel's witness (:mod:`ha_agent.loop_witness`)
  also reads what the thread does at that moment (``LoopTimes.runs_now``): seen running
  or waiting for a CPU then, it is running at that moment, whatever the span before.

:func:`loop_verdict` judges two answers of one broker instance, ``span`` seconds apart on
the broker's own monotonic clock (so a late answer does not stretch it): the loop counts
as **running** while its CPU time plus run-queue wait grew by at least half the span, the
time it did neither (``idle``) is under ``patience`` (``--broker-timeout``), and the CPU
it used since its last progress is under ``patience`` too (a callback that spins uses CPU
without progress: **spinning**). A running loop's answer counts as an answer ``idle``
seconds before it was made (its thread was last seen running or waiting no later);
otherwise it is **stopped** (or, without clocks, **unjudged**), and its agent judges it by
its last progress, as before. :class:`LoopJudge` keeps the answers of one instance and
compares each with one at least :data:`MIN_SPAN` older.

What it guarantees (``tests/agent/test_loop_liveness.py``, hypothesis): a loop whose
thread neither ran nor waited for a CPU since ``T`` is never counted running at a time
``T + patience`` or later, and a running verdict never counts it as answering after
``T``, whatever the answers before (the time it did neither is in the span): its agent
fences it by ``T + --broker-timeout``, as a loop that stopped progressing at ``T``; a
thread always running or waiting, whose callbacks each use less than ``patience`` of
CPU, is counted running at every answer after its first. (A thread waiting for the
interpreter lock while the broker thread that holds it runs or waits for a CPU counts as
waiting: the same starvation, one thread removed; the kernel's witness tells it, at the
moment it reads, from the threads' states, see :mod:`ha_agent.loop_witness`.) (The kernel adds
a wait to the run-queue figure when the wait ends, as the thread gets a CPU: a wait still
under way is not counted yet. The liveness thread needs the interpreter lock, which the
loop's thread gives up only once it runs, so an answer mostly follows a run.)

Pure: no I/O, no clock; times come in as numbers. THREAD UNSAFE (:class:`LoopJudge`): the
agent's loop thread owns it.

Error Handling
==============

Raises nothing; an answer without clocks (an older broker, a platform without per-thread
CPU clocks) is unjudged.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["MIN_SPAN", "LoopJudge", "LoopState", "LoopTimes", "LoopVerdict", "loop_verdict"]

#: The least span of the broker's clock a verdict compares over when it can (seconds): the
#: kernel counts a run-queue wait when it ends, so short spans see a starved thread's
#: waits in bursts.
MIN_SPAN = 0.5
#: The most answers of one instance kept (a bound: only those within MIN_SPAN are needed).
MAX_KEPT = 64


class LoopState(StrEnum):
    RUNNING = "running"  # running or waiting for a CPU, progressing: counted as answering
    STOPPED = "stopped"  # neither ran nor waited for a CPU for long enough
    SPINNING = "spinning"  # used ``patience`` of CPU since its last progress
    UNJUDGED = "unjudged"  # no clocks, or no earlier answer of this instance


@dataclass(frozen=True)
class LoopTimes:
    """The loop thread's clocks in one liveness answer (seconds)."""

    clock: float  # the broker's monotonic clock when it answered
    cpu: float  # the loop thread's CPU time
    wait: float | None  # its time waiting on a run queue (None: the system does not say)
    cpu_since_progress: float  # the CPU time it used since the loop last made progress
    #: what the kernel saw the thread doing at ``clock`` itself, when that is running or
    #: waiting for a CPU (:func:`ha_agent.loop_witness.kernel_loop_times`; "": not seen so,
    #: or not read: the broker's own answers): a wait under way, which the run-queue clock
    #: counts only once it ends
    runs_now: str = ""


@dataclass(frozen=True)
class LoopVerdict:
    state: LoopState
    reason: str
    #: seconds of the span its thread neither ran nor waited for a CPU: it last did one or
    #: the other at most this long before the answer (the answer counts from then)
    idle: float = 0.0

    @property
    def running(self) -> bool:
        """The loop counts as answering now, however late its last progress."""
        return self.state is LoopState.RUNNING


def loop_verdict(before: LoopTimes, now: LoopTimes, patience: float) -> LoopVerdict:
    """Is the loop running at ``now``, judged against the earlier answer ``before`` of the
    same instance, with ``patience`` (``--broker-timeout``; 0: never counted running)?"""
    span = now.clock - before.clock
    if not span > 0:
        return LoopVerdict(LoopState.UNJUDGED, "no time between the two answers")
    if now.cpu_since_progress >= patience:
        return LoopVerdict(
            LoopState.SPINNING,
            f"{now.cpu_since_progress:.2f} s of CPU since its last progress"
            f" (--broker-timeout {patience:g} s)",
        )
    waited = 0.0 if now.wait is None or before.wait is None else now.wait - before.wait
    ran = now.cpu - before.cpu
    grew = max(0.0, ran) + max(0.0, waited)
    idle = max(0.0, span - grew)
    shares = f"its loop thread ran {ran:.2f} s and waited for a CPU {waited:.2f} s of {span:.2f} s"
    if now.runs_now:  # running or waiting at ``now`` itself: its answer counts from now
        return LoopVerdict(LoopState.RUNNING, f"{shares}; now {now.runs_now}", 0.0)
    if grew < span / 2 or idle >= patience:
        return LoopVerdict(LoopState.STOPPED, shares, idle)
    return LoopVerdict(LoopState.RUNNING, shares, idle)


class LoopJudge:
    """The answers of one broker instance, each judged against one at least ``min_span``
    older (the newest such; before there is one, the oldest kept)."""

    def __init__(self, patience: float, min_span: float = MIN_SPAN) -> None:
        self.patience = patience
        self.min_span = min_span
        self._pid: int | None = None
        self._kept: list[LoopTimes] = []

    def judge(self, pid: int | None, times: LoopTimes | None) -> LoopVerdict:
        """The verdict on an answer of instance ``pid`` with the loop's clocks ``times``."""
        if pid is None or times is None:
            self.reset()
            return LoopVerdict(LoopState.UNJUDGED, "the broker does not tell its loop's clocks")
        kept = self._kept
        if pid != self._pid or (kept and times.clock < kept[-1].clock):
            self._pid, kept[:] = pid, []  # another instance
        at = 0
        for i, earlier in enumerate(kept):
            if times.clock - earlier.clock >= self.min_span:
                at = i  # the newest at least min_span older
        del kept[:at]  # never needed again: later answers compare with later ones
        before = kept[0] if kept else None
        kept.append(times)
        del kept[:-MAX_KEPT]
        if before is None:
            return LoopVerdict(LoopState.UNJUDGED, "its first answer with the loop's clocks")
        return loop_verdict(before, times, self.patience)

    def reset(self) -> None:
        """Forget the answers (the broker was killed or restarted)."""
        self._pid, self._kept = None, []
