"""Primary: the primary's data path for HA, its guards and orphaned queues (sans-I/O).

The primary's *role* (its state, the backups it waits for, when it is active, when it
stops waiting for a backup) is decided by :class:`~broker.ha.role.HaRole`. This object
keeps what those decisions act on:

- one :class:`~broker.ha.remote_backup.RemoteBackup` a guarded backup, each with a
  :class:`~broker.ha.queue_guard.QueueGuard` per queue replicated with level ``all``:
  created on :meth:`guard_backup` (the role's ``GuardBackup``; a new backup's
  lazily, :meth:`guard_lazily`; a promotion's expected backups' at each queue's first use,
  :meth:`owe_first_use`), released on :meth:`release` (the role's
  ``ReleaseGuards``), never otherwise;
- new and deleted queues, which get or lose their guards (:meth:`queue_declared`,
  :meth:`queue_deleted`; a deleted queue's messages are gone, so its guards release);
- replicated auto-delete queues with no consumer at promotion are orphans (their consumers
  died with the old primary): :meth:`tick` hands those still unused after their grace period
  (``auto_delete_grace``, default ``ha-backup-timeout``) to :meth:`take_orphans`, and the
  shell has them deleted (:meth:`delete_orphans`; :mod:`broker.ha.auto_delete`).

:class:`StandaloneBackups` serves a broker without an HA role (``ha-queue-replication``):
a connected replica is guarded on the queues it copies, a gone one released.

Time comes from the clock it is given; there is no loop inside.

THREAD UNSAFE: the primary's event loop owns it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from broker.core.queue import Queue
from broker.core.vhost import VHOST, VirtualHost
from broker.core.vhosts import VirtualHosts, key_of, queue_key
from broker.ha.auto_delete import OrphanedQueues, grace_of
from broker.ha.names import QPID_REPLICATE
from broker.ha.remote_backup import RemoteBackup
from broker.ha.replicate_level import ReplicateLevel, queue_level
from common.slices import SLICE, CallSoon, Steps, run_in_turns


def _no_loop() -> CallSoon | None:
    return None


class Primary:
    """The primary's guards and orphans (see the module docstring)."""

    def __init__(
        self,
        vhost: VirtualHost | VirtualHosts,
        *,
        replicate_default: ReplicateLevel,
        clock: Callable[[], float],
        auto_delete_grace: float,
        call_soon: Callable[[], CallSoon | None] | None = None,
        auto_delete: Iterable[Queue] | None = None,
    ) -> None:
        """``auto_delete``: the auto-delete queues, when the caller walked the queues already
        (a promotion: :mod:`broker.ha.primary_start`); None: they are found here."""
        self.vhost = vhost
        #: The running loop's ``call_soon``, asked at each release (None: no loop, a core
        #: driven by a test: released at once).
        self.call_soon: Callable[[], CallSoon | None] = call_soon or _no_loop
        self.replicate_default = replicate_default
        self.clock = clock
        self.backups: dict[str, RemoteBackup] = {}
        self.auto_delete_grace = auto_delete_grace
        if auto_delete is None:
            auto_delete = [q for q in vhost.queues.values() if q.auto_delete]
        self.orphans = OrphanedQueues(
            [
                q
                for q in auto_delete
                if queue_level(q, replicate_default) is not ReplicateLevel.NONE
            ],
            now=clock(),
            default_grace=auto_delete_grace,
        )
        self._orphans_due: list[Queue] = []
        #: The backups guarded on each queue at its first use (:meth:`owe_first_use`).
        self._owed: list[RemoteBackup] = []

    # -- what is replicated ------------------------------------------------------------
    def replicated_queues(self) -> list[Queue]:
        """Queues whose messages are replicated (level ``all``)."""
        return [
            q
            for q in self.vhost.queues.values()
            if queue_level(q, self.replicate_default) is ReplicateLevel.ALL
        ]

    def replicated_queue_names(self) -> frozenset[str]:
        """Their keys (:func:`broker.core.vhosts.queue_key`): the name in vhost ``/``. One
        pass over each vhost's queues, a queue without a ``qpid.replicate`` argument at the
        default level without a call (a promotion at 10,000 queues asks this before it
        serves: 10 ms of CPU, now 2-3)."""
        vhost, default, all_ = self.vhost, self.replicate_default, ReplicateLevel.ALL
        hosts = list(vhost) if isinstance(vhost, VirtualHosts) else [vhost]
        keys: list[str] = []
        for host in hosts:
            if default is all_:  # those without the argument, and those it says all
                names = [
                    name
                    for name, q in host.queues.items()
                    if QPID_REPLICATE not in q.arguments or queue_level(q, default) is all_
                ]
            else:
                names = [n for n, q in host.queues.items() if queue_level(q, default) is all_]
            keys += names if host.name == VHOST else [queue_key(host.name, n) for n in names]
        return frozenset(keys)

    # -- guards --------------------------------------------------------------------------
    def guard_backup(self, backup_id: str, url: str) -> RemoteBackup:
        """The backup's guards, created on every replicated queue if it has none."""
        backup = self.backups.get(backup_id)
        if backup is None or backup.cancelled:
            backup = RemoteBackup(backup_id, url, self.replicated_queues())
            self.backups[backup_id] = backup
        backup.url = url
        return backup

    def guard_backup_steps(self, backup_id: str, url: str, size: int = SLICE) -> Steps[None]:
        """:meth:`guard_backup` in slices of ``size`` queues (:meth:`RemoteBackup.guard_steps`):
        the backup is known at the first slice, its guards come a slice a turn. For the
        expected backups of a promotion before the broker serves
        (:func:`~broker.ha.primary_start.start_primary`: nothing is enqueued meanwhile)."""
        backup = self.backups.get(backup_id)
        if backup is None or backup.cancelled:
            backup = RemoteBackup(backup_id, url, [])
            self.backups[backup_id] = backup
            backup.url = url
            yield from backup.guard_steps(self.replicated_queues(), size)
        backup.url = url

    def orphaned(self, auto_delete: Iterable[Queue]) -> None:
        """The replicated ones of ``auto_delete``, auto-delete queues a promotion's pass
        found, are orphans from now on (with no consumer: theirs died with the old
        primary), each deleted unless a consumer comes within its grace period."""
        self.orphans = OrphanedQueues(
            [
                q
                for q in auto_delete
                if queue_level(q, self.replicate_default) is not ReplicateLevel.NONE
            ],
            now=self.clock(),
            default_grace=self.auto_delete_grace,
        )

    def owe_first_use(self, expected: dict[str, str]) -> Callable[[Queue], None] | None:
        """The ``expected`` backups (id -> url) known at once, each to be guarded on every
        queue replicated with level ``all`` from that queue's first use on (its next
        enqueue, delivery or purge), or sooner when its stream of the queue opens
        (:meth:`RemoteBackup.guard`): returns the hook the caller sets as each queue's
        :attr:`Queue.before_use <broker.core.queue.Queue.before_use>` (None: no backup
        expected, nothing to set). For a promotion, before the broker serves
        (:mod:`broker.ha.primary_start`, in its one pass over the queues), instead of their
        guards on every queue (at 10,000 queues 70-140 ms of CPU before the first client
        was served, issue 25).

        The same as every guard made now: a guard covers the queue from its last id on
        (``first_guarded``) and joins its delivery watermark, and until the queue's first
        use nothing changes either (no id is taken, nothing delivered); a guard made then
        holds the first message's confirm and gates the first delivery as one made now
        would. A queue declared later is guarded at once (:meth:`queue_declared`)."""
        owed = [self.guard_lazily(backup_id, url) for backup_id, url in sorted(expected.items())]
        if not owed:
            return None
        self._owed.extend(owed)
        return self._first_use

    def _first_use(self, queue: Queue) -> None:
        """A queue's first use after the promotion: the owed backups' guards, made now (of
        backups still guarded: one released meanwhile, or this primary's promotion failed,
        owes nothing)."""
        if queue.deleted or queue_level(queue, self.replicate_default) is not ReplicateLevel.ALL:
            return
        backups = self.backups
        for backup in self._owed:
            if not backup.cancelled and backups.get(backup.id) is backup:
                backup.guard(queue)

    def guard_lazily(self, backup_id: str, url: str) -> RemoteBackup:
        """The backup known with no guard yet (the role's ``GuardBackup(lazy=True)``: a
        backup that just connected, not in sync): each of its queue streams makes its
        queue's guard as it opens (:meth:`RemoteBackup.guard`), and each queue declared
        from now on gets one at once (:meth:`queue_declared`)."""
        backup = self.backups.get(backup_id)
        if backup is None or backup.cancelled:
            backup = RemoteBackup(backup_id, url, [])
            self.backups[backup_id] = backup
        backup.url = url
        return backup

    def release(self, backup_id: str) -> None:
        """Stop waiting for a backup: release every confirm held for it. Its guards go
        :data:`~common.slices.SLICE` a turn of the loop when :attr:`call_soon` gives one
        (10,000 at once: one step of 11-12 ms): the backup is forgotten at once (no new
        queue is guarded for it, a new link of it is a new backup), and a guard not yet
        released only delays what it holds."""
        backup = self.backups.pop(backup_id, None)
        if backup is not None:
            run_in_turns(backup.cancel_steps(), self.call_soon())

    def queue_declared(self, queue: Queue) -> None:
        if queue_level(queue, self.replicate_default) is ReplicateLevel.ALL:
            for backup in self.backups.values():
                backup.queue_created(queue)

    def queue_deleted(self, queue: Queue) -> None:
        for backup in self.backups.values():
            backup.queue_deleted(key_of(queue))

    # -- orphans -------------------------------------------------------------------------
    def tick(self) -> None:
        """Find orphaned auto-delete queues past their grace."""
        if len(self.orphans):
            self._orphans_due.extend(self.orphans.due(self.clock()))

    def take_orphans(self) -> list[Queue]:
        """Orphaned auto-delete queues to delete now (:meth:`delete_orphans`)."""
        due, self._orphans_due = self._orphans_due, []
        return due

    def delete_orphans(self, log: Any) -> None:
        """Delete the orphans due now (each still the queue of its name), logging each."""
        for queue in self.take_orphans():
            if self.vhost.queues.get(key_of(queue)) is queue:
                log.info(
                    "ha_orphan_queue_deleted",
                    queue=queue.name,
                    messages=queue.message_count,
                    grace=grace_of(queue, self.auto_delete_grace),
                )
                self.vhost.delete_queue(key_of(queue))

    def held_confirms(self) -> int:
        return sum(b.held() for b in self.backups.values())


class StandaloneBackups:
    """Replicas of a broker without an HA role: guarded while connected (see above)."""

    def __init__(self, primary: Primary) -> None:
        self.primary = primary

    def backup_connected(self, backup_id: str, url: str) -> RemoteBackup:
        """A replica copies the queues it subscribes to, and only those wait for it: its
        guards are made by its queue streams (``RemoteBackup.guard``), not on every queue."""
        backups = self.primary.backups
        backup = backups.get(backup_id)
        if backup is None or backup.cancelled:
            backup = RemoteBackup(backup_id, url, [])
            backups[backup_id] = backup
        return backup

    def backup_queue_ready(self, backup_id: str, queue: str) -> None:
        pass

    def backup_gone(self, backup_id: str) -> None:
        self.primary.release(backup_id)

    def backup_failed(self, backup_id: str, reason: str) -> None:
        pass  # a stand-alone broker's streams log nothing of their own; the link closes


class PrimaryListener:
    """The primary's vhost listener: new and deleted queues get or lose their guards, and
    a deleted queue is reported to the role (``queue_deleted``, by its (vhost, queue) key)."""

    def __init__(self, primary: Primary, queue_deleted: Callable[[str], None]) -> None:
        self.primary = primary
        self._queue_deleted = queue_deleted

    def queue_declared(self, queue: Queue) -> None:
        self.primary.queue_declared(queue)

    def queue_deleted(self, queue: Queue) -> None:
        self.primary.queue_deleted(queue)
        self._queue_deleted(key_of(queue))

    def exchange_declared(self, exchange: object) -> None:
        pass

    def exchange_deleted(self, exchange: object) -> None:
        pass

    def bound(self, binding: object) -> None:
        pass

    def unbound(self, binding: object) -> None:
        pass
