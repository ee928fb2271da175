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

THREAD SAFE: the loop writes the answers; the session watcher reads the targets and the
supervisor resets the watch; the watch is under a lock, the rest are single assignments.

Error Handling
==============

Raises nothing.
"""

from __future__ import annotations

import threading

from ha_agent.broker_check import LivenessView
from ha_agent.promotion import BrokerView
from ha_agent.watchdog import BrokerWatch

__all__ = ["LocalBroker"]


class LocalBroker:
    """See the module docstring."""

    def __init__(self) -> None:
        #: the last full view (None: the last check was not answered)
        self.view: BrokerView | None = None
        #: the last liveness answer, off the broker's loop (None: none)
        self.live: LivenessView | None = None
        #: the instance (pid) that last answered a check the watch counted
        self.last_pid: int | None = None
        #: the instance (pid) that may serve as primary (None: none known)
        self.serving_pid: int | None = None
        self._watch = BrokerWatch()
        self._lock = threading.Lock()

    def answered(
        self, sent: float, now: float, view: BrokerView | None, live: LivenessView | None
    ) -> None:
        """A check sent at ``sent`` came back at ``now``. The full answer is as fresh as
        ``now``; the liveness answer says when the broker's loop last made progress: a busy
        broker is not a silent one (issue 25)."""
        answer = None
        if view is not None:
            answer = (now, view.pid)
        elif live is not None:
            answer = (now - live.last_progress, live.pid)
        if answer is not None:
            with self._lock:
                counted = self._watch.answered(sent, answer[0])
            if counted and answer[1] is not None:
                self.last_pid = answer[1]
        self.view, self.live = view, live
        if view is not None and view.is_primary and view.pid is not None:
            self.serving_pid = view.pid

    def reset(self, at: float) -> None:
        """The broker was killed, or exited, at ``at``: its silence counts again once it
        answered, and views read before now are stale."""
        with self._lock:
            self._watch.reset(at)

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
