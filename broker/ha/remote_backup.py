"""RemoteBackup: what the primary knows and guards for one backup broker.

Created when a backup connects to the primary, or at promotion for each backup the
recovering primary expects (the ready backups of the old primary). It owns one
:class:`~broker.ha.queue_guard.QueueGuard` per queue replicated with level ``all``, so
publisher confirms wait for this backup from that moment on. The queues that were
replicated when it connected form its *catch-up set*: the backup is ready when each of them
has reported caught up (:meth:`queue_ready`), or was deleted. Queues created later get a
guard but do not delay readiness (Qpid's rule).

:meth:`cancel` drops the backup: every guard releases what it holds.

THREAD UNSAFE: the primary's event loop owns it.
"""

from __future__ import annotations

from broker.core.queue import Queue
from broker.ha.queue_guard import QueueGuard


class RemoteBackup:
    """The primary's record of one backup (see the module docstring)."""

    def __init__(self, backup_id: str, url: str, queues: list[Queue]) -> None:
        self.id = backup_id
        self.url = url
        self.guards: dict[str, QueueGuard] = {q.name: QueueGuard(q, backup_id) for q in queues}
        self.catch_up: set[str] = {q.name for q in queues}
        self.connected = False
        self.cancelled = False

    @property
    def ready(self) -> bool:
        return not self.catch_up and not self.cancelled

    def guard(self, queue: Queue) -> QueueGuard:
        """The guard of ``queue`` for this backup, created if the queue is new."""
        guard = self.guards.get(queue.name)
        if guard is None or guard.queue is not queue:
            guard = QueueGuard(queue, self.id)
            self.guards[queue.name] = guard
        return guard

    def queue_created(self, queue: Queue) -> None:
        """A queue replicated with level ``all`` appeared after the backup connected."""
        if not self.cancelled:
            self.guard(queue)

    def queue_deleted(self, name: str) -> None:
        guard = self.guards.pop(name, None)
        if guard is not None:
            guard.cancel()
        self.catch_up.discard(name)

    def queue_ready(self, name: str) -> bool:
        """A queue of the catch-up set caught up; True when that made the backup ready."""
        if name not in self.catch_up:
            return False
        self.catch_up.discard(name)
        return self.ready

    def held(self) -> int:
        """Confirms held for this backup across all queues."""
        return sum(g.held for g in self.guards.values())

    def cancel(self) -> None:
        """The backup is dropped: release every held confirm."""
        self.cancelled = True
        for guard in self.guards.values():
            guard.cancel()
        self.guards.clear()

    def __repr__(self) -> str:
        state = "ready" if self.ready else f"catching up {len(self.catch_up)} queues"
        return f"RemoteBackup({self.id!r}, {self.url!r}, {state})"
