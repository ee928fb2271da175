"""The in-sync set as one agent keeps it: read, update, commit to the broker, take on promotion.

:Status: Beta (issue 10)

:class:`InSyncKeeper` is the agent's half of :mod:`ha_agent.in_sync` (the znode and its
conditional writes) and of the pure rules in :mod:`ha_agent.promotion`
(:func:`~ha_agent.promotion.isr_update`, :func:`~ha_agent.promotion.promotion_in_sync`,
:func:`~ha_agent.promotion.releasable`, :func:`~ha_agent.promotion.eligibility`).

Contract
========

- :meth:`InSyncKeeper.read` reads the committed set (with its version) into
  :attr:`~InSyncKeeper.in_sync` / :attr:`~InSyncKeeper.error`; every agent does, at each
  check, and :func:`~ha_agent.promotion.decide` sees the result.
- :meth:`InSyncKeeper.keep` runs on the primary's node only: it reads the broker's
  ``in_sync`` and the committed set, writes :func:`~ha_agent.promotion.isr_update` when it
  changes (conditionally on the version read, only while the set's epoch is the one the agent
  promoted its broker with), and then, when the committed set leaves out backups whose
  removal the broker waits for, tells the broker (``POST /api/ha/in-sync``) so it releases
  the confirms it holds for them.
- :meth:`InSyncKeeper.take` runs before a promotion: it re-checks eligibility against a fresh
  read of the set, takes the next epoch and writes the set at that epoch (conditionally)
  and returns the members the broker must expect when promoted.
- THREAD UNSAFE: only the agent's loop thread calls it. Calls go from the agent (and its
  :class:`~ha_agent.promoter.Promoter`) to the keeper, never back.

Error Handling
==============

- An in-sync write that loses a race (another write since the read) is logged
  (``in_sync_conflict``) and read again at the next check; a removal is posted to the broker
  only once a write or a read shows it committed. A set at a newer epoch than the broker's
  fences the broker (:func:`~ha_agent.promotion.decide`). A set that cannot be parsed is
  logged (``in_sync_record_invalid``) and lets no backup contend.
- :meth:`~InSyncKeeper.keep` logs ZooKeeper errors (``zookeeper_error``, ``during=in_sync``)
  and broker refusals (``in_sync_post_failed``); the next check tries again.
  :meth:`~InSyncKeeper.read` and :meth:`~InSyncKeeper.take` let kazoo's errors propagate.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import structlog
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError
from kazoo.handlers.threading import KazooTimeoutError

from broker.management.client import ManagementError
from ha_agent.broker_check import BrokerCheck, PromoteRefused
from ha_agent.epoch_counter import read_counter
from ha_agent.in_sync import (
    InSyncEpochError,
    InSyncFormatError,
    InSyncRecordError,
    VersionedInSync,
    read_in_sync,
    write_in_sync,
)
from ha_agent.membership import Member
from ha_agent.primary_record import encode_primary, read_primary_versioned
from ha_agent.promotion import (
    BrokerInSync,
    BrokerView,
    ClusterView,
    InSyncMember,
    InSyncRecord,
    PrimaryRecord,
    eligibility,
    isr_update,
    known_gone,
    promotion_in_sync,
    releasable,
)
from ha_agent.promotion_txn import PromotionConflict, commit_promotion, needs_lock, set_format
from ha_agent.takeover import TakeoverRule, TakeoverView
from ha_agent.zk_commit import MultiConflict
from ha_agent.zk_layout import ClusterLayout

__all__ = ["InSyncKeeper", "PromotionRequest", "Taken"]

_log = structlog.get_logger("ha_agent.in_sync_keeper", component="agent")


class InSyncKeeper:
    """See the module docstring. ``client`` is the agent's KazooClient."""

    def __init__(
        self, client: Any, cluster: str, broker_check: BrokerCheck, node: str = ""
    ) -> None:
        self.client = client
        self.cluster = cluster
        self.broker_check = broker_check
        #: this agent's node: the set it keeps names it as its primary's (only shown)
        self.node = node
        #: the committed in-sync set as last read or written (None: none recorded)
        self.in_sync: VersionedInSync | None = None
        #: why the record could not be parsed at the last read ("" when it could)
        self.error = ""
        self._posted: tuple[int, int, tuple[str, ...]] | None = None

    def read(self) -> VersionedInSync | None:
        """Read the committed in-sync set into :attr:`in_sync` (kazoo errors propagate)."""
        try:
            self.in_sync = read_in_sync(self.client, self.cluster)
        except InSyncRecordError as exc:
            if str(exc) != self.error and isinstance(exc, InSyncFormatError):
                path = ClusterLayout(self.cluster).in_sync
                _log.error("zk_record_format_unknown", path=path, found=exc.found, reason=str(exc))
            elif str(exc) != self.error:
                _log.error("in_sync_record_invalid", reason=str(exc))
            self.in_sync, self.error = None, str(exc)
            return None
        self.error = ""
        return self.in_sync

    # -- this agent's broker is the primary -------------------------------------------
    def keep(self, view: BrokerView, epoch: int, members: Mapping[str, Member]) -> bool:
        """Bring the committed in-sync set in line with the broker's, then tell the broker
        which removals are committed. True when the set was read (the loop need not read
        it again); any ZooKeeper error is logged and the next check tries again.
        ``members`` are the member records as last read (they name the set's members)."""
        broker = view.in_sync
        if broker is None or view.epoch != epoch:
            return False  # a broker without the set, or not yet at the promoted epoch
        try:
            read = self.read()
            if self.error:
                return True
            if read is not None and read.record.epoch != epoch:
                # A newer epoch: another primary owns the set, decide() fences. An older
                # one cannot follow a promotion that wrote its own: touch nothing.
                _log.warning("in_sync_epoch_mismatch", in_sync_epoch=read.record.epoch)
                return True
            committed = self._update(read, broker, epoch, members, view.store_id)
        except (KazooException, KazooTimeoutError) as exc:
            _log.warning("zookeeper_error", reason=repr(exc), during="in_sync")
            return False
        if committed is not None:
            self._post(committed, broker)
        return True

    def _update(
        self,
        read: VersionedInSync | None,
        broker: BrokerInSync,
        epoch: int,
        members: Mapping[str, Member],
        store_id: str,
    ) -> VersionedInSync | None:
        """The committed set after writing the update, if any; None when a write lost a race
        (nothing is known committed then). ``store_id``: the primary broker's store."""
        old = None if read is None else read.record
        ids = isr_update(old, broker, members)
        format_ = set_format(members, read)  # 2 once every member speaks it, then for good
        if ids is None:
            assert old is not None and read is not None
            # Same set; name a member recorded before its agent published its broker id
            # and store id, or write it in the format the members speak now (this write
            # changes no member).
            named = tuple(_named(m, broker, members) for m in old.members)
            if (named, old.primary_store_id, old.primary_node, read.format) == (
                old.members,
                store_id,
                self.node,
                format_,
            ):
                return read
            ids = tuple(sorted(old.broker_ids))
            record = InSyncRecord(epoch, named, store_id, self.node)
        else:
            kept = {} if old is None else {m.broker_id: m for m in old.members}
            record = InSyncRecord(
                epoch,
                tuple(_named(kept.get(i) or InSyncMember(i), broker, members) for i in ids),
                store_id,
                self.node,
            )
        try:
            # checked against the epoch counter too: no promotion took an epoch since
            _, epoch_version = read_counter(self.client, self.cluster)
            committed = write_in_sync(
                self.client, self.cluster, record, read, format_, epoch_version=epoch_version
            )
        except (BadVersionError, NodeExistsError, InSyncEpochError, MultiConflict) as exc:
            _log.warning("in_sync_conflict", reason=repr(exc))
            return None
        before = set() if old is None else old.broker_ids
        self.in_sync = committed
        _log.info(
            "in_sync_changed",
            added=sorted(set(ids) - before),
            removed=sorted(before - set(ids)),
            known_gone=sorted(known_gone(old, broker, members) & (before - set(ids))),
            members=[m.node or m.broker_id for m in record.members],
            in_sync_epoch=epoch,
            version=committed.version,
        )
        return committed

    def _post(self, committed: VersionedInSync, broker: BrokerInSync) -> None:
        """Tell the broker the committed set when it leaves out backups whose held
        confirms wait for their removal, or when it adds members the broker was not told
        of (the member lease counts the grants of the set the broker was told: a member
        it was not told of could be promoted only after the old primary's session ends)
        (only a committed record gets here)."""
        record = committed.record
        released = releasable(record, broker)
        told = broker.committed
        added = told is not None and (told[0] != record.epoch or not record.broker_ids <= told[1])
        if not released and not added:
            return
        members = sorted(record.broker_ids)
        try:
            answer = self.broker_check.commit_in_sync(record.epoch, members)
        except (PromoteRefused, ManagementError) as exc:
            _log.warning("in_sync_post_failed", reason=str(exc))
            return
        key = (record.epoch, committed.version, released)
        if key != self._posted:
            self._posted = key
            _log.info(
                "in_sync_committed",
                in_sync_epoch=record.epoch,
                version=committed.version,
                members=members,
                removed=list(released),
                released=answer.get("released"),
                pending_removal=answer.get("pending_removal"),
            )

    # -- this agent is about to promote its broker ------------------------------------
    def take(
        self,
        view: BrokerView,
        cluster_view: ClusterView,
        promotion: PromotionRequest,
    ) -> Taken | None:
        """Before a promotion: read the in-sync set, check eligibility against it (with
        ``cluster_view``, the one the loop last decided on, given this broker ``view`` and
        the set just read), ask the takeover rule about the primary record, and commit the
        promotion as one multi-op (:func:`~ha_agent.promotion_txn.commit_promotion`: the
        next epoch, the set at that epoch, the primary record). Returns the epoch, the
        broker ids the new primary must expect and, for a joining broker whose store the
        set read names, that store (:class:`Taken`); None (logged) when this broker may not
        be promoted after all or the multi-op lost. kazoo's connection errors propagate
        (nothing promoted yet)."""
        read = self.read()
        fresh = replace(
            cluster_view,
            broker=view,
            in_sync=None if read is None else read.record,
            in_sync_error=self.error,
        )
        eligible, why = eligibility(fresh)
        if not eligible:
            _log.info("election_withdraw", reason=f"won the election, but {why}")
            return None
        members = cluster_view.members
        if not promotion.locked and needs_lock(read):
            _log.info(
                "election_withdraw",
                reason="won without the election lock, but the in-sync set is not in"
                " ZooKeeper format 2 (an agent of 0.1.0 may promote): contending with the lock",
            )
            return None
        old_primary = read_primary_versioned(self.client, self.cluster)
        takeover = promotion.rule.may_take_over(
            TakeoverView(old_primary, None if read is None else read.record, members)
        )
        if not takeover.allowed:
            _log.info("election_withdraw", reason=f"won the election, but {takeover.reason}")
            return None
        # Above every epoch a member reports too: a broker promoted outside the agents
        # (qpid-ha --cluster-manager promote) took one the counter never issued, and two
        # primaries of one epoch would number their messages alike (epoch << 40).
        seen = max((m.epoch for m in members.values()), default=0)
        minimum = max(view.epoch, seen) + 1
        counter = read_counter(self.client, self.cluster)
        epoch = max(counter[0] + 1, minimum)
        old = None if read is None else read.record
        members_in = promotion_in_sync(old, view, members)  # less those known gone
        ids = {m.broker_id for m in members_in}
        record = InSyncRecord(epoch, members_in, view.store_id, self.node)
        primary = encode_primary(PrimaryRecord(self.node, epoch, view.url), promotion.vip)
        try:
            committed = commit_promotion(
                self.client,
                self.cluster,
                counter=counter,
                minimum=minimum,
                read=read,
                record=record,
                format_=set_format(members, read),
                primary=primary,
                replace=takeover.replace,
            )
        except (PromotionConflict, InSyncEpochError) as exc:
            _log.warning("promotion_conflict", reason=str(exc), new_epoch=epoch)
            return None
        self.in_sync = committed
        _log.info("epoch_taken", new_epoch=epoch, reason=f"{why}; {takeover.reason}")
        before = set() if read is None else read.record.broker_ids
        _log.info(
            "in_sync_changed",
            added=[],
            removed=sorted(before - record.broker_ids),
            known_gone=sorted({m.broker_id for m in promotion_in_sync(old, view)} - set(ids)),
            members=[m.node or m.broker_id for m in record.members],
            in_sync_epoch=epoch,
            version=committed.version,
        )
        named = (
            view.store_id
            if view.ha_state == "joining" and old is not None and view.store_id in old.store_ids
            else None
        )
        return Taken(epoch, sorted(record.broker_ids), named)


@dataclass(frozen=True)
class PromotionRequest:
    """How a promotion is asked for: the takeover ``rule`` (:mod:`ha_agent.takeover`),
    whether the claim holds kazoo's election lock (``locked``), and the virtual IP the
    primary record names."""

    rule: TakeoverRule
    locked: bool
    vip: str | None = None


@dataclass(frozen=True)
class Taken:
    """What :meth:`InSyncKeeper.take` committed for a promotion: its ``epoch``, the broker
    ids the new primary must ``expect``, and ``committed_store``: the broker's store when
    it is joining and the set read names it (the broker then needs no other joining
    broker: :mod:`ha_agent.store_choice`), else None."""

    epoch: int
    expect: list[str]
    committed_store: str | None = None


def _named(
    entry: InSyncMember, broker: BrokerInSync, members: Mapping[str, Member]
) -> InSyncMember:
    """``entry`` with its node, URL and store id filled in where unknown, from the member
    records (by broker id) and the broker's list of backups (node and URL are only shown)."""
    if entry.node and entry.url and entry.store_id:
        return entry
    bid = entry.broker_id
    member = next((m for m in members.values() if m.broker_id == bid), None)
    node = entry.node or (member.node if member is not None else "")
    url = entry.url or dict(broker.urls).get(bid) or (member.broker_url if member else "")
    store_id = entry.store_id or (member.store_id if member is not None else "")
    return InSyncMember(bid, node, url, store_id)
