"""A primary's agent takes its own record back after its session expired (issue 26, item 2).

:Status: Beta

Through a ZooKeeper outage longer than the session, a primary whose committed in-sync set
is non-empty serves on its members' grants (docs/reliability.md, "Serving through a
ZooKeeper outage"). When ZooKeeper serves again it has expired every session of the
outage, and with the primary's agent's session its ephemeral primary record. If nothing
else changed (no epoch taken, the in-sync set untouched) and its broker still serves at
that epoch, the agent re-creates the record in one multi-op
(:func:`~ha_agent.promotion_txn.commit_reclaim`): the same primary goes on, with a lease
from the new session. Anything changed, or the broker no longer primary at that epoch:
not reclaimed, the agent goes on as after any lost session (its broker fenced if another
primary is named).

This decides nothing about safety: a member is promoted only once its own grant to this
epoch lapsed, whoever wins (docs/reliability.md); the backups' agents wait
their session timeout for it while their brokers' links to this primary
are up (:class:`~ha_agent.takeover.OldPrimaryGone`), so that the outage ends with the
same primary.

Error Handling
==============

- :func:`reclaim` returns why it did not reclaim (one line, for ``primary_reclaim_failed``),
  None when it did; kazoo's errors propagate.
- :class:`Reclaimer` logs ``primary_reclaimed`` or ``primary_reclaim_failed``; a kazoo error
  (ZooKeeper not back yet) is logged (``zookeeper_error``) and the agent tries again at its
  next check while its broker still serves at that epoch.
"""

from __future__ import annotations

from typing import Any, Protocol

import structlog
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

from ha_agent.cluster_records import BrokerView, PrimaryRecord
from ha_agent.epoch_counter import read_counter
from ha_agent.in_sync import InSyncRecordError, read_in_sync
from ha_agent.primary_record import encode_primary, read_primary_versioned, session_id
from ha_agent.promotion_txn import PromotionConflict, commit_reclaim, needs_lock
from ha_agent.zk_format import ZkFormatError

__all__ = ["Claim", "Reclaimer", "may_reclaim", "reclaim"]

_log = structlog.get_logger("ha_agent.reclaim", component="agent")


def may_reclaim(view: BrokerView | None, epoch: int | None) -> bool:
    """Is the broker still the primary of ``epoch``, serving on its members' grants (the
    member lease in force with a non-empty committed set)?"""
    return (
        view is not None
        and epoch is not None
        and view.is_primary
        and view.on_grants
        and view.epoch == epoch
    )


def reclaim(
    client: Any, cluster: str, node: str, vip: str | None, view: BrokerView, epoch: int
) -> str | None:
    """Re-create this node's primary record at ``epoch`` if nothing changed since (see the
    module docstring): None when committed, else why not."""
    if not may_reclaim(view, epoch):
        return f"the broker is no longer the primary of epoch {epoch} on its members' grants"
    try:
        read = read_in_sync(client, cluster)
    except InSyncRecordError as exc:
        return f"the in-sync set cannot be read: {exc}"
    if read is None or read.record.epoch != epoch:
        at = None if read is None else read.record.epoch
        return f"the in-sync set is at epoch {at}, not {epoch}"
    if needs_lock(read):
        return "the in-sync set is in ZooKeeper format 1 (an agent of 0.1.0 may promote)"
    try:
        old = read_primary_versioned(client, cluster)
    except ZkFormatError as exc:
        return f"the primary record cannot be read: {exc}"
    if old is not None and old.owner == session_id(client):
        mine = old.record is not None and (old.record.node, old.record.epoch) == (node, epoch)
        return None if mine else "this session's primary record names another epoch"
    record = encode_primary(PrimaryRecord(node, epoch, view.url), vip)
    counter = read_counter(client, cluster)
    try:
        commit_reclaim(client, cluster, counter=counter, read=read, primary=record)
    except PromotionConflict as exc:
        return str(exc)
    return None


class Claim(Protocol):
    """What the reclaimer asks of the agent's claim (``PrimaryClaim``)."""

    def cancel(self, timeout: float | None = 5.0) -> bool: ...

    def resume(self) -> bool: ...


class Reclaimer:
    """The agent's part (its loop thread only): note a session lost while the broker served
    on grants (:meth:`session_lost`), then :meth:`take` at the next checks."""

    def __init__(self, cluster: str, node: str, vip: str | None) -> None:
        self.cluster, self.node, self.vip = cluster, node, vip
        #: the epoch whose record to take back (None: none)
        self.epoch: int | None = None

    def session_lost(self, view: BrokerView | None, promoted: int | None) -> None:
        """The agent's claim ended with its session: take the record back if its broker
        still serves ``promoted`` on its members' grants."""
        if may_reclaim(view, promoted):
            self.epoch = promoted

    def take(self, client: Any, view: BrokerView | None, claim: Claim) -> tuple[bool, int | None]:
        """(done, the epoch taken back or None). Not done while ZooKeeper does not answer
        and the broker still serves: the agent decides nothing meanwhile. A claim under way
        (the loop may have contended before it heard the old one end) is cancelled first:
        it would take the record back as its own promotion, and a claim that led would
        try to promote over it; then ``claim`` leads again without the rule
        (:meth:`ha_agent.primary_claim.PrimaryClaim.resume`)."""
        epoch = self.epoch
        if epoch is None:
            return True, None
        try:
            if view is None:
                why: str | None = "the broker does not answer"
            elif not claim.cancel(timeout=2.0):
                why = "the claim under way did not end"
            else:
                why = reclaim(client, self.cluster, self.node, self.vip, view, epoch)
        except (KazooException, KazooTimeoutError) as exc:
            if may_reclaim(view, epoch):
                _log.warning("zookeeper_error", reason=repr(exc))
                return False, None
            why = f"the broker is no longer the primary of epoch {epoch} on its members' grants"
        self.epoch = None
        if why is None and not claim.resume():
            why = "a claim is under way"
        if why is not None:
            _log.warning("primary_reclaim_failed", primary_epoch=epoch, reason=why)
            return True, None
        _log.warning("primary_reclaimed", primary_epoch=epoch)
        return True, epoch
