"""What ``GET /api/ha`` shows of an HA broker: its state, queues, backups and in-sync set.

A primary's queues (or, before its link replicates any, what a joining broker recovered
from its store) are listed with their last replication ids: the agent sums them into the
broker's replication position, which a total failure compares (docs/agent.md). A backup's
queues are those its link replicates, with what it applied.

THREAD UNSAFE: read on the broker's event loop.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any, Protocol

from common.slices import SLICE, Steps, rows_in_slices

if TYPE_CHECKING:
    from broker.core.queue import Queue
    from broker.ha.admission import HaAdmission
    from broker.ha.backup import BackupLink
    from broker.ha.cluster_identity import ClusterIdentity
    from broker.ha.primary import Primary
    from broker.ha.replication_errors import ReplicationErrors
    from broker.ha.role import HaRole
    from broker.ha.state import HaState
    from broker.ha.streams import PrimaryStreams
    from common.formats import FormatRange


class HaStatusSource(Protocol):
    """What the status view reads of an HA broker (:class:`~broker.ha.ha_broker.HaBroker`):
    its public members only, each read when the slice that shows it runs."""

    @property
    def state(self) -> HaState: ...

    @property
    def epoch(self) -> int: ...

    @property
    def broker_id(self) -> str: ...

    @property
    def url(self) -> str: ...

    @property
    def public_url(self) -> str: ...

    @property
    def primary_address(self) -> str | None: ...

    @property
    def lease_until(self) -> float | None: ...

    @property
    def identity(self) -> ClusterIdentity: ...

    @property
    def formats(self) -> FormatRange: ...

    @property
    def role(self) -> HaRole: ...

    @property
    def vhost(self) -> Any: ...

    @property
    def link(self) -> BackupLink | None: ...

    @property
    def admission(self) -> HaAdmission: ...

    @property
    def primary(self) -> Primary | None: ...

    @property
    def streams(self) -> PrimaryStreams | None: ...

    @property
    def backup_errors(self) -> ReplicationErrors: ...

    def now(self) -> float:
        """The broker's clock."""
        ...

    def membership(self) -> list[dict[str, Any]]:
        """A primary's members, as its membership message shows them."""
        ...

    def last_members(self) -> list[dict[str, Any]]:
        """A backup's membership last heard from a primary."""
        ...

    def lease_status(self) -> dict[str, Any]:
        """The member lease: the primary's grants, a backup's own last grant."""
        ...

    def in_sync_status(self) -> dict[str, Any]:
        """A primary's in-sync set (:func:`in_sync_status`)."""
        ...


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


def ha_status_steps(
    ha: HaStatusSource, rows: bool = True, positions: bool | None = None
) -> Steps[dict[str, Any]]:
    """What GET /api/ha shows, in slices of :data:`SLICE` rows (the management API runs a
    slice a turn of the event loop: 10,000 queues in one callback held it 0.5-0.8 s). The
    queues and each backup's streams are listed when the first slice runs; each row reads
    its queue when its slice runs; everything else is read in the last slice, at once (the
    state, epoch, in-sync set and lease answer for one instant).

    ``replication_position`` is the sum of the queues' last ids (what a total failure
    compares). ``rows`` False: without the per-queue rows (``queues``, and each backup's
    ``queues``), the position alone: what the agent's health check reads twice a second
    (``GET /api/ha?queues=summary``; at 10,000 queues the rows are megabytes of JSON).
    ``positions`` (default: ``rows``): each backup's ``queues`` alone (the console's
    sampler, whose lag histories read them every second, with nobody viewing)."""
    queues: list[dict[str, Any]] | None = None
    if ha.link is not None and ha.link.replicator.replicators:
        replicators = [r for _key, r in sorted(ha.link.replicator.replicators.items())]
        if rows:
            queues = yield from rows_in_slices(replicators, _replicator_row)
        else:
            ids = yield from rows_in_slices(replicators, _replicator_last_id)
    else:
        # A primary's queues, or what a joining broker recovered from its store (before
        # its link replicates any): their last ids are its replication position, what
        # a total failure compares.
        own = [q for _key, q in sorted(ha.vhost.queues.items()) if q.exclusive_owner is None]
        if rows:
            queues = yield from rows_in_slices(own, _queue_row)
        else:
            ids = yield from rows_in_slices(own, _last_id)
    if queues is not None:
        ids = [row["last_id"] for row in queues]
    backups = yield from _backups_status(ha, rows if positions is None else positions)
    now = ha.now()
    status = {
        "state": ha.state.value,
        "epoch": ha.epoch,
        "broker_id": ha.broker_id,
        "cluster_id": ha.identity.cluster_id,
        "replication_formats": ha.formats.text,
        "url": ha.url,
        "public_url": ha.public_url,
        "primary": ha.primary_address if ha.primary is None else ha.url,
        "members": ha.membership() if ha.primary is not None else ha.last_members(),
        "queues": queues or [],
        "held_confirms": ha.primary.held_confirms() if ha.primary else 0,
        "lease_remaining": (
            None if ha.lease_until is None else round(max(0.0, ha.lease_until - now), 3)
        ),
        "orphan_queues": ha.primary.orphans.waiting(now) if ha.primary else {},
        "backups": backups,
        "in_sync": ha.in_sync_status() if ha.primary is not None else None,
        "member_lease": ha.lease_status(),
        # A primary's backups whose replication failed (linked now or not) and that are not
        # ready again: which backup, which object, why.
        "replication_errors": ha.backup_errors.views(lambda backup_id: _ready(ha, backup_id)),
        # A primary's backups whose links it refuses now (their replication format): which
        # address, why, since when, how many dials.
        "refused_links": ha.admission.refused_links() if ha.primary is not None else [],
        "link_error": ha.link.link_error() if ha.link is not None else None,
        # A backup's latest replication error (object and reason), until a link catches up.
        "replication_error": ha.link.replication_error() if ha.link is not None else None,
        "replication_position": sum(ids),
    }
    if queues is None:
        del status["queues"]
    return status


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


def _ready(ha: HaStatusSource, backup_id: str) -> bool:
    record = ha.role.backups.get(backup_id)
    return record is not None and record.ready and record.connected


def _backups_status(ha: HaStatusSource, positions: bool = True) -> Steps[list[dict[str, Any]]]:
    """Each backup's row; ``positions``: with its streams' positions (``queues``)."""
    primary, streams = ha.primary, ha.streams
    if primary is None or streams is None:
        return []
    rows = []
    for backup_id, record in sorted(ha.role.backups.items(), key=lambda b: b[1].url):
        queues = (yield from streams.positions_steps(backup_id, SLICE)) if positions else None
        guards = primary.backups.get(backup_id)
        ready = record.ready and record.connected
        row = {
            "id": backup_id,
            "url": record.url,
            "ready": ready,
            "expected": backup_id in ha.role.expected,
            "in_sync": record.in_sync,
            "pending_removal": record.gone,
            "held_confirms": guards.held() if guards is not None else 0,
            "queues": queues,
            # Why replication to it failed (which object, why), while it is not ready.
            "replication_error": None if ready else ha.backup_errors.view(backup_id),
        }
        if queues is None:
            del row["queues"]
        rows.append(row)
    return rows
