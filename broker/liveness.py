"""Liveness answered without the event loop: slow is not dead (issue 25).

:Status: Beta

A broker whose event loop has a backlog answers its management API late: every request
waits behind the work queued before it. An agent that took a late answer for no answer
fenced six freshly promoted primaries of a busy cluster (1,004 queues, load 14-18 on 2
cores). Liveness is a different question: *is the loop making progress?* The loop says so
by bumping a counter from a periodic callback (:meth:`LoopProgress.progressed`); a thread
of its own (:mod:`broker.liveness_server`) reads the counter and answers at once, however
long the loop's backlog is. A loop that stopped (blocked in a callback, the process
SIGSTOPped) stops bumping: the answer says how long ago it last did, or, stopped whole,
nothing answers at all. The agent fences only then (``ha_agent.promotion.slow_not_gone``).

A loop that runs late is not one that stopped, and the wall clock cannot tell them apart:
at 10,000 queues on 2 cores at load 9-45 a healthy primary's loop ran its progress timer
2.2 s late, waiting for a CPU, and its agent fenced it. So the answer also carries the loop
thread's clocks (:class:`ThreadTimes`): its CPU time, its time waiting on a run queue, both
read off the loop when the answer is made, and the CPU time it used since its last
progress (the loop notes its CPU time at each progress). The agent's rule
(:mod:`ha_agent.loop_liveness`) counts a loop whose CPU time plus run-queue wait keeps up
with the wall clock as running (starved or busy, not stopped), as long as the CPU it used
since its last progress is under ``--broker-timeout`` (a callback that spins is not
progress).

The lease renewal is answered the same way (:class:`LeaseOffers`): the thread takes the
grant with the time it arrived; the loop applies it before it next asks its lease (a
confirm, a tick, a status), as :class:`~broker.ha.role_events.LeaseGranted` with that time.
Why it is safe: ``docs/reliability.md``, "Slow is not dead".

:class:`Durations` is a histogram of durations with a window; it keeps the loop's lag: the
scheduling delay of its progress timer (how late it ran: the work the loop ran before it,
garbage collection included, and on a loaded machine the wait for a CPU), for ``/metrics``
and the periodic ``loop_lag`` event, and the loop's steps (:mod:`broker.loop_steps`).

Everything here is plain data and arithmetic; times come in as numbers (the monotonic
clock, the same in the loop and the thread). THREAD SAFE: each object has a lock; the loop
and the liveness thread call it, neither waits for the other beyond that lock.

Error Handling
==============

Raises nothing; a lease offered to a broker that is not the primary is refused with a
reason (:meth:`LeaseOffers.offer`).
"""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Durations",
    "LagSummary",
    "LeaseOffers",
    "LoopProgress",
    "RoleNote",
    "ThreadTimes",
    "serving_on_grants",
]

#: Delays the histogram tells apart (seconds, upper bounds; more goes last).
LAG_BOUNDS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0,
)  # fmt: skip

PRIMARY_STATES = frozenset({"active", "recovering"})


@dataclass(frozen=True)
class RoleNote:
    """The broker's HA role as the loop last published it (for answers off the loop)."""

    ha_state: str = "standalone"
    epoch: int = 0
    fenced: bool = False
    #: the shutdown-id of a clean all-stop asked for (None: none); lease answers carry it
    cluster_shutdown: str | None = None
    #: as a primary on a member lease in force over a non-empty set: from when until when
    #: it serves on its members' grants (``MemberLeases.serving_window``); None: not so
    grants_window: tuple[float, float] | None = None


@dataclass(frozen=True)
class ThreadTimes:
    """The loop thread's clocks at one moment (seconds): its CPU time (its own CPU clock)
    and its time spent waiting on a run queue for a CPU (None: the system does not say)."""

    cpu: float
    wait: float | None = None


class LoopProgress:
    """How the loop is doing: the progress counter, when it last moved, the role."""

    def __init__(self, started_at: float, pid: int, broker_id: str = "") -> None:
        self._lock = threading.Lock()
        self._count = 0
        self._at = started_at
        #: the loop thread's CPU time at its last progress (None: not measured)
        self._cpu_at: float | None = None
        self.pid = pid
        self.broker_id = broker_id
        self._role = RoleNote()

    def progressed(
        self, now: float, role: RoleNote | None = None, cpu: float | None = None
    ) -> None:
        """The loop ran a turn at ``now`` (its periodic callback); ``role`` when known;
        ``cpu``: the loop thread's CPU time then (``time.thread_time()``), when measured."""
        with self._lock:
            self._count += 1
            if now > self._at:
                self._at = now
            if cpu is not None:
                self._cpu_at = cpu
            if role is not None:
                self._role = role

    def note_role(self, role: RoleNote) -> None:
        with self._lock:
            self._role = role

    @property
    def role(self) -> RoleNote:
        with self._lock:
            return self._role

    def answer(self, now: float, times: ThreadTimes | None = None) -> dict[str, Any]:
        """The liveness answer at ``now`` (``GET /liveness``): the loop's progress (count,
        milliseconds since it last moved), the role and this broker instance; with the loop
        thread's clocks read at ``now`` (``times``), those clocks, ``now`` itself (the
        broker's monotonic clock: the agent measures the wall time between two answers on
        it) and the CPU time the loop used since its last progress."""
        with self._lock:
            count, at, role, cpu_at = self._count, self._at, self._role, self._cpu_at
        answer: dict[str, Any] = {
            "alive": True,
            "progress": count,
            "last_progress_ms": round(max(0.0, now - at) * 1000.0, 1),
            "ha_state": role.ha_state,
            "epoch": role.epoch,
            "fenced": role.fenced,  # it serves no more and is stopping (its state says no)
            # a primary serving on its members' grants at ``now`` (the agent's session
            # fence asks: such a broker fences itself at its first lapse, issue 26 item 2)
            "serving_on_grants": serving_on_grants(role, now),
            "pid": self.pid,
            "broker_id": self.broker_id,
        }
        if times is not None and cpu_at is not None:
            answer["loop_clock_ms"] = round(now * 1000.0, 3)
            answer["loop_cpu_ms"] = round(times.cpu * 1000.0, 3)
            answer["loop_wait_ms"] = None if times.wait is None else round(times.wait * 1000.0, 3)
            since = max(0.0, times.cpu - cpu_at)
            answer["loop_cpu_since_progress_ms"] = round(since * 1000.0, 3)
        return answer


def serving_on_grants(role: RoleNote, now: float) -> bool:
    """Does the broker serve as a primary on its members' grants at ``now``, as its loop
    last published: a primary state, not fenced, inside its grants' window. Only
    availability rests on it (whether its agent kills it): the broker checks its own lease
    before every confirm, delivery and admission, whatever this answer said."""
    window = role.grants_window
    return (
        role.ha_state in PRIMARY_STATES
        and not role.fenced
        and window is not None
        and window[0] <= now < window[1]
    )


class LeaseOffers:
    """Lease renewals taken off the loop, applied by the loop (the latest one wins, as a
    renewal through the loop always did)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._offer: tuple[float, float] | None = None

    def offer(self, seconds: float, now: float, role: RoleNote) -> str | None:
        """A cluster manager grants ``seconds`` of lease, received at ``now``; the refusal
        (a lease is for a primary) or None when taken."""
        if role.fenced:
            return "this broker is fenced"
        if role.ha_state not in PRIMARY_STATES:
            return f"a lease is for a primary; this broker is {role.ha_state}"
        with self._lock:
            self._offer = (seconds, now)
        return None

    def peek(self) -> tuple[float, float] | None:
        """The latest offer not applied yet, (seconds, received at), left for :meth:`take`
        (a query that changes nothing: the flush's ``may_confirm``)."""
        with self._lock:
            return self._offer

    def take(self) -> tuple[float, float] | None:
        """The latest offer not applied yet, (seconds, received at), and forget it."""
        with self._lock:
            offer, self._offer = self._offer, None
        return offer


@dataclass(frozen=True)
class LagSummary:
    """Delays over a window: count, p50, p99 and max (seconds)."""

    count: int = 0
    p50: float = 0.0
    p99: float = 0.0
    max: float = 0.0

    def as_ms(self) -> dict[str, float | int]:
        return {
            "samples": self.count,
            "p50_ms": round(self.p50 * 1000.0, 3),
            "p99_ms": round(self.p99 * 1000.0, 3),
            "max_ms": round(self.max * 1000.0, 3),
        }


_ZEROS = (0,) * (len(LAG_BOUNDS) + 1)


class Durations:
    """A histogram of durations (the loop's lag: delays of its progress timer; the loop's
    steps): a window (since the last :meth:`window`, for the periodic log event) and the
    whole run (for ``/metrics``).
    Percentiles are the upper bound of the bucket they fall in (the exact max is kept)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._window = [0] * (len(LAG_BOUNDS) + 1)
        #: The window before, zeroed: the next window (two lists for the whole run, not a
        #: new one a window that a long-lived allocation keeps in memory after a big free).
        self._spare = [0] * (len(LAG_BOUNDS) + 1)
        self._window_max = 0.0
        self.total = [0] * (len(LAG_BOUNDS) + 1)
        self.total_sum = 0.0
        self.total_max = 0.0
        self._last = LagSummary()

    def record(self, seconds: float) -> None:
        """One delay of ``seconds`` (the loop thread; the lock is uncontended)."""
        i = bisect.bisect_left(LAG_BOUNDS, seconds)
        with self._lock:
            self._window[i] += 1
            self.total[i] += 1
            self.total_sum += seconds
            if seconds > self._window_max:
                self._window_max = seconds
            if seconds > self.total_max:
                self.total_max = seconds

    def window(self) -> LagSummary:
        """The summary of the window since the last call; a new window starts."""
        with self._lock:
            counts, top = self._window, self._window_max
            self._window = self._spare
            self._window_max = 0.0
        summary = summarise(counts, top)
        counts[:] = _ZEROS  # in place: the list keeps its size
        self._spare = counts
        self._last = summary
        return summary

    @property
    def last(self) -> LagSummary:
        """The summary of the last window closed (what ``/metrics`` shows as quantiles)."""
        return self._last


def summarise(counts: list[int], top: float) -> LagSummary:
    """p50, p99 (bucket upper bounds, at most ``top``) and max of a histogram."""
    n = sum(counts)
    if n == 0:
        return LagSummary()

    def quantile(q: float) -> float:
        rank = q * n
        seen = 0
        for i, c in enumerate(counts):
            seen += c
            if seen >= rank and c:
                bound = LAG_BOUNDS[i] if i < len(LAG_BOUNDS) else top
                return min(bound, top)
        return top

    return LagSummary(count=n, p50=quantile(0.5), p99=quantile(0.99), max=top)
