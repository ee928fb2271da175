"""A promotion decided by one ZooKeeper multi-op, not by the election lock (issue 26, item 1).

:Status: Beta

:func:`commit_promotion` commits, in one transaction (all or nothing, ZooKeeper's
``multi``):

1. the epoch counter set to the new epoch *at the version read* (no epoch taken since);
2. the in-sync set at the new epoch (the old members less the promoted broker) *at the
   version read* (``create`` when it was absent): nobody changed the set since;
3. the old primary's record deleted at the version read, when a takeover rule allows
   replacing one that is still there (:mod:`ha_agent.takeover`; today's rule never does),
   and the new, *ephemeral* primary record created (never a ``setData`` on the dead
   session's node, whose expiry would delete the new record).

Two candidates that read the same state cannot both commit: the second transaction fails
on a version (or on the primary record's ``create``) and applies nothing. Its answer lost
(the connection dropped past ZooKeeper's commit), it is read back
(:func:`ha_agent.zk_commit.commit_multi`): committed exactly when the primary record holds
this promotion's bytes and belongs to this session (a retried write would report
BadVersion for its own commit and make the winner resign, leaving no primary).

**When the election lock is still taken** (:func:`needs_lock`): while the in-sync set is
absent or written in ZooKeeper format 1. An agent of release 0.1.0 promotes under kazoo's
lock and takes the epoch apart from its write of the set; it reads only format 1. The set
is first written in format 2 once every member record announces format 2
(:func:`set_format`), and then stays in format 2. So a 0.1.0 agent promotes only from a
format-1 set, under the lock, which every agent of this code then takes too; a lock-free
promotion only from a format-2 set, which a 0.1.0 agent cannot read (it logs
``zk_record_format_unknown`` and does not contend). The move from one to the other is a
write of the set, which both kinds of promotion check by version. An agent of 0.1.0 and
one of this code never both believe they are primary (docs/ha-design.md, "Format
versions"). The cost: a node put back on 0.1.0 beside a format-2 set is never promoted
(a downgrade is not supported).

Error Handling
==============

- :class:`PromotionConflict` (nothing applied): another promotion, a change of the set or
  an epoch taken since the read, or a primary record created meanwhile.
- ``InSyncEpochError`` (nothing sent): the set read is at a newer epoch.
- ``EpochCounterError``: the counter is exhausted.
- kazoo's errors (connection loss whose read-back does not find the commit, session
  expiry) propagate: not committed as far as this session can tell.
- Blocking calls: run them in a thread, not on an event loop.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kazoo.exceptions import NoNodeError

from ha_agent.cluster_records import InSyncRecord
from ha_agent.epoch_counter import MAX_EPOCH, EpochCounterError
from ha_agent.in_sync import InSyncEpochError, VersionedInSync, encode_in_sync
from ha_agent.membership import Member, cluster_speaks
from ha_agent.primary_record import session_id
from ha_agent.takeover import OldPrimary
from ha_agent.zk_commit import MultiConflict, Op, commit_multi, holds
from ha_agent.zk_layout import ClusterLayout

__all__ = [
    "PromotionConflict",
    "commit_promotion",
    "commit_reclaim",
    "needs_lock",
    "set_format",
]

#: The ZooKeeper format from which promotions need no election lock.
LOCK_FREE_FORMAT = 2


class PromotionConflict(Exception):
    """ZooKeeper refused the promotion's multi-op: nothing of it was applied."""


def set_format(members: Mapping[str, Member], read: VersionedInSync | None) -> int:
    """The format to write the in-sync set in: 2 once every member speaks it or the set
    read is already in format 2 (it never goes back), else 1."""
    if read is not None and read.format >= LOCK_FREE_FORMAT:
        return read.format
    return LOCK_FREE_FORMAT if cluster_speaks(members, "zookeeper", LOCK_FREE_FORMAT) else 1


def needs_lock(in_sync: VersionedInSync | None) -> bool:
    """Whether a promotion must hold kazoo's election lock too (see the module docstring):
    the set is absent, or written in format 1 (where an agent of 0.1.0 may promote)."""
    return in_sync is None or in_sync.format < LOCK_FREE_FORMAT


def _why(exc: MultiConflict, layout: ClusterLayout) -> str:
    path, error = exc.op.path, type(exc.error).__name__
    if path == layout.epoch:
        return f"an epoch was taken since the read ({error})"
    if path == layout.in_sync:
        return f"the in-sync set changed since the read ({error})"
    if exc.op.kind == "delete":
        return f"the old primary record changed since the read ({error})"
    return f"another primary record was created ({error})"


def commit_promotion(
    client: Any,
    cluster: str,
    *,
    counter: tuple[int, int],
    minimum: int,
    read: VersionedInSync | None,
    record: InSyncRecord,
    format_: int,
    primary: bytes,
    replace: OldPrimary | None = None,
) -> VersionedInSync:
    """Commit a promotion at ``record.epoch`` (see the module docstring): ``counter`` is
    the epoch counter as read (value, version), ``read`` the set as read, ``record`` the
    set to write (at the new epoch), ``primary`` the new primary record's bytes,
    ``replace`` the old record a takeover deletes. Returns the committed set."""
    layout = ClusterLayout(cluster)
    value, counter_version = counter
    epoch = record.epoch
    if epoch > MAX_EPOCH:
        raise EpochCounterError(f"{layout.epoch}: the epoch counter is exhausted at {value}")
    if epoch <= value or epoch < minimum:
        raise ValueError(f"epoch {epoch} is not above the counter's {value} and {minimum - 1}")
    if read is not None and read.record.epoch > epoch:
        raise InSyncEpochError(read.record.epoch, epoch)
    data = encode_in_sync(record, format_)
    ops = [
        Op("set", layout.epoch, str(epoch).encode("ascii"), version=counter_version),
        Op("create", layout.in_sync, data)
        if read is None
        else Op("set", layout.in_sync, data, version=read.version),
    ]
    if replace is not None:
        ops.append(Op("delete", layout.primary, version=replace.version))
    ops.append(Op("create", layout.primary, primary, ephemeral=True))

    committed = _own_record(client, layout.primary, primary)
    try:
        results = commit_multi(client, ops, committed)
    except MultiConflict as exc:
        raise PromotionConflict(_why(exc, layout)) from None
    if not results:  # its answer lost, found committed: the set's version as read back
        version = holds(client, layout.in_sync, data)
        return VersionedInSync(record, -1 if version is None else version, format_)
    version = 0 if read is None else int(results[1].version)
    return VersionedInSync(record, version, format_)


def _own_record(client: Any, path: str, data: bytes) -> Callable[[], bool]:
    """The read-back of a multi-op whose answer was lost: the primary record at ``path``
    holds exactly ``data`` and belongs to this session."""

    def committed() -> bool:
        try:
            current, stat = client.retry(client.get, path)
        except NoNodeError:
            return False
        return bool(current == data and stat.ephemeralOwner == session_id(client))

    return committed


def commit_reclaim(
    client: Any, cluster: str, *, counter: tuple[int, int], read: VersionedInSync, primary: bytes
) -> None:
    """Re-create this agent's own primary record at the epoch its broker still serves,
    after its session expired (issue 26, item 2: a primary that served on its members'
    grants through a ZooKeeper outage; the record, ephemeral, went with the session). One
    multi-op: the epoch counter still at the version read *and* at the set's epoch (no
    epoch taken since: nobody was promoted), the in-sync set still at the version read
    (no change since), and the record created (another record there: another candidate
    was first). :class:`PromotionConflict` when any of it changed: nothing is applied."""
    layout = ClusterLayout(cluster)
    value, counter_version = counter
    if value != read.record.epoch:
        raise PromotionConflict(
            f"the epoch counter is at {value}, not at the set's epoch {read.record.epoch}"
        )
    ops = [
        Op("check", layout.epoch, version=counter_version),
        Op("check", layout.in_sync, version=read.version),
        Op("create", layout.primary, primary, ephemeral=True),
    ]

    committed = _own_record(client, layout.primary, primary)
    try:
        commit_multi(client, ops, committed)
    except MultiConflict as exc:
        raise PromotionConflict(_why(exc, layout)) from None
