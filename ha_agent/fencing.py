"""The session fence: stop acting as leader before the ZooKeeper session can expire.

:Status: Beta

kazoo reports LOST only once it reconnects and hears that the session expired; a leader cut
off from ZooKeeper can stay SUSPENDED for ever while the others, seeing its session expire,
elect a new leader (:mod:`ha_agent.primary_claim`). So a leader must stop acting as one *before*
its session can expire. Two pieces:

:class:`SessionGuard`
    That rule as a pure state machine: no I/O, no threads, no clock. Time comes in as
    numbers; it returns a :class:`Fence` or None. THREAD UNSAFE: its caller serialises.

:class:`SessionWatcher`
    Its shell: a kazoo listener that only hands states over (it never blocks kazoo's
    thread), and a thread that feeds the guard, sends light heartbeats and calls ``fence``.
    The agent (:mod:`ha_agent.agent`, through :mod:`ha_agent.fencer`) decides what fencing
    means (kill the broker, drop the virtual IP); this module only decides *when*. Calls go
    from the watcher to the guard and to ``fence``, never back.

Timing argument (``T`` = session timeout, ``M`` = margin, ``T/10`` by default):

- ZooKeeper expires a session no sooner than ``T`` after it last heard from the client. A
  request sent at ``s`` and answered proves the server heard us at or after ``s``: the
  session lives at least until ``s + T``. The guard keeps that as a *lease* and fences at
  ``last contact + T - M``, whatever kazoo says, unless a newer contact came first.
- kazoo's SUSPENDED cannot be the clock: kazoo notices a silent server only when it sends
  nothing for ``T/3`` after an unanswered ping, so a client that sends requests more often
  than that never turns SUSPENDED (seen in the tests with a SIGSTOPped server: a heartbeat
  every ``T/6`` kept the client CONNECTED for ever). The watcher's heartbeat is an
  ``exists`` every ``0.4 T``: frequent enough to keep the lease, rare enough to let kazoo
  notice and move to another server. The agent's own requests should keep to that rate.
- So a SUSPENDED leader fences ``T - M`` after its last contact, i.e. between ``0.6 T - M``
  and ``T - M`` after the connection was lost; LOST fences at once. A ZooKeeper leader's
  death drops every client connection and the ensemble serves again after about 1.3 s:
  with ``T`` of 4 s or more (a lease of at least ``0.6 T - M`` = 2 s left at the
  disconnect) nobody fences.
- ``M`` is the time the fence itself may take (stop the broker, drop the virtual IP) plus
  one network round trip (CONNECTED counts as a contact at the time it is seen). Another
  agent can win only after the expiry, so the fenced broker has stopped serving by then.

Error Handling
==============

- :class:`SessionGuard` raises ValueError for a bad ``session_timeout`` or ``margin`` and
  for an unknown session state; nothing else.
- :class:`SessionWatcher` raises ValueError for a heartbeat not shorter than the lease. A
  heartbeat that cannot be sent (the connection went away meanwhile) is skipped: the
  listener reports the state. An exception from ``fence`` is logged
  (``session_fence_failed``) and the watcher goes on.
- ``fence`` runs in the watcher's thread: it may block; the watcher handles no other event
  meanwhile.
- Stop the :class:`SessionWatcher` before stopping the client on a clean shutdown: stopping
  a client reports LOST, which fences.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import structlog
from kazoo.protocol.states import KazooState

__all__ = ["Fence", "GuardState", "SessionGuard", "SessionWatcher"]

_log = structlog.get_logger("ha_agent.fencing", component="agent")

Clock = Callable[[], float]


class GuardState(StrEnum):
    CONNECTED = "connected"  # kazoo says connected; the lease runs from the last contact
    SUSPENDED = "suspended"  # kazoo lost the connection; the lease runs out unless CONNECTED
    FENCED = "fenced"  # fenced; re-armed by CONNECTED or by a contact made after the fence


@dataclass(frozen=True)
class Fence:
    """The guard's one action: stop acting as leader now."""

    #: ``session_lost`` (LOST), ``suspended_too_long`` (SUSPENDED until the lease ran out),
    #: ``zookeeper_silent`` (kazoo still says CONNECTED but nothing was answered in time) or
    #: ``no_contact`` (SUSPENDED before any contact was recorded).
    reason: str
    at: float  # guard clock time of the decision
    suspended_at: float | None = None  # when the SUSPENDED state began, if it did
    last_contact: float | None = None  # the last proof that the server heard us


class SessionGuard:
    """The SUSPENDED/LOST rule as a pure state machine (no I/O, no threads, no clock).

    Feed it kazoo states with :meth:`on_state`, answered requests with :meth:`contact`, and
    the time with :meth:`poll` (at :attr:`deadline` at the latest). It returns a
    :class:`Fence` at most once per loss of contact: on LOST at once; when the lease
    ``last contact + T - margin`` runs out (SUSPENDED and not CONNECTED again in time, or a
    server that stopped answering); on SUSPENDED before any contact. CONNECTED counts as a
    contact (re-arming a fenced guard); so does a contact sent after the fence.
    """

    def __init__(self, session_timeout: float, margin: float | None = None) -> None:
        if not (isinstance(session_timeout, int | float) and session_timeout > 0):
            raise ValueError(f"session_timeout must be positive: {session_timeout!r}")
        margin = session_timeout / 10 if margin is None else margin
        if not 0 <= margin < session_timeout / 2:
            raise ValueError(
                f"margin must be at least 0 and less than half the session timeout "
                f"({session_timeout / 2:.3f} s): {margin!r}"
            )
        self.session_timeout = float(session_timeout)
        self.margin = float(margin)
        self.state = GuardState.CONNECTED
        self.suspended_at: float | None = None
        self.fenced_at: float | None = None
        self.last_contact: float | None = None

    def retime(self, session_timeout: float) -> None:
        """ZooKeeper granted ``session_timeout`` (a new session, another server): count it
        from now on, the margin in the same proportion. A running lease is re-counted."""
        if not (isinstance(session_timeout, int | float) and session_timeout > 0):
            raise ValueError(f"session_timeout must be positive: {session_timeout!r}")
        self.margin = self.margin * session_timeout / self.session_timeout
        self.session_timeout = float(session_timeout)

    @property
    def deadline(self) -> float | None:
        """When the lease runs out (None when fenced or before the first contact)."""
        if self.state is GuardState.FENCED or self.last_contact is None:
            return None
        return self.last_contact + self.session_timeout - self.margin

    def contact(self, sent_at: float) -> None:
        """A request sent at ``sent_at`` was answered: the server heard us then."""
        if self.last_contact is None or sent_at > self.last_contact:
            self.last_contact = sent_at
        fenced_at = self.fenced_at
        if self.state is GuardState.FENCED and fenced_at is not None and sent_at > fenced_at:
            self._rearm()  # the session answered a request sent after the fence: alive

    def _rearm(self) -> None:
        self.state = GuardState.CONNECTED
        self.suspended_at = self.fenced_at = None

    def _fence(self, reason: str, now: float) -> Fence:
        fence = Fence(reason, now, self.suspended_at, self.last_contact)
        self.state = GuardState.FENCED
        self.fenced_at = now
        return fence

    def on_state(self, state: str, now: float) -> Fence | None:
        """A kazoo state (``KazooState.CONNECTED``, ``SUSPENDED`` or ``LOST``) at ``now``."""
        if state == KazooState.LOST:
            return None if self.state is GuardState.FENCED else self._fence("session_lost", now)
        if state == KazooState.SUSPENDED:
            if self.state is GuardState.CONNECTED:
                self.state = GuardState.SUSPENDED
                self.suspended_at = now
                if self.last_contact is None:
                    return self._fence("no_contact", now)
            return self.poll(now)
        if state == KazooState.CONNECTED:
            # the server just accepted (re)connection: it heard us within a round trip
            self.contact(now)
            self._rearm()
            return None
        raise ValueError(f"unknown session state {state!r}")

    def poll(self, now: float) -> Fence | None:
        """The time is ``now``: a Fence if the lease has run out."""
        deadline = self.deadline
        if deadline is None or now < deadline:
            return None
        suspended = self.state is GuardState.SUSPENDED
        return self._fence("suspended_too_long" if suspended else "zookeeper_silent", now)


class SessionWatcher:
    """Drives a :class:`SessionGuard` from a kazoo client and calls ``fence(Fence)``.

    The kazoo listener only queues the state with its time; a daemon thread feeds the
    guard, wakes at its deadline, sends an ``exists`` heartbeat every ``heartbeat`` seconds
    (``0.4 T`` by default: more often than ``T/3`` would hide a silent server from kazoo)
    while connected, and calls ``fence`` in that thread. Other answered requests may be
    reported with :meth:`note_contact` (thread safe).
    """

    def __init__(
        self,
        client: Any,
        guard: SessionGuard,
        fence: Callable[[Fence], None],
        *,
        heartbeat: float | None = None,
        heartbeat_path: str = "/",
        clock: Clock = time.monotonic,
    ) -> None:
        self.client = client
        self.guard = guard
        self.fence = fence
        self._heartbeat_share = None if heartbeat is None else heartbeat / guard.session_timeout
        self.heartbeat = 0.4 * guard.session_timeout if heartbeat is None else heartbeat
        if not 0 < self.heartbeat < guard.session_timeout - guard.margin:
            raise ValueError(f"heartbeat must be shorter than the lease: {self.heartbeat!r}")
        self.heartbeat_path = heartbeat_path
        self.clock = clock
        self.fences: list[Fence] = []
        self._inbox: queue.SimpleQueue[tuple[str, Any, float]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def start(self) -> SessionWatcher:
        self.client.add_listener(self._listener)
        if self.client.state != KazooState.CONNECTED:
            self._inbox.put(("state", self.client.state, self.clock()))
        self._thread = threading.Thread(target=self._run, name="session-watcher", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self.client.remove_listener(self._listener)
        self._inbox.put(("stop", None, self.clock()))
        if self._thread is not None:
            self._thread.join(timeout)

    def retime(self, session_timeout: float) -> None:
        """ZooKeeper granted ``session_timeout`` seconds (thread safe; kazoo's connection
        thread calls it before it reports the connection, so the guard counts the new grant
        from that CONNECTED on). The heartbeat keeps its share of the timeout."""
        self._inbox.put(("timeout", session_timeout, self.clock()))

    def note_contact(self, sent_at: float) -> None:
        """A request of the caller's, sent at ``sent_at`` (this watcher's clock), was answered."""
        self._inbox.put(("contact", None, sent_at))

    def _listener(self, state: str) -> bool:
        self._inbox.put(("state", state, self.clock()))
        return False

    def _beat(self) -> None:
        if self.client.state != KazooState.CONNECTED:
            return
        sent = self.clock()
        try:
            result = self.client.exists_async(self.heartbeat_path)
        except Exception:  # the connection went away meanwhile: the listener says so
            return

        def answered(result: Any) -> None:
            if result.successful():
                self._inbox.put(("contact", None, sent))

        result.rawlink(answered)

    def _run(self) -> None:
        next_beat = self.clock()
        while True:
            wake = min(next_beat, self.guard.deadline or math.inf)
            try:
                kind, state, at = self._inbox.get(timeout=max(0.0, wake - self.clock()))
            except queue.Empty:
                kind, state, at = "tick", None, self.clock()
            fence: Fence | None = None
            if kind == "stop":
                return
            if kind == "state":
                fence = self.guard.on_state(state, at)
            elif kind == "contact":
                self.guard.contact(at)
            elif kind == "timeout" and state != self.guard.session_timeout:
                self.guard.retime(state)
                share = 0.4 if self._heartbeat_share is None else self._heartbeat_share
                self.heartbeat = share * self.guard.session_timeout
                next_beat = min(next_beat, self.clock() + self.heartbeat)
            now = self.clock()
            fence = fence or self.guard.poll(now)
            if fence is not None:
                self.fences.append(fence)
                _log.warning(
                    "session_fence",
                    reason=fence.reason,
                    suspended_for=None
                    if fence.suspended_at is None
                    else round(fence.at - fence.suspended_at, 3),
                    since_contact=None
                    if fence.last_contact is None
                    else round(fence.at - fence.last_contact, 3),
                )
                try:
                    self.fence(fence)
                except Exception as exc:
                    _log.error("session_fence_failed", reason=repr(exc))
            if now >= next_beat:
                self._beat()
                next_beat = now + self.heartbeat
