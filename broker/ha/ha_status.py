"""What ``GET /api/ha`` shows of an HA broker: its state, queues, backups and in-sync set.

A primary's queues (or, before its link replicates any, what a joining broker recovered
from its store) are listed with their last replication ids: the agent sums them into the
broker's replication position, which a total failure compares (docs/agent.md). A backup's
queues are those its link replicates, with what it applied.

THREAD UNSAFE: read on the broker's event loop.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from common.slices import SLICE, Steps, rows_in_slices

if TYPE_CHECKING:
    from broker.core.queue import Queue
    from broker.ha.backup import BackupLink
    from broker.ha.primary import Primary
    from broker.ha.replication_errors import ReplicationErrors
    from broker.ha.role import HaRole
    from broker.ha.state import HaState
    from broker.ha.streams import PrimaryStreams


@dataclass(frozen=True, slots=True)
class BackupSnapshot:
    """One backup of a primary, as its row in ``GET /api/ha`` shows it."""

    id: str
    url: str
    ready: bool
    expected: bool
    in_sync: bool
    pending_removal: bool
    held_confirms: int
    #: Why replication to it failed (which object, why), while it is not ready.
    replication_error: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class HaSnapshot:
    """An HA broker at one instant (``HaBroker.snapshot``): all the status view reads of
    it besides the rows of :class:`HaRows`."""

    state: HaState
    epoch: int
    broker_id: str
    cluster_id: str | None
    replication_formats: str
    url: str
    public_url: str
    #: The primary's address: this broker's own on a primary, its link's on a backup.
    primary: str | None
    #: A primary's members (as its membership message shows them), a backup's last heard.
    members: list[dict[str, Any]]
    held_confirms: int
    lease_remaining: float | None
    orphan_queues: dict[str, float]
    #: A primary's backups, by url.
    backups: tuple[BackupSnapshot, ...]
    #: A primary's in-sync set (:func:`in_sync_status`); None on a backup.
    in_sync: dict[str, Any] | None
    #: The member lease: the primary's grants, a backup's own last grant.
    member_lease: dict[str, Any]
    #: A primary's backups whose replication failed (linked now or not) and that are not
    #: ready again: which backup, which object, why.
    replication_errors: list[dict[str, Any]]
    #: A primary's backups whose links it refuses now (their replication format): which
    #: address, why, since when, how many dials.
    refused_links: list[dict[str, Any]]
    #: On a backup: why its link is not up; its latest replication error (object and
    #: reason), until a link catches up.
    link_error: dict[str, Any] | None
    replication_error: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class HaRows:
    """What the status view lists a row of, each read when its slice runs: a backup's
    queue replicators (by key), else the broker's own queues (a primary's, or what a
    joining broker recovered); on a primary, each backup's stream positions."""

    replicators: list[Any]
    queues: list[Queue]
    positions: Callable[[str, int], Steps[list[dict[str, Any]]]] | None
    backup_ids: tuple[str, ...]


class HaStatusSource(Protocol):
    """What the status view reads of an HA broker (:class:`~broker.ha.ha_broker.HaBroker`):
    the lists its rows come from, then a snapshot of everything else, at one instant."""

    def status_rows(self, ordered: bool = True) -> HaRows: ...

    def snapshot(self) -> HaSnapshot: ...


def member_dicts(members: tuple[tuple[str, str, str], ...]) -> list[dict[str, Any]]:
    """The role's members (id, url, state) as the membership message and status show them."""
    return [{"id": i, "url": u, "state": s} for i, u, s in members]


def in_sync_status(role: HaRole, granted: Collection[str] | None = None) -> dict[str, Any]:
    """A primary's in-sync set: whom it counts, whose removal waits, what was committed.
    ``granted``: while the member lease is in force, the backups that granted this
    primary a lease; a backup is wanted only once it did (a member must grant)."""
    committed = role.committed_in_sync
    wanted = role.in_sync_wanted()
    if granted is not None:
        wanted = [b for b in wanted if b in granted]
    return {
        "wanted": wanted,
        "pending_removal": role.pending_removal(),
        "awaited": role.awaited(),
        "committed": (
            None if committed is None else {"epoch": committed[0], "members": sorted(committed[1])}
        ),
    }


def backup_snapshots(
    role: HaRole, primary: Primary, errors: ReplicationErrors
) -> tuple[BackupSnapshot, ...]:
    """A primary's backups now, by url: the role's records, the guards' held confirms."""
    snapshots = []
    for backup_id, record in sorted(role.backups.items(), key=lambda b: b[1].url):
        guards = primary.backups.get(backup_id)
        ready = record.ready and record.connected
        snapshots.append(
            BackupSnapshot(
                backup_id,
                record.url,
                ready=ready,
                expected=backup_id in role.expected,
                in_sync=record.in_sync,
                pending_removal=record.gone,
                held_confirms=guards.held() if guards is not None else 0,
                replication_error=None if ready else errors.view(backup_id),
            )
        )
    return tuple(snapshots)


def rows_of(
    link: BackupLink | None,
    vhost: Any,
    role: HaRole,
    streams: PrimaryStreams | None,
    ordered: bool = True,
) -> HaRows:
    """The lists of the status rows: a backup's link's replicators once it replicates any;
    else the broker's own queues (a primary's, or what a joining broker recovered from its
    store: their last ids are its replication position, what a total failure compares);
    on a primary (``streams``), each backup's stream positions. ``ordered``: by name (the
    rows a reader sees); False for a sum alone (the agent's health check, twice a second:
    sorting 10,000 names each time was the bulk of a 102 ms step in soak45)."""
    if link is not None and link.replicator.replicators:
        mapping = link.replicator.replicators
        replicators = [r for _key, r in sorted(mapping.items())] if ordered else [*mapping.values()]
        return HaRows(replicators, [], None, ())
    if ordered:
        own = [q for _key, q in sorted(vhost.queues.items()) if q.exclusive_owner is None]
    else:  # no key made a queue (soak47: 53 ms of a 107 ms step walking 10,000 items)
        own = [q for q in vhost.queues.values() if q.exclusive_owner is None]
    if streams is None:
        return HaRows([], own, None, ())
    ids = tuple(b for b, _ in sorted(role.backups.items(), key=lambda b: b[1].url))
    return HaRows([], own, streams.positions_steps, ids)


def ha_status_steps(
    ha: HaStatusSource, rows: bool = True, positions: bool | None = None
) -> Steps[dict[str, Any]]:
    """What GET /api/ha shows, in slices of :data:`SLICE` rows (the management API runs a
    slice a turn of the event loop: 10,000 queues in one callback held it 0.5-0.8 s). The
    queues and each backup's streams are listed when the first slice runs; each row reads
    its queue when its slice runs; everything else is the broker's snapshot, taken in the
    last slice (the state, epoch, backups, in-sync set and lease answer for one instant).

    ``replication_position`` is the sum of the queues' last ids (what a total failure
    compares). ``rows`` False: without the per-queue rows (``queues``, and each backup's
    ``queues``), the position alone: what the agent's health check reads twice a second
    (``GET /api/ha?queues=summary``; at 10,000 queues the rows are megabytes of JSON).
    ``positions`` (default: ``rows``): each backup's ``queues`` alone (the console's
    sampler, whose lag histories read them every second, with nobody viewing)."""
    listed = ha.status_rows(ordered=rows)
    queues: list[dict[str, Any]] | None = None
    if listed.replicators:
        if rows:
            queues = yield from rows_in_slices(listed.replicators, _replicator_row)
        else:
            ids = yield from rows_in_slices(listed.replicators, _replicator_last_id)
    elif rows:
        queues = yield from rows_in_slices(listed.queues, _queue_row)
    else:
        ids = yield from rows_in_slices(listed.queues, _last_id)
    if queues is not None:
        ids = [row["last_id"] for row in queues]
    with_positions = rows if positions is None else positions
    streams: dict[str, list[dict[str, Any]]] = {}
    if with_positions and listed.positions is not None:
        for backup_id in listed.backup_ids:
            streams[backup_id] = yield from listed.positions(backup_id, SLICE)
    snap = ha.snapshot()
    status = {
        "state": snap.state.value,
        "epoch": snap.epoch,
        "broker_id": snap.broker_id,
        "cluster_id": snap.cluster_id,
        "replication_formats": snap.replication_formats,
        "url": snap.url,
        "public_url": snap.public_url,
        "primary": snap.primary,
        "members": snap.members,
        "queues": queues or [],
        "held_confirms": snap.held_confirms,
        "lease_remaining": snap.lease_remaining,
        "orphan_queues": snap.orphan_queues,
        "backups": [_backup_row(b, streams if with_positions else None) for b in snap.backups],
        "in_sync": snap.in_sync,
        "member_lease": snap.member_lease,
        "replication_errors": snap.replication_errors,
        "refused_links": snap.refused_links,
        "link_error": snap.link_error,
        "replication_error": snap.replication_error,
        "replication_position": sum(ids),
    }
    if queues is None:
        del status["queues"]
    return status


def _backup_row(
    backup: BackupSnapshot, streams: dict[str, list[dict[str, Any]]] | None
) -> dict[str, Any]:
    """A backup's row; ``streams``: with its streams' positions (``queues``)."""
    row: dict[str, Any] = {
        "id": backup.id,
        "url": backup.url,
        "ready": backup.ready,
        "expected": backup.expected,
        "in_sync": backup.in_sync,
        "pending_removal": backup.pending_removal,
        "held_confirms": backup.held_confirms,
        "queues": None if streams is None else streams.get(backup.id, []),
        "replication_error": backup.replication_error,
    }
    if streams is None:
        del row["queues"]
    return row


def _replicator_row(replicator: Any) -> dict[str, Any]:
    return {
        "name": replicator.queue.name,
        "vhost": replicator.queue.vhost,
        "caught_up": replicator.caught_up,
        "messages": replicator.queue.message_count,
        "last_id": replicator.queue.last_position,
        "enqueued": replicator.enqueued_total,
        "dequeued": replicator.dequeued_total,
    }


def _replicator_last_id(replicator: Any) -> int:
    return int(replicator.queue.last_position)


def _last_id(queue: Queue) -> int:
    return queue.last_position


def _queue_row(queue: Queue) -> dict[str, Any]:
    return {
        "name": queue.name,
        "vhost": queue.vhost,
        "messages": queue.message_count,
        "last_id": queue.last_position,
    }
