"""The kernel's witness of a broker's event loop, for when the broker cannot answer.

:Status: Beta

A broker answers its agent's liveness probe from a thread of its own (broker.liveness),
but that thread needs the interpreter lock, which the loop's thread holds while the system
has preempted it: on 2 cores at load 28-33 (5 busy processes beside the scale soak) the
probe went unanswered for 2 s at a time, the agent counted the broker silent and fenced
seven healthy primaries in 25 minutes, each "the broker does not answer", before the
cluster ever settled (docs/reliability.md). The kernel keeps the loop thread's clocks
whatever the broker does: ``/proc/PID/task/TID/schedstat`` holds its CPU time and its
run-queue wait (nanoseconds), the same clocks the broker's own answer carries
(``loop_cpu_ms``, ``loop_wait_ms``; the thread named by ``loop_tid``).

:func:`kernel_loop_times` reads them into :class:`~ha_agent.loop_liveness.LoopTimes`, to
be judged as an answer would be (:func:`~ha_agent.loop_liveness.loop_verdict`): the loop
counts as running while its thread ran or waited for a CPU for at least half the span, and
**spinning** once it used ``--broker-timeout`` of CPU since its last progress. The kernel
cannot say when the loop last progressed, so the CPU since then is counted from the
broker's last answer as if it had not progressed since (an upper bound): a loop that
spins is still found within ``--broker-timeout`` of CPU, one stopped or blocked (SIGSTOP,
a lock) grows neither clock and is fenced as before. Availability only, as every liveness
judgement: the broker's lease still ends its service if its agent cannot renew it, and the
ZooKeeper session still decides who may be primary.

The clocks count a run-queue wait only once it ends, and a thread waiting for the
interpreter lock (a futex) grows neither clock: in the 2026-11-30 soak a primary's loop
thread "ran 0.09 s and waited for a CPU 1.28 s of 3.02 s" and was judged stopped and
fenced, while its broker's other threads (the loop-step sampler waking 50 times a second,
the liveness thread) held the lock waiting for a CPU themselves: sampled at 20 Hz in the
next soak, the loop thread was on a futex in 2-3 % of samples, nearly always while
another thread of the broker was runnable. So the witness also reads what the thread
does at that moment (``/proc/PID/task/TID/stat``'s state, its ``wchan``):
``LoopTimes.runs_now`` says so when it runs or waits for a CPU (``R``), or waits on a futex
while another thread of the broker runs or waits for a CPU (the interpreter lock's holder,
as far as the kernel can tell: only one thread of the interpreter runs Python at a time);
a loop seen so is running at that moment. A loop blocked on a lock nobody runnable holds
(a deadlock), stopped (SIGSTOP: every thread ``T``) or in a system call is not.

Only on the broker's own host (its agent's): the clocks are read by PID, on the same
monotonic clock as the broker's answers. And only for ``WITNESS_LIMIT`` (10 s) after the
broker's own last answer (:mod:`ha_agent.local_broker`): a loop spinning in one callback
on a starved CPU uses its CPU slowly, and its silence must still fence it.

Error Handling
==============

Raises nothing: no such thread (the broker exited, another host, a system without
schedstat) gives None.
"""

from __future__ import annotations

import os
import time

from ha_agent.loop_liveness import LoopTimes

__all__ = ["kernel_loop_times", "thread_runs_now"]

#: the states of ``/proc/PID/task/TID/stat`` that run or wait for a CPU
RUNNABLE = "R"


def kernel_loop_times(pid: int, tid: int, last: LoopTimes, proc: str = "/proc") -> LoopTimes | None:
    """The loop thread ``tid`` of broker ``pid`` as the kernel counts it now, its CPU since
    its last progress bounded from the broker's ``last`` answer (None: unreadable, or not
    the thread ``last`` came from: its CPU time went back)."""
    try:
        with open(f"{proc}/{pid}/task/{tid}/schedstat", "rb") as stat:
            fields = stat.read(128).split()
        clock = time.monotonic()
        cpu, wait = int(fields[0]) / 1e9, int(fields[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None
    if cpu < last.cpu:  # another thread or process by that id
        return None
    since = last.cpu_since_progress + (cpu - last.cpu)
    return LoopTimes(clock, cpu, wait, since, thread_runs_now(pid, tid, proc))


def thread_runs_now(pid: int, tid: int, proc: str = "/proc") -> str:
    """What thread ``tid`` of process ``pid`` does now, when it counts as running or
    waiting for a CPU: ``R``, or waiting on a futex while another thread of ``pid`` is
    ``R`` (said in words); "" otherwise (sleeping, blocked, stopped, unreadable)."""
    task = f"{proc}/{pid}/task"
    state = _state(f"{task}/{tid}")
    if state == RUNNABLE:
        return "its thread runs or waits for a CPU (R)"
    if state != "S" or "futex" not in _read(f"{task}/{tid}/wchan"):
        return ""
    try:
        siblings = [name for name in os.listdir(task) if name != str(tid)]
    except OSError:
        return ""
    for name in siblings:
        if _state(f"{task}/{name}") == RUNNABLE:
            return (
                f"its thread waits on a futex (the interpreter lock) while thread {name} of"
                " the broker runs or waits for a CPU"
            )
    return ""


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as file:
            return file.read(4096)
    except OSError:
        return ""


def _state(task: str) -> str:
    """A task's state letter (``R``, ``S``, ``D``, ``T``...; "": unreadable): the field
    after the command's closing parenthesis (a command may hold one itself)."""
    fields = _read(f"{task}/stat").rpartition(")")[2].split()
    return fields[0] if fields else ""
