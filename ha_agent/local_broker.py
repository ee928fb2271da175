"""What the agent has seen of its local broker, and which broker instance a kill means.

:Status: Beta

A broker *instance* is one process (its pid); the supervisor (or systemd) starts a new one
after each exit, as a joining backup. :class:`LocalBroker` keeps the agent's last answers
from its broker (the full view of ``/api/status`` and ``/api/ha``, and the liveness answered
off the broker's loop), the watch (:class:`~ha_agent.watchdog.BrokerWatch`: answers, kills,
exits), the instance that last answered, and the instance that may serve as primary (the
one the agent promoted or is promoting, or one seen primary).

The rule (issue 25, item 4): a fence or a watchdog kill names the instance it was decided
about (:meth:`LocalBroker.fence_target`, :meth:`LocalBroker.session_fence_target`), and the
supervisor kills it only if it is still the process it runs. Before, the kill hit whatever
ran at that moment: the nemesis harness saw an agent kill the broker its supervisor had
started 2-68 ms earlier (3 of 4 broker kills), and, after a ZooKeeper outage, the old
leader's agent kill its own restarted, joining broker (4 of 4 cycles).

Starved is not stopped (issue 25, item 1): a liveness answer is judged by
:class:`~ha_agent.loop_liveness.LoopJudge` on the loop thread's clocks. A loop counted
running (it runs or waits for a CPU, and progresses) answered when the check was sent,
however late its last progress; any other answered when its loop last made progress, as
before. The agent logs the judgement when it changes (``broker_loop``), once the loop's
last progress is late, with a hysteresis (:class:`~ha_agent.loop_report.LoopReport`: late
at half ``--broker-timeout``, on time again after 30 s of answers under
:data:`LATE_PROGRESS`).

THREAD SAFE: the loop writes the answers; the session watcher reads the targets and the
supervisor resets the watch; the watch is under a lock, the rest are single assignments.

Error Handling
==============

Raises nothing.
"""

from __future__ import annotations

import threading
import time

import structlog

from ha_agent.broker_check import BrokerCheck, LivenessView
from ha_agent.cluster_records import PRIMARY_STATES
from ha_agent.loop_liveness import LoopJudge, LoopVerdict
from ha_agent.loop_report import LATE_PROGRESS, LoopReport
from ha_agent.loop_witness import kernel_loop_times
from ha_agent.promotion import BrokerView
from ha_agent.watchdog import BrokerWatch

__all__ = ["LATE_PROGRESS", "STARVED_STATUS_TIMEOUT", "WITNESS_LIMIT", "LocalBroker"]

_log = structlog.get_logger("ha_agent.local_broker", component="agent")

#: How long each status call may wait for a starved backup (seconds; :meth:`LocalBroker.read`).
STARVED_STATUS_TIMEOUT = 5.0
#: How long after the broker's own last liveness answer (its clock) the kernel's witness
#: still counts (seconds; :meth:`LocalBroker.witnessed`): past it only the broker's own
#: answer does, so a loop that spins in one callback on a starved CPU, using CPU slowly,
#: is fenced by its silence within this plus ``--broker-timeout``.
WITNESS_LIMIT = 10.0


class LocalBroker:
    """See the module docstring. ``patience``: ``--broker-timeout``."""

    def __init__(self, patience: float = 2.0) -> None:
        #: the last full view (None: the last check was not answered)
        self.view: BrokerView | None = None
        #: the last liveness answer, off the broker's loop (None: none since it was killed
        #: or exited; an unanswered probe keeps the one before)
        self.live: LivenessView | None = None
        #: the judgement of the last liveness answer (None: none)
        self.verdict: LoopVerdict | None = None
        #: the kernel's witness counted the loop running at its last reading
        self._witnessing = False
        #: the last full view answered (kept while the checks time out)
        self.last_view: BrokerView | None = None
        #: the last status call timed out or took longer than the check timeout
        self.slow_status = False
        self.judge = LoopJudge(patience)
        #: when a judgement is worth a ``broker_loop`` line (hysteresis)
        self.report = LoopReport(patience)
        #: the instance (pid) that last answered a check the watch counted
        self.last_pid: int | None = None
        #: the instance (pid) that may serve as primary (None: none known)
        self.serving_pid: int | None = None
        self._watch = BrokerWatch()
        self._lock = threading.Lock()
        #: per instance (pid): its broker id and the epochs it reported it was primary of
        #: (what the agent may record as ended once that process is reaped: ha_agent.ended)
        self._served: dict[int, tuple[str, frozenset[int]]] = {}

    def read(
        self, check: BrokerCheck
    ) -> tuple[float, float, BrokerView | None, LivenessView | None]:
        """One check of the broker: its liveness first (off its loop, quick), judged
        (:meth:`heard`), then its status (``/api/status``, ``/api/ha``), for
        :meth:`answered`. When it was sent, when it came back, the view and the liveness
        answer (None each: no answer).

        A backup whose last check timed out, or took longer than the check timeout,
        while its loop runs (starved or busy) is waited for up to
        :data:`STARVED_STATUS_TIMEOUT` a call: eligibility needs its
        status, and busy backups never stood for election (10,000 queues: no promotion
        for 120 s after the primary's kill). Never a primary (judged by its liveness, it
        must be fenced within ``--broker-timeout`` when its loop stops), nor a broker
        judged stopped. A status call that waited is followed by the liveness again, so
        that the silence of a broker that stopped meanwhile counts from before, and a
        starved one's from now."""
        sent = time.monotonic()
        live = check.liveness()
        self.heard(sent, time.monotonic(), live)
        if live is None and not check.liveness_refused:
            self.witnessed()
        slow = live is not None and not live.is_primary and self.slow_status
        timeout = STARVED_STATUS_TIMEOUT if slow and self.running() else None
        began = time.monotonic()
        view = check.check(None if timeout is None else max(timeout, check.client.timeout))
        now = time.monotonic()
        self.slow_status = check.last_timed_out or now - began > check.client.timeout
        if view is None and check.last_timed_out and now - sent > check.client.timeout:
            asked = time.monotonic()
            again = check.liveness()
            self.heard(asked, time.monotonic(), again)
            if again is not None or check.liveness_refused:
                live = again  # no answer keeps the one before, unless nothing listens
            else:
                self.witnessed()
        return sent, now, view, live

    def answered(
        self,
        sent: float,
        now: float,
        view: BrokerView | None,
        live: LivenessView | None = None,
    ) -> None:
        """A check sent at ``sent`` came back at ``now``: the full answer is as fresh as
        ``now``; a liveness answer with it is :meth:`heard` (a busy broker is not a silent
        one, issue 25)."""
        if live is not None:
            self.heard(sent, now, live)
        if view is not None:
            with self._lock:
                counted = self._watch.answered(sent, now)
            if counted and view.pid is not None:
                self.last_pid = view.pid
        self.view = view
        if view is not None:
            self.last_view = view
            if view.ha_state in PRIMARY_STATES and view.pid is not None:
                self.saw_primary(view.pid, view.broker_id, view.epoch)
        if view is not None and view.is_primary and view.pid is not None:
            self.serving_pid = view.pid

    def standing(self) -> BrokerView | None:
        """What this node's member record says of its broker: the last view, or, while the
        checks time out but its loop runs (starved, judged on its liveness), the last view
        of that instance, not "down": other agents take a member that is down for gone,
        and a starved backup in the in-sync set was passed over for a store the record
        names (availability only: whom the agents promote is decided on fresh views)."""
        view, last, live = self.view, self.last_view, self.live
        if view is not None or last is None or live is None or not self.running():
            return view
        return last if last.pid is not None and last.pid == live.pid else None

    def heard(self, sent: float, now: float, live: LivenessView | None) -> LoopVerdict | None:
        """A liveness probe sent at ``sent`` came back at ``now`` with ``live`` (None: no
        answer, which changes nothing): judged on its loop's clocks, it counts as an answer
        when the check was sent if its loop runs (starved is not stopped; less the time its
        thread neither ran nor waited for a CPU), else when its loop last made progress.
        The verdict (None: no answer)."""
        if live is None:
            return None
        verdict = self.judge.judge(live.pid, live.times)
        if live.ha_state in PRIMARY_STATES and live.pid is not None:
            self.saw_primary(live.pid, live.broker_id, live.epoch)
        at = now - live.last_progress
        if verdict.running:  # its thread ran or waited for a CPU ``idle`` before
            at = max(at, sent - verdict.idle)
        with self._lock:
            counted = self._watch.answered(sent, at)
        if counted and live.pid is not None:
            self.last_pid = live.pid
        self.live, self.verdict = live, verdict
        self._log(now, live, verdict)
        return verdict

    def witnessed(self) -> LoopVerdict | None:
        """The broker did not answer its liveness probe (nothing refused it): its loop
        thread's clocks read from the kernel (:mod:`ha_agent.loop_witness`), judged as an
        answer of the instance that last answered. A loop counted running answered when
        its thread last ran or waited for a CPU: starved is not stopped, even when the
        starved broker cannot answer. None: nothing to read (no earlier answer with the
        loop's clocks and thread)."""
        live = self.live
        if live is None or live.pid is None or live.loop_tid is None or live.times is None:
            return None
        times = kernel_loop_times(live.pid, live.loop_tid, live.times)
        if times is None or times.clock - live.times.clock > WITNESS_LIMIT:
            return None  # the broker itself must answer now and then (a loop spinning
            # slowly on a starved CPU takes its agent's patience in CPU, not wall time)
        verdict = self.judge.judge(live.pid, times)
        self.verdict = verdict
        if verdict.running:
            with self._lock:
                self._watch.answered(times.clock, times.clock - verdict.idle)
        if verdict.running != self._witnessing:
            self._witnessing = verdict.running
            _log.info(
                "broker_loop_witnessed",
                loop=verdict.state.value,
                counted=verdict.running,
                pid=live.pid,
                reason=f"no liveness answer; the kernel says {verdict.reason}",
            )
        return verdict

    def _log(self, now: float, live: LivenessView, verdict: LoopVerdict) -> None:
        """``broker_loop`` when the judgement of a late loop changes, and when it is on
        time again for a while (:class:`~ha_agent.loop_report.LoopReport`'s hysteresis)."""
        change = self.report.judged(now, live.last_progress, verdict)
        if change is None:
            return
        judged = change.loop
        log = _log.warning if judged in ("stopped", "spinning") else _log.info
        spell = {}
        if change.late_max is not None and change.late_for is not None:
            spell = {
                "late_max_ms": round(change.late_max * 1000.0, 1),
                "late_for_s": round(change.late_for, 1),
            }
        log(
            "broker_loop",
            loop=judged,
            counted=change.counted,
            last_progress_ms=round(live.last_progress * 1000.0, 1),
            pid=live.pid,
            reason=verdict.reason,
            **spell,
        )

    def running(self) -> bool:
        """The last liveness answer was judged running (starved or busy, not stopped)."""
        verdict = self.verdict
        return verdict is not None and verdict.running

    def reset(self, at: float) -> None:
        """The broker was killed, or exited, at ``at``: its silence counts again once it
        answered, and views read before now are stale."""
        with self._lock:
            self._watch.reset(at)
        self.live, self.verdict = None, None  # (the judge starts over at another pid)
        self.last_view = None

    def silence(self, now: float) -> tuple[float, float | None]:
        """Seconds the broker has been silent (0: not counted yet), and when it was last
        killed or seen exiting."""
        with self._lock:
            return self._watch.silent_for(now), self._watch.reset_at

    def serves(self) -> bool:
        """The broker answered as the primary: its full view, or, busy, its liveness."""
        view, live = self.view, self.live
        if view is not None:
            return view.is_primary
        return live is not None and live.is_primary

    def saw_primary(self, pid: int, broker_id: str, epoch: int) -> None:
        """Instance ``pid`` (``broker_id``) itself answered that it is the primary of
        ``epoch``: a status, a liveness answer or its promotion's answer. A pid answering
        with another broker id is another instance (the pid came round again)."""
        known, epochs = self._served.get(pid, (broker_id, frozenset()))
        broker_id = broker_id or known  # an answer that does not name it (an older broker)
        if known != broker_id:
            epochs = frozenset()
        elif epoch in epochs:
            return
        self._served[pid] = (broker_id, epochs | {epoch})
        for old in list(self._served)[:-4]:  # a few instances are plenty
            del self._served[old]

    def served(self, pid: int | None) -> tuple[str, frozenset[int]]:
        """The broker id of instance ``pid`` and the epochs it said it was primary of
        (("", empty): none seen)."""
        return ("", frozenset()) if pid is None else self._served.get(pid, ("", frozenset()))

    def promoting(self, pid: int | None) -> None:
        """The agent asks instance ``pid`` to become primary: a fence meanwhile means it."""
        self.serving_pid = pid

    def resigned(self) -> None:
        self.serving_pid = None

    def fence_target(self) -> int | None:
        """The instance a fence decided now by the loop means: the one that may serve. A
        view that answered as primary names it; else the instance promoted (or being
        promoted) or seen primary; else, a view that answered as a backup: nothing to
        kill; no answer: the last instance that answered."""
        view = self.view
        if view is not None and view.is_primary:
            return view.pid
        if self.serving_pid is not None:  # killed only if it is still the one running
            return self.serving_pid
        return None if view is not None else self.last_pid

    def session_fence_target(self) -> int | None:
        """The instance the session fence (its own thread) means: the one promoted or seen
        primary, else the one answering as primary now; never one the supervisor started
        since (after a ZooKeeper outage the loop's fence killed the restarted, joining
        broker: 4 of 4 cycles)."""
        if self.serving_pid is not None:
            return self.serving_pid
        view, live = self.view, self.live
        seen = view.pid if view is not None else None if live is None else live.pid
        return seen if self.serves() else None
