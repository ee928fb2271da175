"""When a candidate may take the primary record over: one named rule (issue 26, item 1).

:Status: Beta

A promotion is one ZooKeeper multi-op (:mod:`ha_agent.promotion_txn`) that deletes the old
primary's record (when there is one) and creates the new, ephemeral one, together with the
epoch and the in-sync set. Whether a candidate may try it, and whether it may delete an
old record that is still there, is decided here and nowhere else: by a
:class:`TakeoverRule`, asked with a :class:`TakeoverView` (the primary record as read, with
its znode version and owning session; the committed in-sync set; the member records).

The first rule is :class:`OldPrimaryGone`: **only once the old primary's record is gone**,
that is, its agent deleted it (it fenced its broker or resigned) or its ZooKeeper session
expired (the node is lost: ZooKeeper deletes the ephemeral record at the expiry, after the
session guard fenced the old broker, docs/agent.md, "Fencing: the timing argument"). It
never deletes a record: a record that is there belongs to a primary that may still serve.

The second is :class:`LapsedGrant` (issue 26, item 1: node loss in about a second): the
old primary's record is still there (its agent's session has not expired yet), but the
member lease shows it can no longer serve. The candidate's own broker says (``GET
/grant?epoch=E+1``, :class:`GrantView`, answered off its event loop) that

- the primary of epoch ``E`` (the record's) *counted* its grant: its newest request from
  that primary asked a promise, so this broker is in that primary's lease set (a primary
  serves only while every member of its set grants it), and
- every grant it gave an epoch before ``E+1`` has lapsed, the drift bound included,
- and its replication link to that primary is down (a primary whose link is up is slow,
  not dead: a loop held longer than the lease; its link's heartbeat, or its agent, decides),
- and every other member of the set whose agent is there (its member record) published a
  link hint against that primary and epoch (:mod:`ha_agent.link_hint`): its link is down
  too. A cut between this broker and a primary that still reaches the others is not that
  primary's loss: the primary finds the silent link and its agent commits this broker's
  removal, and nobody is fenced. Availability only (a hint is never what makes a takeover
  safe; the lapsed grant is): without it a single cut link made its backup take over from a
  healthy primary, racing the removal. With no other member the grant alone decides.
- and the old primary's broker no longer accepts connections at the record's address
  (:mod:`ha_agent.listener_probe`: refused, or its host answers nothing): a listener that
  is there belongs to a broker that runs, starved or stopped, not to a lost node (a starved
  primary, or a starved backup whose link the primary closed, was taken over from in the
  scale soak, issue 25). Its own agent fences a stopped or hung broker; a node lost with
  its agent loses its record at its session's expiry. Availability only, as the hints.

Then the old primary cannot serve: its count of this broker's grant (from its own send
time) ended, in real time, no later than this broker's promise
(:mod:`broker.ha.member_lease`), and it cannot confirm, deliver or admit without it. Every
message it confirmed, it confirmed while this broker was in its committed set, so this
broker holds it. A grant given after this read (a late request) is waited out by the new
primary itself (whatever promotes a broker, it serves only after its own grants to older
epochs lapsed); once promoted it grants no more. The old primary could stop counting this
broker only through a set change in ZooKeeper, which changes the set's version, and the
promotion's multi-op is checked against the version read: such a change fails it.
Used only while every member speaks replication format 3 (the member lease) and ZooKeeper
format 2 (promotion by multi-op); else only the old record's going promotes.
Combined as ``AnyOf(OldPrimaryGone(), LapsedGrant(...))`` (the agent's default,
:func:`default_rule`). The multi-op deletes the old record at the version read (never a
``setData`` on the dead session's node, whose expiry would delete the new record), so a
record that changed since fails the transaction, and nothing else changes.

Who asks: the claim's thread (:class:`ha_agent.primary_claim.PrimaryClaim`, whenever the
primary record changes, every second, and on :meth:`~ha_agent.primary_claim.PrimaryClaim.wake`)
and the agent's loop thread just before the multi-op
(:meth:`ha_agent.in_sync_keeper.InSyncKeeper.take`, with the record it deletes). A rule is
thread-safe and quick (an answer from the broker's liveness thread, not its event loop).

No I/O of its own (:class:`LapsedGrant` is given its reader); raises nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from ha_agent.cluster_records import InSyncRecord, PrimaryRecord
from ha_agent.membership import Member, cluster_speaks

__all__ = [
    "LEASE_REPLICATION_FORMAT",
    "LISTENER_RECHECK",
    "AnyOf",
    "GrantView",
    "LapsedGrant",
    "OldPrimary",
    "OldPrimaryGone",
    "Takeover",
    "TakeoverRule",
    "TakeoverView",
    "default_rule",
]

#: The replication format that carries the member lease (broker.ha.link_format).
LEASE_REPLICATION_FORMAT = 3
#: The ZooKeeper format whose promotions are multi-ops (ha_agent.promotion_txn).
MULTI_OP_ZOOKEEPER_FORMAT = 2
#: Seconds before a rule waiting for the other members' link hints is asked again.
HINT_RECHECK = 0.1
#: Seconds before a rule refused because the old primary's broker still accepts
#: connections is asked again (its link comes back, or its agent or session decides).
LISTENER_RECHECK = 0.25
#: Seconds before a rule whose broker's grant lapsed while its link is still up is asked
#: again: the primary has stopped asking, and a cut-off primary's link is found down within
#: a probe (broker.ha.link_reach); a slow one's asks again, or its heartbeat decides.
LINK_RECHECK = 0.1


@dataclass(frozen=True)
class OldPrimary:
    """The primary record as read: its content (None: one that cannot be parsed), its znode
    data ``version`` (what a delete must name) and the session that owns it."""

    record: PrimaryRecord | None
    version: int
    owner: int


@dataclass(frozen=True)
class TakeoverView:
    """What a rule reads: the primary record (None: there is none), the committed in-sync
    set (None: none recorded) and the member records."""

    old: OldPrimary | None
    in_sync: InSyncRecord | None = None
    members: Mapping[str, Member] = field(default_factory=dict)


@dataclass(frozen=True)
class Takeover:
    """A rule's answer: ``allowed`` to try the promotion's multi-op; ``replace``: the old
    record it deletes in that multi-op (None: it creates the record where there is none);
    ``reason``: why, for the log."""

    allowed: bool
    reason: str
    replace: OldPrimary | None = None
    #: Refused for now, but ask again in this many seconds (a grant that lapses then).
    retry_in: float | None = None


@dataclass(frozen=True)
class GrantView:
    """What a broker's ``GET /grant?epoch=N`` said (the member lease it granted as a
    backup, :class:`broker.ha.member_lease.GrantLedger`): ``lapsed``: every grant to an
    epoch older than N has lapsed (the drift bound included); ``remaining``: seconds until
    it does; ``needed``: the epochs whose primary counted this broker at its newest request
    (it was in that primary's set); ``formats``: the replication formats it speaks."""

    lapsed: bool
    remaining: float
    needed: frozenset[int] = frozenset()
    formats: str = ""
    #: the epoch of the primary its replication link is up to (None: none)
    linked: int | None = None


class TakeoverRule(Protocol):
    """Decides whether a candidate may take the primary record over now."""

    def may_take_over(self, view: TakeoverView) -> Takeover:
        """Allowed or not, and which old record the multi-op deletes."""
        ...


class OldPrimaryGone:
    """The rule of this release: the old primary's record is gone (its agent deleted it, or
    its session expired). A record still there is never replaced.

    With ``grant`` (the candidate's broker's ``GET /grant``) and ``grace`` (seconds; the
    agent's session timeout): while that broker's replication link is up to the primary of
    the in-sync set's epoch, the candidate waits ``grace`` from when it first found the
    record gone (issue 26, item 2). That primary may be serving on its members' grants
    through a ZooKeeper outage that expired every session, its own agent's with its record;
    that agent takes the record back once ZooKeeper serves (:mod:`ha_agent.reclaim`), and
    the outage ends with the same primary instead of a fail-over. Availability only: a
    member promoted meanwhile serves only once its own grant to that epoch lapsed, and the
    old primary, past its manager's lease, fences at that lapse."""

    def __init__(
        self,
        grant: Callable[[int], GrantView | None] | None = None,
        grace: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.grant = grant
        self.grace = grace
        self.clock = clock
        #: epoch -> when this candidate first found its primary's record gone, linked to it
        self._gone_since: dict[int, float] = {}

    def may_take_over(self, view: TakeoverView) -> Takeover:
        old = view.old
        if old is None:
            left = self._linked_wait(view)
            if left is not None:
                assert view.in_sync is not None
                return Takeover(
                    False,
                    f"no primary record, but this broker's link to the primary of epoch"
                    f" {view.in_sync.epoch} is up: waiting {left:.3f} s more for its agent to"
                    " take its record back",
                    retry_in=left,
                )
            return Takeover(True, "no primary record: the old primary's is gone")
        self._gone_since.clear()  # a record again (taken back): a later loss waits afresh
        record = old.record
        who = "an unreadable record" if record is None else f"{record.node} (epoch {record.epoch})"
        return Takeover(False, f"the primary record names {who}: waiting for it to go")

    def _linked_wait(self, view: TakeoverView) -> float | None:
        """Seconds left to wait for a primary this broker is linked to (None: none)."""
        if self.grant is None or self.grace <= 0 or view.in_sync is None:
            return None
        epoch = view.in_sync.epoch
        answer = self.grant(epoch + 1)
        if answer is None or answer.linked != epoch:
            return None
        now = self.clock()
        left = self._gone_since.setdefault(epoch, now) + self.grace - now
        return left if left > 0 else None


class AnyOf:
    """The first rule that allows, in order (e.g. the record gone, else a lapsed grant)."""

    def __init__(self, *rules: TakeoverRule) -> None:
        self.rules = rules

    def may_take_over(self, view: TakeoverView) -> Takeover:
        reasons: list[str] = []
        retry: list[float] = []
        for rule in self.rules:
            answer = rule.may_take_over(view)
            if answer.allowed:
                return answer
            if answer.retry_in is not None:
                retry.append(answer.retry_in)
            reasons.append(answer.reason)
        return Takeover(False, "; ".join(reasons) or "no rule", retry_in=min(retry, default=None))


class LapsedGrant:
    """The old primary's record is there, but this node's broker's grant to it, which that
    primary counted, has lapsed (module docstring). ``grant(epoch)`` reads the broker's
    ``GET /grant?epoch=N`` (None: no answer); ``node``: this agent's node."""

    def __init__(
        self,
        node: str,
        grant: Callable[[int], GrantView | None],
        link_down: Callable[[str, int], frozenset[str]] | None = None,
        link_lost: Callable[[str, int], None] | None = None,
        accepts: Callable[[str], bool] | None = None,
    ) -> None:
        self.node = node
        self.grant = grant
        #: does a listener still accept connections at this broker URL (the old primary's
        #: record's)? None: not asked (the grant and the hints decide)
        self.accepts = accepts
        #: the nodes whose link hints name (primary node, epoch); None: not asked (the
        #: grant alone decides, as with no other member)
        self.link_down = link_down
        #: told once per (primary node, epoch) that this broker's link to that primary is
        #: down and its grant lapsed: the agent publishes its own hint at once (the other
        #: members wait for it) instead of at its next check
        self.link_lost = link_lost
        self._lost: tuple[str, int] | None = None

    def may_take_over(self, view: TakeoverView) -> Takeover:
        old = view.old
        if old is None or old.record is None:
            return Takeover(False, "no readable primary record to replace")
        epoch = old.record.epoch
        if old.record.node == self.node:
            return Takeover(False, "the primary record is this node's own")
        if view.in_sync is None or view.in_sync.epoch != epoch:
            return Takeover(False, f"the in-sync set is not the one of epoch {epoch}")
        members = view.members
        if not (
            cluster_speaks(members, "replication", LEASE_REPLICATION_FORMAT)
            and cluster_speaks(members, "zookeeper", MULTI_OP_ZOOKEEPER_FORMAT)
        ):
            return Takeover(
                False,
                f"not every member speaks replication format {LEASE_REPLICATION_FORMAT} and"
                f" ZooKeeper format {MULTI_OP_ZOOKEEPER_FORMAT} (the member lease)",
            )
        answer = self.grant(epoch + 1)
        if answer is None:
            return Takeover(False, "the broker does not say what it granted (GET /grant)")
        if epoch not in answer.needed:
            return Takeover(
                False, f"the primary of epoch {epoch} does not count this broker's grant"
            )
        if answer.linked == epoch:
            # Asked again when the grant lapses (no sooner can it allow), then often: the
            # link of a primary that stopped asking is found down soon, if it is cut off.
            return Takeover(
                False,
                f"this broker's link to the primary of epoch {epoch} is up: slow, not dead"
                " (its link's heartbeat or its agent decides)",
                retry_in=LINK_RECHECK if answer.lapsed else answer.remaining,
            )
        if not answer.lapsed:
            return Takeover(
                False,
                f"this broker's grant to epoch {epoch} lapses in {answer.remaining:.3f} s",
                retry_in=answer.remaining,
            )
        self._tell_lost(old.record.node, epoch)
        linked = self._still_linked(view, old.record)
        if linked:
            return Takeover(
                False,
                f"{', '.join(linked)} published no link hint against {old.record.node}"
                f" (epoch {epoch}): only this broker's link to it is down, and its removal"
                " decides",
                retry_in=HINT_RECHECK,
            )
        url = old.record.broker_url
        if self.accepts is not None and url and self.accepts(url):
            return Takeover(
                False,
                f"{old.record.node}'s broker still accepts connections at {url}: slow or"
                " stopped, not gone (its agent fences a stopped one; a lost node's record"
                " goes with its session)",
                retry_in=LISTENER_RECHECK,
            )
        return Takeover(
            True,
            f"this broker's grant to {old.record.node} (epoch {epoch}), which it counted,"
            " has lapsed",
            replace=old,
        )

    def _tell_lost(self, primary: str, epoch: int) -> None:
        """Tell :attr:`link_lost`, once per primary and epoch."""
        if self.link_lost is None or self._lost == (primary, epoch):
            return
        self._lost = (primary, epoch)
        self.link_lost(primary, epoch)

    def _still_linked(self, view: TakeoverView, record: PrimaryRecord) -> list[str]:
        """The set's other members (their agents there) without a hint against ``record``."""
        if self.link_down is None or view.in_sync is None:
            return []
        others = [
            m.node
            for m in view.in_sync.members
            if m.node and m.node not in (self.node, record.node) and m.node in view.members
        ]
        if not others:
            return []
        hinted = self.link_down(record.node, record.epoch)
        return sorted(n for n in others if n not in hinted)


def default_rule(
    node: str,
    grant: Callable[[int], GrantView | None],
    link_down: Callable[[str, int], frozenset[str]] | None = None,
    reclaim_grace: float = 0.0,
    link_lost: Callable[[str, int], None] | None = None,
    accepts: Callable[[str], bool] | None = None,
) -> TakeoverRule:
    """The agent's rule: the old record gone (after ``reclaim_grace`` while this broker's
    link to that primary is up), else this broker's counted grant lapsed (and the other
    members' links down too, and the old primary's broker no longer accepting connections;
    ``link_lost``, ``accepts``: see :class:`LapsedGrant`)."""
    return AnyOf(
        OldPrimaryGone(grant, reclaim_grace),
        LapsedGrant(node, grant, link_down, link_lost, accepts),
    )
