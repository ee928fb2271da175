"""Leader election through kazoo's recipe.

:Status: Beta

:class:`LeaderElection` is a thin wrapper over kazoo's ``Election`` recipe (itself a
``Lock``: ephemeral sequential znodes under ``/qpid-ha/<cluster>/election``; the lowest one
leads). It adds only what the agent needs around it: contend when told (the broker may be
promoted), call ``on_leading`` once leadership is won, :meth:`~LeaderElection.cancel` to
withdraw or resign, and an end of contention when the session is LOST (the recipe's znode
is gone with the session). No election protocol of our own.

Leadership here lasts as long as the znode, i.e. the session; a leader cut off from
ZooKeeper must stop acting as one *before* the session can expire, which this module does
not decide: the session fence (:mod:`ha_agent.fencing`) does. Calls go from the agent to
the election, and back only through ``on_leading`` and ``on_ended``.

Error Handling
==============

- The election runs in its own thread. Exceptions there (ZooKeeper gone for longer than the
  client's retry policy, ``on_leading`` raising) end the contention: ``on_ended`` is called
  with the reason, the znode is released (best effort) and the wrapper is idle again. The
  agent decides whether to contend again.
- :meth:`LeaderElection.cancel` waits for ZooKeeper no longer than its ``timeout``: while
  the connection is down, the recipe's release waits for it (up to the client's retry
  policy); ``cancel`` then returns False and ``on_ended`` tells when the contention ended.
- LOST (session expired, or the client stopped) ends the contention; SUSPENDED does not
  (the recipe keeps its place; :class:`ha_agent.fencing.SessionGuard` decides about
  fencing).
- ``on_leading`` and ``on_ended`` run in the election's thread: they should hand the work
  over (``loop.call_soon_threadsafe``, a queue) or be quick.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import structlog
from kazoo.protocol.states import KazooState

from ha_agent.zk_layout import ClusterLayout, check_name

__all__ = ["LeaderElection", "Leadership"]

_log = structlog.get_logger("ha_agent.election", component="agent")


class Leadership(StrEnum):
    """Where a :class:`LeaderElection` stands."""

    IDLE = "idle"  # not contending
    CONTENDING = "contending"  # a contender znode, waiting for its turn
    LEADING = "leading"  # won; on_leading was called
    RESIGNING = "resigning"  # told to stop; the recipe is releasing its znode


@dataclass(eq=False)
class _Term:
    """One contention: from contend() to the end of the election thread."""

    election: Any
    resign: threading.Event
    thread: threading.Thread | None = None
    reason: str = "cancelled"


class LeaderElection:
    """Contend for the leadership of ``cluster`` as ``node`` through kazoo's ``Election``.

    ``on_leading()`` is called (in the election thread) when this contender wins;
    leadership lasts until :meth:`cancel` or a LOST session. ``on_ended(reason)`` is called
    when a contention ends, with ``reason`` one of ``cancelled``, ``session_lost``,
    ``callback_failed`` or ``error: ...``.
    """

    def __init__(
        self,
        client: Any,
        cluster: str,
        node: str,
        on_leading: Callable[[], None],
        on_ended: Callable[[str], None] | None = None,
    ) -> None:
        self.client = client
        self.cluster = cluster
        self.path = ClusterLayout(cluster).election
        self.node = check_name("node", node)
        self.on_leading = on_leading
        self.on_ended = on_ended
        self._mutex = threading.Lock()
        self._state = Leadership.IDLE
        self._term: _Term | None = None

    @property
    def state(self) -> Leadership:
        return self._state

    @property
    def leading(self) -> bool:
        """True from the win (before ``on_leading`` runs) until told to resign."""
        return self._state is Leadership.LEADING

    def contend(self) -> bool:
        """Start contending (in a thread); False if a contention is already under way."""
        with self._mutex:
            if self._term is not None:
                return False
            term = _Term(self.client.Election(self.path, self.node), threading.Event())
            term.thread = threading.Thread(
                target=self._run, args=(term,), name=f"election-{self.node}", daemon=True
            )
            self._term = term
            self._state = Leadership.CONTENDING
        self.client.add_listener(self._session_listener)
        _log.info("election_contending", cluster=self.cluster, node=self.node)
        term.thread.start()
        return True

    def cancel(self, timeout: float | None = 5.0) -> bool:
        """Withdraw from the election, resigning if leading. Never blocks kazoo.

        Returns True once the contention has ended (the znode released) within ``timeout``
        seconds; False if it is still ending (``on_ended`` tells when it has).
        """
        with self._mutex:
            term = self._term
        if term is None:
            return True
        self._withdraw(term, "cancelled")
        assert term.thread is not None
        term.thread.join(timeout)
        return not term.thread.is_alive()

    def contenders(self) -> list[str]:
        """Node names of the contenders, the leader first (reads ZooKeeper)."""
        return list(self.client.Election(self.path).contenders())

    # internals ------------------------------------------------------------------------
    def _withdraw(self, term: _Term, reason: str) -> None:
        with self._mutex:
            if term.resign.is_set():
                return
            term.reason = reason
            term.resign.set()
            if self._term is term and self._state is Leadership.LEADING:
                self._state = Leadership.RESIGNING
        term.election.cancel()  # wakes a waiting contender; sets a flag only

    def _session_listener(self, state: str) -> bool:
        """kazoo's state listener: hands LOST over, never blocks."""
        if state == KazooState.LOST:
            term = self._term
            if term is not None:
                self._withdraw(term, "session_lost")
        return False

    def _lead(self, term: _Term) -> None:
        with self._mutex:
            if term.resign.is_set():
                return  # cancelled while the lock was being won
            self._state = Leadership.LEADING
        _log.info("election_won", cluster=self.cluster, node=self.node)
        try:
            self.on_leading()
        except Exception as exc:
            _log.error("election_callback_failed", cluster=self.cluster, reason=repr(exc))
            self._withdraw(term, "callback_failed")
            return
        term.resign.wait()

    def _run(self, term: _Term) -> None:
        try:
            term.election.run(self._lead, term)
        except Exception as exc:  # ZooKeeper gone past the retry policy, and the like
            if not term.resign.is_set():  # else keep why it was told to end (LOST...)
                term.reason = f"error: {exc!r}"
        finally:
            self.client.remove_listener(self._session_listener)
            with self._mutex:
                if self._term is term:
                    self._term = None
                    self._state = Leadership.IDLE
            _log.info("election_ended", cluster=self.cluster, node=self.node, reason=term.reason)
            if self.on_ended is not None:
                try:
                    self.on_ended(term.reason)
                except Exception as exc:
                    _log.error("election_callback_failed", cluster=self.cluster, reason=repr(exc))
