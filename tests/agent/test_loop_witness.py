"""The kernel's witness of a broker's loop (ha_agent/loop_witness.py): a thread that runs
or waits for a CPU is judged running from /proc alone, one stopped is judged stopped, one
that spins is judged spinning by the CPU it used since the broker's last answer; a thread
waiting for the interpreter lock behind a runnable one runs, one blocked on a lock nobody
runnable holds does not. Real processes (a Python child standing for the loop's thread),
real /proc."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from common.polling import poll_until
from ha_agent.broker_check import LivenessView
from ha_agent.local_broker import WITNESS_LIMIT, LocalBroker
from ha_agent.loop_liveness import MIN_SPAN, LoopJudge, LoopState, LoopTimes, loop_verdict
from ha_agent.loop_witness import kernel_loop_times, thread_runs_now

START = LoopTimes(clock=0.0, cpu=0.0, wait=0.0, cpu_since_progress=0.0)


@pytest.fixture
def busy() -> Iterator[subprocess.Popen[bytes]]:
    """A process whose main thread spins (busy, or waiting for a CPU on a loaded machine)."""
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def reading_after(pid: int, before: LoopTimes, span: float) -> LoopTimes:
    """The kernel's reading at least ``span`` seconds (monotonic) after ``before``."""
    return poll_until(
        lambda: (
            times
            if (times := kernel_loop_times(pid, pid, START)) is not None
            and times.clock - before.clock >= span
            else None
        ),
        timeout=60,
        interval=0.05,
    )


def test_a_busy_thread_is_running_and_a_stopped_one_stopped(busy: subprocess.Popen[bytes]) -> None:
    judge = LoopJudge(patience=600.0)
    first = kernel_loop_times(busy.pid, busy.pid, START)
    assert first is not None
    judge.judge(busy.pid, first)
    running = reading_after(busy.pid, first, MIN_SPAN)
    assert judge.judge(busy.pid, running).state is LoopState.RUNNING
    os.kill(busy.pid, signal.SIGSTOP)
    try:
        stopped_at = reading_after(busy.pid, running, 0.1)
        judge.judge(busy.pid, stopped_at)
        later = reading_after(busy.pid, stopped_at, 1.0)
        verdict = judge.judge(busy.pid, later)
        assert verdict.state is LoopState.STOPPED, verdict.reason
    finally:
        os.kill(busy.pid, signal.SIGCONT)


def test_cpu_since_progress_counts_from_the_last_answer(busy: subprocess.Popen[bytes]) -> None:
    """The kernel cannot see progress: the CPU used since the broker's last answer counts
    as used without progress, so a spinning loop is found by the CPU it burns."""
    last = kernel_loop_times(busy.pid, busy.pid, START)
    assert last is not None
    answer = LoopTimes(last.clock, last.cpu, last.wait, cpu_since_progress=0.25)
    now = poll_until(
        lambda: (
            t
            if (t := kernel_loop_times(busy.pid, busy.pid, answer)) is not None
            and t.cpu - answer.cpu >= 0.3
            else None
        ),
        timeout=120,
        interval=0.05,
    )
    assert now.cpu_since_progress == pytest.approx(0.25 + now.cpu - answer.cpu)
    judge = LoopJudge(patience=0.5)
    judge.judge(busy.pid, answer)
    assert judge.judge(busy.pid, now).state is LoopState.SPINNING


def test_no_such_thread_or_another_one_gives_nothing(busy: subprocess.Popen[bytes]) -> None:
    assert kernel_loop_times(busy.pid, 1, START) is None  # not a thread of that process
    ahead = LoopTimes(0.0, cpu=1e9, wait=0.0, cpu_since_progress=0.0)
    assert kernel_loop_times(busy.pid, busy.pid, ahead) is None  # its CPU went back


def test_a_silent_broker_whose_loop_runs_is_not_counted_silent(
    busy: subprocess.Popen[bytes],
) -> None:
    """LocalBroker.witnessed: no liveness answer, the kernel says the loop thread runs:
    counted as an answer (its silence stays short); stopped (SIGSTOP): it is not, and the
    silence grows from the last reading that counted."""
    broker = LocalBroker(patience=600.0)
    first = kernel_loop_times(busy.pid, busy.pid, START)
    assert first is not None
    live = LivenessView(
        last_progress=0.0, ha_state="active", epoch=3, pid=busy.pid, times=first, loop_tid=busy.pid
    )
    broker.heard(first.clock, first.clock, live)  # its last answer, then none
    reading_after(busy.pid, first, MIN_SPAN)
    verdict = broker.witnessed()
    assert verdict is not None and verdict.running, verdict
    counted_at = broker._watch.answered_at
    assert counted_at is not None
    os.kill(busy.pid, signal.SIGSTOP)
    try:
        stop = reading_after(busy.pid, first, 0.0)
        reading_after(busy.pid, stop, 1.5)
        broker.witnessed()  # judged against a reading at least MIN_SPAN older
        verdict = broker.witnessed()
        assert verdict is not None and verdict.state is LoopState.STOPPED, verdict
        assert broker._watch.answered_at is not None
        assert broker._watch.answered_at <= stop.clock
    finally:
        os.kill(busy.pid, signal.SIGCONT)


def test_without_the_loops_thread_nothing_is_witnessed() -> None:
    """A broker whose answer does not name its loop's thread (an older one)."""
    broker = LocalBroker()
    broker.live = LivenessView(last_progress=0.0, ha_state="active", pid=os.getpid(), times=START)
    assert broker.witnessed() is None


def test_the_witness_counts_only_for_a_while_after_the_brokers_own_answer(
    busy: subprocess.Popen[bytes],
) -> None:
    """Past WITNESS_LIMIT since the broker's own last answer, only that answer counts."""
    broker = LocalBroker(patience=600.0)
    first = kernel_loop_times(busy.pid, busy.pid, START)
    assert first is not None
    old = LoopTimes(first.clock - WITNESS_LIMIT - 1.0, first.cpu, first.wait, 0.0)
    broker.live = LivenessView(
        last_progress=0.0, ha_state="active", pid=busy.pid, times=old, loop_tid=busy.pid
    )
    assert broker.witnessed() is None


def _child(code: str) -> subprocess.Popen[bytes]:
    """A Python child that prints its main thread's id, then does ``code``."""
    return subprocess.Popen(
        [sys.executable, "-c", f"import sys, threading\nprint(flush=True)\n{code}"],
        stdout=subprocess.PIPE,
    )


@pytest.fixture
def contended() -> Iterator[subprocess.Popen[bytes]]:
    """Two threads of one interpreter spinning: each waits for the interpreter lock (a
    futex) while the other holds it, running or waiting for a CPU."""
    proc = _child(
        "threading.Thread(target=lambda: [0 for _ in iter(int, 1)]).start()\n" + "while True: pass"
    )
    try:
        assert proc.stdout is not None
        proc.stdout.readline()
        yield proc
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def deadlocked() -> Iterator[subprocess.Popen[bytes]]:
    """A main thread blocked for good on a lock nobody will release, nothing else runnable."""
    proc = _child("lock = threading.Lock(); lock.acquire(); lock.acquire()")
    try:
        assert proc.stdout is not None
        proc.stdout.readline()
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_a_thread_waiting_for_the_interpreter_lock_behind_a_runnable_one_runs_now(
    contended: subprocess.Popen[bytes],
) -> None:
    """The soak's fenced primary (docs/reliability.md): its loop thread on a futex, the
    interpreter lock's holder runnable. Seen at most readings (a reading between two
    switches may see both asleep an instant); stopped (SIGSTOP), never."""
    pid = contended.pid
    seen = poll_until(
        lambda: now if (now := thread_runs_now(pid, pid)) else None, timeout=60, interval=0.01
    )
    assert "R" in seen or "futex" in seen, seen
    poll_until(lambda: "futex" in thread_runs_now(pid, pid), timeout=60, interval=0.001)
    os.kill(pid, signal.SIGSTOP)
    try:
        poll_until(lambda: _stopped(pid), timeout=60, interval=0.01)
        assert thread_runs_now(pid, pid) == ""
        times = kernel_loop_times(pid, pid, START)
        assert times is not None and times.runs_now == ""
    finally:
        os.kill(pid, signal.SIGCONT)


def test_a_thread_blocked_on_a_lock_nobody_runnable_holds_does_not_run(
    deadlocked: subprocess.Popen[bytes],
) -> None:
    pid = deadlocked.pid
    poll_until(lambda: "futex" in _wchan(pid), timeout=60, interval=0.01)
    assert thread_runs_now(pid, pid) == ""
    judge = LoopJudge(patience=600.0)
    first = kernel_loop_times(pid, pid, START)
    assert first is not None
    judge.judge(pid, first)
    verdict = judge.judge(pid, reading_after(pid, first, MIN_SPAN))
    assert verdict.state is LoopState.STOPPED, verdict


def test_seen_running_now_is_running_whatever_the_span_before() -> None:
    """A wait under way (uncounted by the run-queue clock) seen as such counts from now;
    a loop that spent its patience of CPU since its last progress still spins."""
    before = LoopTimes(0.0, 1.0, 1.0, 0.0)
    starved = LoopTimes(3.0, 1.09, 2.28, 0.05)  # blocked 1.65 s of 3.02: stopped alone
    assert loop_verdict(before, starved, 2.0).state is LoopState.STOPPED
    seen = LoopTimes(3.0, 1.09, 2.28, 0.05, runs_now="its thread runs or waits for a CPU (R)")
    verdict = loop_verdict(before, seen, 2.0)
    assert verdict.state is LoopState.RUNNING and verdict.idle == 0.0, verdict
    assert "now its thread runs" in verdict.reason
    spinning = LoopTimes(3.0, 3.0, 1.0, 2.5, runs_now="its thread runs or waits for a CPU (R)")
    assert loop_verdict(before, spinning, 2.0).state is LoopState.SPINNING


def _stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        return stat.read().rpartition(")")[2].split()[0] in ("T", "t")


def _wchan(pid: int) -> str:
    with open(f"/proc/{pid}/wchan", encoding="ascii") as wchan:
        return wchan.read()
