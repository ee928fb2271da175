"""A sans-I/O driver of the HA role for tests: HaRole plus the primary's guards.

It performs the actions a test can see without sockets or files the way
:class:`~broker.ha.ha_broker.HaBroker` does (GuardBackup, ReleaseGuards, ChangeState), and
answers promotion's actions at once (the epoch is "persisted", the cluster is new).
"""

from __future__ import annotations

from collections.abc import Callable

from broker.core.queue import Queue
from broker.core.vhost import VirtualHost
from broker.ha.primary import Primary
from broker.ha.remote_backup import RemoteBackup
from broker.ha.replicate_level import ReplicateLevel
from broker.ha.role import HaRole
from broker.ha.role_events import (
    Action,
    BackupConnected,
    BackupGone,
    BackupQueueReady,
    CaughtUp,
    ChangeState,
    CheckCluster,
    ClusterChecked,
    EpochPersisted,
    Event,
    GuardBackup,
    InSyncCommitted,
    LinkUp,
    PersistPromotionEpoch,
    PrimaryStarted,
    PromoteRequested,
    QueueDeleted,
    ReleaseGuards,
    StartPrimary,
    Tick,
)
from broker.ha.state import HaState


class RoleDriver:
    """A promoted primary's role and guards over ``vhost`` (see the module docstring)."""

    def __init__(
        self,
        vhost: VirtualHost,
        clock: Callable[[], float],
        *,
        replicate_default: ReplicateLevel = ReplicateLevel.ALL,
        backup_timeout: float = 10.0,
    ) -> None:
        self.vhost = vhost
        self.clock = clock
        self.replicate_default = replicate_default
        self.role = HaRole("me", epoch=0, backup_timeout=backup_timeout)
        #: ``backup_failed`` calls: (backup id, reason).
        self.failures: list[tuple[str, str]] = []
        #: The orphans' default grace (the broker's is ha-backup-timeout).
        self.auto_delete_grace = backup_timeout
        self.primary: Primary | None = None
        self.transitions: list[tuple[HaState, HaState]] = []
        self.actions: list[Action] = []

    @property
    def state(self) -> HaState:
        return self.role.state

    def handle(self, event: Event) -> None:
        for action in self.role.handle(event):
            self.actions.append(action)
            self.perform(action)

    def perform(self, action: Action) -> None:
        match action:
            case ChangeState(old, new, _reason, _fields):
                self.transitions.append((old, new))
            case GuardBackup(backup_id, url, lazy):
                assert self.primary is not None
                if lazy:  # as the shell: guarded by its streams as they open
                    self.primary.guard_lazily(backup_id, url)
                else:
                    self.primary.guard_backup(backup_id, url)
            case ReleaseGuards(backup_id):
                assert self.primary is not None
                self.primary.release(backup_id)
            case CheckCluster():
                self.handle(ClusterChecked(None))
            case PersistPromotionEpoch(epoch):
                members = tuple((b, url, "ready") for b, url in sorted(self._expected.items()))
                self.handle(EpochPersisted(epoch, members))
            case StartPrimary():
                self.primary = Primary(
                    self.vhost,
                    replicate_default=self.replicate_default,
                    clock=self.clock,
                    auto_delete_grace=self.auto_delete_grace,
                )
                queues = self.primary.replicated_queue_names()
                self.handle(PrimaryStarted("me:5672", queues, self.clock()))
                self.handle(Tick(self.clock()))

    def promote(self, expected: dict[str, str], *, from_joining: bool = False) -> Primary:
        """Promote this broker (a ready backup, or a joining one) expecting ``expected``."""
        self._expected = dict(expected)
        if not from_joining:
            self.handle(LinkUp("old:5672", 0))
            self.handle(CaughtUp())
        self.transitions.clear()
        self.handle(PromoteRequested(None))
        assert self.primary is not None, self.actions
        return self.primary

    # -- the primary's events, as the streams and the vhost listener send them ------------
    def backup_connected(self, backup_id: str, url: str) -> RemoteBackup:
        assert self.primary is not None
        self.handle(BackupConnected(backup_id, url, self.primary.replicated_queue_names()))
        return self.primary.guard_backup(backup_id, url)

    def stream_opened(self, backup_id: str, queue: str) -> None:
        """The backup's stream of ``queue`` opened: it takes the queue's guard (as
        ``PrimaryStreams`` does, before it sends anything)."""
        assert self.primary is not None
        backup = self.primary.backups.get(backup_id)
        if backup is not None and queue in self.vhost.queues:
            backup.guard(self.vhost.queues[queue])

    def queue_ready(self, backup_id: str, queue: str) -> None:
        """The backup caught up on ``queue``, through its stream (opened first)."""
        self.stream_opened(backup_id, queue)
        self.handle(BackupQueueReady(backup_id, queue))

    backup_queue_ready = queue_ready

    def backup_gone(self, backup_id: str) -> None:
        self.handle(BackupGone(backup_id))

    def backup_failed(self, backup_id: str, reason: str) -> None:
        self.failures.append((backup_id, reason))

    def queue_deleted(self, queue: Queue) -> None:
        assert self.primary is not None
        self.primary.queue_deleted(queue)
        self.handle(QueueDeleted(queue.name))

    def commit_in_sync(self, members: set[str]) -> None:
        """The cluster manager committed the in-sync set ``members``."""
        self.handle(InSyncCommitted(self.role.epoch, frozenset(members)))

    def tick(self) -> None:
        self.handle(Tick(self.clock()))
