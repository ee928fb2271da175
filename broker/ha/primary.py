"""Primary: the HA role of the broker serving clients, as a state machine without I/O.

After promotion the primary is RECOVERING with a set of *expected* backups (the ready
backups of the cluster when it was promoted): confirms wait for all of them on every
replicated queue. It becomes ACTIVE when every expected backup has reconnected and is ready
again, or when ``backup_timeout`` seconds pass, at which point the missing ones are dropped
and the confirms held for them released (seed 001, "recovering"). A primary promoted with
no expected backups is ACTIVE at once.

Backups that connect later get guards from the moment they connect; a backup that
disconnects, or is silent past twice the link heartbeat interval (the shell reports it), is
dropped and its guards release.

Replicated auto-delete queues with no consumer at promotion are orphans (their consumers
died with the old primary): :meth:`tick` hands those still unused after their grace period
(``auto_delete_grace``, default ``backup_timeout``) to :meth:`take_orphans`, and the shell
deletes them (:mod:`broker.ha.auto_delete`).

The shell feeds events (:meth:`backup_connected`, :meth:`backup_disconnected`,
:meth:`queue_ready`, :meth:`tick`) and reads :attr:`state`, :meth:`take_transitions` and
:meth:`take_orphans`.
Time comes from the clock it is given; there is no loop inside.

THREAD UNSAFE: the primary's event loop owns it.
"""

from __future__ import annotations

from collections.abc import Callable

from broker.core.queue import Queue
from broker.core.vhost import VirtualHost
from broker.ha.auto_delete import OrphanedQueues
from broker.ha.remote_backup import RemoteBackup
from broker.ha.replicate_level import ReplicateLevel, queue_level
from broker.ha.state import HaState, check_transition


class Primary:
    """The primary role (see the module docstring)."""

    def __init__(
        self,
        vhost: VirtualHost,
        *,
        replicate_default: ReplicateLevel,
        expected: dict[str, str],
        backup_timeout: float,
        clock: Callable[[], float],
        auto_delete_grace: float | None = None,
    ) -> None:
        self.vhost = vhost
        self.replicate_default = replicate_default
        self.backup_timeout = backup_timeout
        self.clock = clock
        self.promoted_at = clock()
        self.state = HaState.RECOVERING
        self.backups: dict[str, RemoteBackup] = {}
        self.expected: set[str] = set(expected)
        self.dropped: list[str] = []
        self._transitions: list[tuple[HaState, HaState, str]] = []
        self.auto_delete_grace = backup_timeout if auto_delete_grace is None else auto_delete_grace
        self.orphans = OrphanedQueues(
            [
                q
                for q in vhost.queues.values()
                if queue_level(q, replicate_default) is not ReplicateLevel.NONE
            ],
            now=self.promoted_at,
            default_grace=self.auto_delete_grace,
        )
        self._orphans_due: list[Queue] = []
        for backup_id, url in expected.items():
            self.backups[backup_id] = RemoteBackup(backup_id, url, self.replicated_queues())
        self._check_active()

    # -- what is replicated ------------------------------------------------------------
    def replicated_queues(self) -> list[Queue]:
        """Queues whose messages are replicated (level ``all``)."""
        return [
            q
            for q in self.vhost.queues.values()
            if queue_level(q, self.replicate_default) is ReplicateLevel.ALL
        ]

    # -- events ------------------------------------------------------------------------
    def backup_connected(self, backup_id: str, url: str) -> RemoteBackup:
        """A backup's link opened. An expected backup keeps the guards held for it."""
        backup = self.backups.get(backup_id)
        if backup is None or backup.cancelled:
            backup = RemoteBackup(backup_id, url, self.replicated_queues())
            self.backups[backup_id] = backup
        backup.url = url
        backup.connected = True
        self._check_active()
        return backup

    def backup_disconnected(self, backup_id: str) -> None:
        """A backup's link closed or went silent: drop it, release its confirms."""
        backup = self.backups.pop(backup_id, None)
        if backup is not None:
            backup.cancel()
            self.dropped.append(backup_id)
        if backup_id in self.expected:
            self.expected.discard(backup_id)
            self._check_active()

    def queue_declared(self, queue: Queue) -> None:
        if queue_level(queue, self.replicate_default) is ReplicateLevel.ALL:
            for backup in self.backups.values():
                backup.queue_created(queue)

    def queue_deleted(self, queue: Queue) -> None:
        for backup in self.backups.values():
            backup.queue_deleted(queue.name)
        self._check_active()

    def queue_ready(self, backup_id: str, queue_name: str) -> None:
        """The backup caught up on one queue."""
        backup = self.backups.get(backup_id)
        if backup is not None:
            backup.queue_ready(queue_name)
            self._check_active()

    def tick(self) -> None:
        """Find orphaned auto-delete queues past their grace; enforce ``backup_timeout``."""
        if len(self.orphans):
            self._orphans_due.extend(self.orphans.due(self.clock()))
        if self.state is not HaState.RECOVERING:
            return
        if self.clock() - self.promoted_at < self.backup_timeout:
            return
        for backup_id in sorted(self.expected):
            backup = self.backups.get(backup_id)
            if backup is None or not backup.ready:
                self.backup_disconnected(backup_id)
        self.expected.clear()
        self._check_active()

    # -- state -------------------------------------------------------------------------
    def _check_active(self) -> None:
        if self.state is not HaState.RECOVERING:
            return
        waiting = [
            b for b in self.expected if not (self.backups[b].connected and self.backups[b].ready)
        ]
        if not waiting:
            self._move(HaState.ACTIVE)

    def _move(self, new: HaState) -> None:
        reason = check_transition(self.state, new)
        self._transitions.append((self.state, new, reason))
        self.state = new

    def take_transitions(self) -> list[tuple[HaState, HaState, str]]:
        """State changes since the last call (the shell logs each one)."""
        moves, self._transitions = self._transitions, []
        return moves

    def take_orphans(self) -> list[Queue]:
        """Orphaned auto-delete queues to delete now (the shell deletes each one)."""
        due, self._orphans_due = self._orphans_due, []
        return due

    def ready_backups(self) -> list[str]:
        return sorted(b.id for b in self.backups.values() if b.ready and b.connected)

    def held_confirms(self) -> int:
        return sum(b.held() for b in self.backups.values())
