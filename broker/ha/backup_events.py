"""What a primary's streams tell of its backups, as the HA role's events.

The primary's replication streams (:class:`~broker.ha.streams.PrimaryStreams`) report each
backup's link through their :class:`~broker.ha.streams.BackupEvents` port, and the vhost
reports each deleted queue (:class:`~broker.ha.primary.PrimaryListener`). A
:class:`BackupEventsToRole` (one a primary, made by
:class:`~broker.ha.ha_broker.HaBroker` when it becomes the primary's shell) turns these
into the role's events (:class:`~broker.ha.role_events.BackupConnected`,
:class:`~broker.ha.role_events.BackupQueueReady`,
:class:`~broker.ha.role_events.BackupGone`, :class:`~broker.ha.role_events.QueueDeleted`),
handed to ``handle`` (the broker's one way to feed its role and carry out its actions),
and keeps each backup's latest replication error for ``GET /api/ha``. It decides nothing:
the role does.

THREAD UNSAFE: the broker's event loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from broker.ha.primary import Primary
from broker.ha.remote_backup import RemoteBackup
from broker.ha.replication_errors import ReplicationErrors
from broker.ha.role import HaRole
from broker.ha.role_events import (
    BackupConnected,
    BackupGone,
    BackupQueueReady,
    Event,
    QueueDeleted,
)


class BackupEventsToRole:
    """See the module docstring (the streams' ``BackupEvents``)."""

    def __init__(
        self,
        primary: Primary,
        role: HaRole,
        handle: Callable[[Event], None],
        *,
        link_gone: Callable[[str], None],
        errors: ReplicationErrors,
        log: Any,
    ) -> None:
        """``link_gone(backup_id)``: the member lease forgets the backup's link;
        ``errors``: each backup's latest replication error (``/api/ha``)."""
        self.primary = primary
        self.role = role
        self._handle = handle
        self._link_gone = link_gone
        self.errors = errors
        self._log = log

    def backup_connected(self, backup_id: str, url: str) -> RemoteBackup:
        primary = self.primary
        # The catch-up set is read only for a backup the role does not know yet: computed
        # once per backup, not once per stream (2,500 queues: 12 s of CPU in one step).
        known = backup_id in self.role.backups
        queues = frozenset() if known else primary.replicated_queue_names()
        self._handle(BackupConnected(backup_id, url, queues))
        # Its guards are those the role's GuardBackup made (now, or when it was expected):
        # a backup the role guards has them until its ReleaseGuards.
        guards = primary.backups.get(backup_id)
        if guards is None:  # the role ignored it (fenced): guards nobody waits for
            return RemoteBackup(backup_id, url, [])
        guards.url = url
        return guards

    def backup_queue_ready(self, backup_id: str, queue: str) -> None:
        self._handle(BackupQueueReady(backup_id, queue))

    def backup_gone(self, backup_id: str) -> None:
        self._link_gone(backup_id)
        self._handle(BackupGone(backup_id))

    def backup_failed(self, backup_id: str, reason: str) -> None:
        record = self.role.backups.get(backup_id)
        url = None if record is None else record.url
        self.errors.failed(backup_id, reason, url)
        self._log.warning("ha_replication_error", backup=backup_id, url=url, reason=reason)

    def queue_deleted(self, name: str) -> None:
        self._handle(QueueDeleted(name))
