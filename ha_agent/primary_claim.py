"""A candidate's claim to become primary: wait until the takeover rule allows, then lead.

:Status: Beta (issue 26, item 1)

:class:`PrimaryClaim` replaces the agent's use of kazoo's election lock as the decider.
A claim (:meth:`~PrimaryClaim.contend`) watches the primary record and asks the takeover
rule (:mod:`ha_agent.takeover`; today: the old primary's record is gone) whenever it
changes; once the rule allows it *leads*: ``on_leading`` is called, and the agent
promotes, which commits only through the promotion's multi-op
(:mod:`ha_agent.promotion_txn`). Several candidates may lead at once: the multi-op lets
one commit, the others resign and claim again (they then wait for the new record).
Leading here means "may try the multi-op", never "is primary".

With ``lock=True`` (:func:`ha_agent.promotion_txn.needs_lock`: the in-sync set is in
ZooKeeper format 1, from which an agent of release 0.1.0 may promote, under the lock)
the claim first wins kazoo's ``Election`` under ``/qpid-ha/<cluster>/election``, as
0.1.0's agents do, and waits for the rule while holding it; :attr:`PrimaryClaim.locked`
says so to the promotion.

It replaces the former ``ha_agent.election.LeaderElection`` with the same interface
(:class:`Leadership` states, :attr:`~PrimaryClaim.leading`, :meth:`~PrimaryClaim.contend`,
:meth:`~PrimaryClaim.cancel`, ``on_leading``, ``on_ended``), so the agent's rules
(:func:`ha_agent.promotion.decide`) read it the same way. Calls go from the agent to the
claim, and back only through ``on_leading`` and ``on_ended``.

Error Handling
==============

- The claim runs in its own thread. ZooKeeper errors there (past the client's retry
  policy), or ``on_leading`` raising, end the claim: ``on_ended`` gets the reason and the
  claim's number (:attr:`PrimaryClaim.term`: the claim's thread may tell it after the agent
  already made a newer claim); the agent claims again at a later check.
- LOST (session expired, client stopped) ends the claim (``session_lost``); SUSPENDED
  does not (the session guard decides about fencing).
- :meth:`PrimaryClaim.cancel` waits at most ``timeout``; ``on_ended`` tells when it ended.
- Once the rule allows, a claim without the lock lets a safe candidate on a node running
  fewer primaries of the other clusters go first while that one's agent is contending
  (:func:`~ha_agent.node_loads.spread_hold`, ``election_spread_yield`` in the log); a watch
  on that agent's status record wakes it when that one stops trying. Never under the lock
  (a cluster in ZooKeeper format 1): the one it would let go first waits for that lock.
- The primary record's watch only wakes the claim; it also looks again every
  :data:`RECHECK` seconds (sooner when the rule says a grant lapses sooner:
  :attr:`~ha_agent.takeover.Takeover.retry_in`), so a lost watch delays, never blocks, a
  takeover.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import structlog
from kazoo.protocol.states import KazooState

from ha_agent.in_sync import VersionedInSync
from ha_agent.membership import Member
from ha_agent.node_loads import spread_hold
from ha_agent.primary_record import read_primary_versioned
from ha_agent.promotion_txn import needs_lock
from ha_agent.takeover import TakeoverRule, TakeoverView
from ha_agent.zk_format import ZkFormatError
from ha_agent.zk_layout import ClusterLayout, check_name

__all__ = ["GRANT_SLACK", "RECHECK", "Leadership", "PrimaryClaim"]

_log = structlog.get_logger("ha_agent.primary_claim", component="agent")

#: How often a waiting claim reads the primary record without a watch event (seconds).
RECHECK = 1.0
#: Asked again this long after a grant is due to lapse (seconds): the broker's answer
#: counts to the millisecond; a little after, it says lapsed.
GRANT_SLACK = 0.005


class Leadership(StrEnum):
    """Where a :class:`PrimaryClaim` stands."""

    IDLE = "idle"  # not claiming
    CONTENDING = "contending"  # waiting (for the lock, then for the takeover rule)
    LEADING = "leading"  # the rule allowed: on_leading was called, it may promote
    RESIGNING = "resigning"  # told to stop; releasing the lock, if it holds it


@dataclass(eq=False)
class _Term:
    """One claim: from contend() to the end of its thread."""

    lock: bool
    resign: threading.Event
    wake: threading.Event
    election: Any = None
    thread: threading.Thread | None = None
    reason: str = "cancelled"
    #: led from the start, without the rule (:meth:`PrimaryClaim.resume`)
    resumed: bool = False
    #: this claim's number (1, 2, ... in the order the agent made them)
    number: int = 0
    #: the candidate this claim last let go first ("" none: ha_agent.spread)
    yielded_to: str = ""

    def woken(self, _event: object) -> None:
        """The primary record's watch (one function a term: kazoo keeps it once)."""
        self.wake.set()


#: The in-sync set and the member records as the agent last read them.
Context = tuple[VersionedInSync | None, Mapping[str, Member]]


class PrimaryClaim:
    """See the module docstring. ``context()`` returns the in-sync set and the member
    records as the agent last read them (the rule's other inputs, and whether a claim needs
    the lock)."""

    def __init__(
        self,
        client: Any,
        cluster: str,
        node: str,
        rule: TakeoverRule,
        context: Callable[[], Context],
        on_leading: Callable[[], None],
        on_ended: Callable[[str, int], None] | None = None,
    ) -> None:
        self.client = client
        self.cluster = cluster
        self.layout = ClusterLayout(cluster)
        self.node = check_name("node", node)
        self.rule = rule
        self.context = context
        self.on_leading = on_leading
        self.on_ended = on_ended
        self._mutex = threading.Lock()
        self._state = Leadership.IDLE
        self._term: _Term | None = None
        self._numbers = itertools.count(1)

    @property
    def state(self) -> Leadership:
        return self._state

    @property
    def leading(self) -> bool:
        """True from the rule's yes (before ``on_leading`` runs) until told to resign."""
        return self._state is Leadership.LEADING

    @property
    def term(self) -> int | None:
        """The current claim's number (None: none under way); ``on_ended`` names the
        claim that ended by its number, which may be an older one than the current."""
        term = self._term
        return None if term is None else term.number

    @property
    def locked(self) -> bool:
        """Whether the current claim holds kazoo's election lock (a mixed cluster)."""
        term = self._term
        return term is not None and term.lock and self._state is Leadership.LEADING

    def contend(self, lock: bool | None = None) -> bool:
        """Start a claim (in a thread); False if one is under way. ``lock``: take kazoo's
        election lock first (None: :func:`~ha_agent.promotion_txn.needs_lock` of the
        context). A claim waiting without the lock withdraws itself once the lock is needed
        (the agent claims again at its next check)."""
        if lock is None:
            lock = needs_lock(self.context()[0])
        with self._mutex:
            term = self._term
            if term is None:
                term = _Term(lock, threading.Event(), threading.Event(), number=next(self._numbers))
                term.thread = threading.Thread(
                    target=self._run, args=(term,), name=f"claim-{self.node}", daemon=True
                )
                self._term = term
                self._state = Leadership.CONTENDING
                start = True
            else:
                start = False
        if not start:
            return False
        self.client.add_listener(self._session_listener)
        _log.info("election_contending", cluster=self.cluster, node=self.node, lock=lock)
        assert term.thread is not None
        term.thread.start()
        return True

    def resume(self) -> bool:
        """Lead at once, without the rule: this agent has just re-created its own primary
        record at the epoch its broker still serves, after its session expired (issue 26,
        item 2; :func:`~ha_agent.promotion_txn.commit_reclaim`, the multi-op that decides).
        ``on_leading`` is not called (nothing to promote). False if a claim is under way."""
        with self._mutex:
            if self._term is not None:
                return False
            number = next(self._numbers)
            term = _Term(False, threading.Event(), threading.Event(), resumed=True, number=number)
            term.thread = threading.Thread(
                target=self._run, args=(term,), name=f"claim-{self.node}", daemon=True
            )
            self._term = term
            self._state = Leadership.LEADING
        self.client.add_listener(self._session_listener)
        term.thread.start()
        return True

    def wake(self) -> None:
        """Ask the takeover rule again now (a rule whose answer changes with time, e.g. a
        grant that lapses, calls it when it may; else the claim asks on the primary
        record's changes and every :data:`RECHECK` seconds)."""
        term = self._term
        if term is not None:
            term.wake.set()

    def contenders(self) -> list[str]:
        """Node names of the election lock's contenders, the holder first (reads
        ZooKeeper; only claims with the lock are there)."""
        return list(self.client.Election(self.layout.election).contenders())

    def cancel(self, timeout: float | None = 5.0) -> bool:
        """Withdraw the claim, resigning if leading; True once it has ended."""
        term = self._term
        if term is None:
            return True
        self._withdraw(term, "cancelled")
        assert term.thread is not None
        if term.thread is not threading.current_thread():
            term.thread.join(timeout)
        return not term.thread.is_alive()

    # internals ------------------------------------------------------------------------
    def _withdraw(self, term: _Term, reason: str) -> None:
        with self._mutex:
            if term.resign.is_set():
                return
            term.reason = reason
            term.resign.set()
            if self._term is term and self._state is Leadership.LEADING:
                self._state = Leadership.RESIGNING
        term.wake.set()
        if term.election is not None:
            term.election.cancel()  # wakes a waiting contender; sets a flag only

    def _session_listener(self, state: str) -> bool:
        """kazoo's state listener: hands LOST over, never blocks."""
        if state == KazooState.LOST:
            term = self._term
            if term is not None:
                self._withdraw(term, "session_lost")
        return False

    def _allowed(self, term: _Term) -> float | None:
        """Read the primary record (watching it) and ask the rule: None when it allows,
        else how long to wait before asking again (at most :data:`RECHECK`; sooner when a
        grant lapses sooner)."""
        term.wake.clear()
        self.client.retry(self.client.exists, self.layout.primary, watch=term.woken)
        try:
            old = read_primary_versioned(self.client, self.cluster)
        except ZkFormatError:
            return RECHECK  # a record this agent cannot read: not "no primary"
        in_sync, members = self.context()
        if not term.lock and needs_lock(in_sync):
            self._withdraw(term, "the lock is needed: the in-sync set is in ZooKeeper format 1")
            return RECHECK
        record = None if in_sync is None else in_sync.record
        answer = self.rule.may_take_over(TakeoverView(old, record, members))
        if answer.allowed:
            # Not under the lock: the one it would let go first waits for that lock.
            first = (
                None
                if term.lock
                else spread_hold(self.client, self.cluster, self.node, record, members, term.woken)
            )
            if first is None:
                term.yielded_to = ""
                return None
            if first != term.yielded_to:
                _log.info(
                    "election_spread_yield",
                    cluster=self.cluster,
                    node=self.node,
                    first=first,
                    reason="a candidate on a node running fewer primaries is trying: it goes first",
                )
            term.yielded_to = first
            return RECHECK
        if answer.retry_in is None:
            return RECHECK
        return min(RECHECK, answer.retry_in + GRANT_SLACK)

    def _claim(self, term: _Term) -> None:
        while not term.resign.is_set():
            wait = self._allowed(term)
            if wait is None:
                break
            term.wake.wait(wait)
        with self._mutex:
            if term.resign.is_set():
                return
            self._state = Leadership.LEADING
        _log.info("election_won", cluster=self.cluster, node=self.node, lock=term.lock)
        try:
            self.on_leading()
        except Exception as exc:
            _log.error("election_callback_failed", cluster=self.cluster, reason=repr(exc))
            self._withdraw(term, "callback_failed")
            return
        term.resign.wait()

    def _run(self, term: _Term) -> None:
        try:
            if term.resumed:
                term.resign.wait()
            elif term.lock:
                term.election = self.client.Election(self.layout.election, self.node)
                if term.resign.is_set():
                    return
                term.election.run(self._claim, term)
            else:
                self._claim(term)
        except Exception as exc:  # ZooKeeper gone past the retry policy, and the like
            if not term.resign.is_set():
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
                    self.on_ended(term.reason, term.number)
                except Exception as exc:
                    _log.error("election_callback_failed", cluster=self.cluster, reason=repr(exc))
