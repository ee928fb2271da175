"""RemoteBackup: the confirms the primary holds for one backup broker (sans-I/O).

Created when the role machine says so (:class:`~broker.ha.role.GuardBackup`): when a new
backup connects to the primary, or at promotion for each backup the recovering primary
expects (the ready backups of the old primary). It owns one
:class:`~broker.ha.queue_guard.QueueGuard` per queue replicated with level ``all``, so
publisher confirms wait for this backup from that moment on; queues created later get a
guard too. A backup that just connected has none at first: each of its queue streams makes
its queue's guard as it opens (:meth:`guard`); an expected one's are made in slices before
the promoted broker serves (:meth:`guard_steps`). Its
:class:`~broker.ha.config_guard.ConfigGuard` holds the replies to configuration changes it
does not have yet. Whether the backup is *ready* (its catch-up
set) is the role machine's record (:class:`~broker.ha.role.BackupRecord`), not this one's.

:meth:`cancel` drops the backup: every guard releases what it holds (:meth:`cancel_steps`:
a slice a turn of the loop). Only the shell calls it, performing
:class:`~broker.ha.role.ReleaseGuards`.

THREAD UNSAFE: the primary's event loop owns it.
"""

from __future__ import annotations

from broker.core.queue import Queue
from broker.core.vhosts import key_of
from broker.ha.config_guard import ConfigGuard
from broker.ha.queue_guard import HeldTally, QueueGuard
from common.slices import SLICE, Steps, run_steps


class RemoteBackup:
    """The primary's guards for one backup (see the module docstring)."""

    def __init__(self, backup_id: str, url: str, queues: list[Queue]) -> None:
        self.id = backup_id
        self.url = url
        #: The confirms its guards hold, all queues together (:meth:`held`).
        self.tally = HeldTally()
        #: By queue key (broker.core.vhosts.queue_key).
        self.guards: dict[str, QueueGuard] = {
            key_of(q): QueueGuard(q, backup_id, self.tally) for q in queues
        }
        #: Replies to configuration changes held until this backup has them.
        self.config = ConfigGuard()
        self.cancelled = False

    def guard(self, queue: Queue) -> QueueGuard:
        """The guard of ``queue`` for this backup, created if the queue is new."""
        guard = self.guards.get(key_of(queue))
        if guard is None or guard.queue is not queue:
            if guard is not None:
                guard.untally()  # what it holds is no longer this backup's count
            guard = QueueGuard(queue, self.id, self.tally)
            self.guards[key_of(queue)] = guard
        return guard

    def guard_steps(self, queues: list[Queue], size: int = SLICE) -> Steps[None]:
        """The guards of ``queues`` (:meth:`guard`), ``size`` a slice (:mod:`common.slices`;
        10,000 queues at once were one step of 200-300 ms of CPU): a queue deleted
        meanwhile is skipped, one guarded meanwhile (its stream opened) kept; nothing more
        once the backup is dropped. For a promotion's expected backups, before the broker
        serves: nothing is enqueued between two slices (:mod:`broker.ha.primary_start`)."""
        for start in range(0, len(queues), size):
            if start:
                yield
            if self.cancelled:
                return
            for queue in queues[start : start + size]:
                if not queue.deleted:
                    self.guard(queue)
        # A queue deleted after its slice (before a promotion's primary hears deletions).
        for key in [key for key, guard in self.guards.items() if guard.queue.deleted]:
            self.queue_deleted(key)

    def queue_created(self, queue: Queue) -> None:
        """A queue replicated with level ``all`` appeared after the backup connected."""
        if not self.cancelled:
            self.guard(queue)

    def queue_deleted(self, name: str) -> None:
        guard = self.guards.pop(name, None)
        if guard is not None:
            # Replies waiting for removals on the queue wait for its deletion instead.
            for handle in guard.take_removals():
                self.config.hold_next(handle)
                handle.release()  # the guard's hold, now the configuration guard's
            guard.cancel()

    def held(self) -> int:
        """Confirms held for this backup across all queues (kept as its guards hold and
        release them: a status read is not a walk of 10,000 guards)."""
        return self.tally.count

    def cancel(self) -> None:
        """The backup is dropped: release every held confirm."""
        run_steps(self.cancel_steps())

    def cancel_steps(self, size: int = SLICE) -> Steps[None]:
        """:meth:`cancel`, its guards released ``size`` a slice (:mod:`common.slices`;
        10,000 at once were one step of 11-12 ms). The first slice drops the backup: no
        new guard (:meth:`guard_steps`, :meth:`queue_created`), the configuration guard's
        replies released; a guard left for a later slice holds what it holds (and takes
        new holds) until its slice: a confirm is only delayed, never sent early."""
        self.cancelled = True
        self.config.cancel()
        guards = list(self.guards.values())
        self.guards.clear()
        for start in range(0, len(guards), size):
            if start:
                yield
            for guard in guards[start : start + size]:
                guard.cancel()

    def __repr__(self) -> str:
        return f"RemoteBackup({self.id!r}, {self.url!r}, {len(self.guards)} guards)"
