"""HaRole: the one owner of a cluster member's HA role and state (sans-I/O, raft's shape).

Everything that decides what an HA broker *is* lives here: its state (seed 001's joining,
catch-up, ready, recovering, active), the highest fencing epoch it has persisted, whether it
is fenced, the cluster manager's lease, and, on a primary, its record of each backup
(connected, catch-up set, ready) and of the *expected* backups it waits for while
recovering. The shell (:class:`~broker.ha.ha_broker.HaBroker`) feeds it events with
:meth:`HaRole.handle` and performs the actions it returns, in order; the role never opens a
socket, writes a file or reads a clock (time comes in the events).

Events and what they may return (the table is :data:`EVENT_ACTIONS`; docs/ha-design.md
draws it):

=====================  ===============================================================
event                  actions
=====================  ===============================================================
Start                  Dial
LinkUp                 PersistEpoch (a newer epoch), ChangeState (-> catch-up), Log
LinkDown               Log; ChangeState catch-up -> ready for a backup that was ready
                       before this link (a new primary) and had not caught up with it
CaughtUp               ChangeState (catch-up -> ready)
PromoteRequested       Refuse, CheckCluster (joining), PersistPromotionEpoch,
                       PersistEpoch (already primary, newer epoch)
ClusterChecked         Refuse, PersistPromotionEpoch
EpochPersisted         DropLink, StartPrimary
PromotionFailed        Dial (the link was dropped already); the broker stays a backup
PrimaryStarted         GuardBackup (each expected backup), ChangeState (-> recovering),
                       SendMembership
BackupConnected        GuardBackup (a new backup), ChangeState, SendMembership
BackupQueueReady       ChangeState (recovering -> active), SendMembership
BackupGone             ReleaseGuards, ChangeState, SendMembership
QueueDeleted           ChangeState, SendMembership
Tick                   FenceBroker (the lease ran out and not every member of a
                       non-empty committed set grants: issue 26, item 2); ChangeState
                       (recovering -> active when every expected backup is ready: the
                       shell ticks once right after PrimaryStarted), ReleaseGuards and ChangeState
                       (``ha-backup-timeout`` passed while recovering: the expected
                       backups not connected are left, the connected ones still awaited),
                       SendMembership
LeaseGranted           Refuse (not a primary)
EpochSeen              FenceBroker (a primary learns of a newer epoch), PersistEpoch
FenceRequested         FenceBroker
=====================  ===============================================================

Rules the tests hold it to (tests/ha/test_role.py, with hypothesis):

- one event moves the state at most once (a promotion is PrimaryStarted -> recovering,
  then a Tick -> active: two events);
- every move is an edge of :data:`~broker.ha.state.TRANSITIONS`; anything else is a bug,
  answered with ``ha_illegal_transition`` and FenceBroker (fail-stop);
- a backup's held publisher confirms are released only by a ReleaseGuards action, and only
  for a backup that was guarded and has gone (its link closed or went silent) or that
  ``ha-backup-timeout`` gave up on while recovering (not connected by then);
- a fenced role ignores every event but PromoteRequested (refused) and LeaseGranted.

THREAD UNSAFE: one owner (the broker's event loop) calls :meth:`HaRole.handle`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from broker.ha.role_events import (
    Action,
    BackupConnected,
    BackupGone,
    BackupQueueReady,
    CaughtUp,
    ChangeState,
    CheckCluster,
    ClusterChecked,
    Dial,
    DropLink,
    EpochPersisted,
    EpochSeen,
    Event,
    FenceBroker,
    FenceRequested,
    GuardBackup,
    InSyncCommitted,
    LeaseGranted,
    LinkDown,
    LinkUp,
    Log,
    PersistEpoch,
    PersistPromotionEpoch,
    PrimaryStarted,
    PromoteRequested,
    PromotionFailed,
    QueueDeleted,
    Refuse,
    ReleaseGuards,
    SendMembership,
    Start,
    StartPrimary,
    Tick,
)
from broker.ha.state import HaState, IllegalTransition, check_transition

__all__ = ["BackupRecord", "HaRole"]


@dataclass(slots=True)
class BackupRecord:
    """The primary's view of one backup: its catch-up set, whether its link is open, and
    whether it is *in sync* (it may be in the cluster's in-sync set: it was ready while
    guarded, or expected at promotion). An in-sync backup that went away is *gone*: its
    guards hold until its removal from the in-sync set is committed."""

    url: str
    catch_up: set[str] = field(default_factory=set)
    connected: bool = False
    in_sync: bool = False
    gone: bool = False

    @property
    def ready(self) -> bool:
        return not self.catch_up


class HaRole:
    """See the module docstring."""

    def __init__(self, broker_id: str, *, epoch: int, backup_timeout: float) -> None:
        self.broker_id = broker_id
        self.backup_timeout = backup_timeout
        self.state = HaState.JOINING
        #: The highest epoch persisted (the shell's epoch store holds it durably).
        self.epoch = epoch
        self.fenced = False
        #: Monotonic time until which the cluster manager vouches for this primary.
        self.lease_until: float | None = None
        #: Serving on its members' grants alone: the cluster manager's lease ran out while
        #: every member of a non-empty committed set granted (issue 26, item 2).
        self.on_grants = False
        #: The primary this backup's link is up to, if any.
        self.primary_address: str | None = None
        #: On a primary: every backup it guards, by id.
        self.backups: dict[str, BackupRecord] = {}
        #: On a recovering primary: the backups it waits for.
        self.expected: set[str] = set()
        #: Backups dropped since promotion, in order.
        self.dropped: list[str] = []
        #: The in-sync set last committed by the cluster manager: (epoch, broker ids).
        self.committed_in_sync: tuple[int, frozenset[str]] | None = None
        #: The in-sync set this primary was promoted with (the cluster manager's, if any).
        self.promotion_in_sync: frozenset[str] | None = None
        self.url = ""
        self.promoted_at: float | None = None
        self._ready_before_link = False
        self._promotion_epoch: int | None = None
        self._promotion_in_sync: frozenset[str] | None = None
        self._starting = False
        self._expected_urls: dict[str, str] = {}
        self._members: tuple[tuple[str, str, str], ...] = ()
        self._out: list[Action] = []
        self._moved = False

    # -- queries -------------------------------------------------------------------------
    def lease_expired(self, now: float) -> bool:
        until = self.lease_until
        return until is not None and self.state.is_primary and now > until

    def may_confirm(self, now: float, grants_until: float | None = None) -> bool:
        """Whether publisher confirms may go out as far as the cluster manager's lease goes:
        not fenced, and the lease not run out, or run out while every member of a non-empty
        committed set grants (``grants_until``, as in :class:`Tick`; issue 26, item 2).
        The member lease's own check (every asked member) comes on top."""
        if self.fenced:
            return False
        if not self.lease_expired(now):
            return True
        return grants_until is not None and now < grants_until

    def lease_set(self) -> frozenset[str]:
        """Whose member-lease grants this primary needs: the committed in-sync set (the
        one it was promoted with until the cluster manager commits another), itself
        excluded; empty without a cluster manager's set."""
        committed = self.committed_in_sync
        members = committed[1] if committed is not None else self.promotion_in_sync
        return frozenset() if members is None else members - {self.broker_id}

    def members(self) -> tuple[tuple[str, str, str], ...]:
        """(id, url, state) of this primary and each backup it guards."""
        rows = [(self.broker_id, self.url, self.state.value)]
        for backup_id, record in self.backups.items():
            ready = record.ready and record.connected
            state = HaState.READY if ready else HaState.CATCHUP
            rows.append((backup_id, record.url, state.value))
        return tuple(rows)

    def ready_backups(self) -> list[str]:
        return sorted(b for b, r in self.backups.items() if r.ready and r.connected)

    def in_sync_wanted(self) -> list[str]:
        """The backups this primary counts in the in-sync set now."""
        return sorted(b for b, r in self.backups.items() if r.in_sync and not r.gone)

    def pending_removal(self) -> list[str]:
        """In-sync backups that went away: their confirms wait for a committed removal."""
        return sorted(b for b, r in self.backups.items() if r.gone)

    def ready(self, backup_id: str) -> bool:
        """Is this backup guarded, connected and caught up on every queue?"""
        record = self.backups.get(backup_id)
        return record is not None and record.ready and record.connected

    def awaited(self) -> list[str]:
        """Expected backups (the committed set at promotion) not connected yet: a
        recovering primary waits for them; a committed set without one releases it."""
        return sorted(b for b in self.expected if not self._connected(b))

    def _connected(self, backup_id: str) -> bool:
        record = self.backups.get(backup_id)
        return record is not None and record.connected

    # -- the one entry point -------------------------------------------------------------
    def handle(self, event: Event) -> list[Action]:
        """Apply one event; the actions to perform, in order."""
        self._out = []
        self._moved = False
        if self.fenced and not isinstance(event, (PromoteRequested, LeaseGranted)):
            return []
        handler = _HANDLERS[type(event)]
        handler(self, event)
        out, self._out = self._out, []
        return out

    # -- backup side -------------------------------------------------------------------
    def _start(self, event: Start) -> None:
        self._emit(Dial())

    def _link_up(self, event: LinkUp) -> None:
        self.primary_address = event.primary
        if event.primary_epoch > self.epoch:
            self.epoch = event.primary_epoch
            self._emit(PersistEpoch(event.primary_epoch))
        self._log("ha_link_up", primary=event.primary, primary_epoch=event.primary_epoch)
        promoting = self._promotion_epoch is not None or self._starting
        if self.state in (HaState.JOINING, HaState.READY) and not promoting:
            self._ready_before_link = self.state is HaState.READY
            self._move(HaState.CATCHUP, primary=event.primary)

    def _link_down(self, event: LinkDown) -> None:
        if self.primary_address is not None:
            self._log(
                "ha_link_down", level="warning", primary=self.primary_address, reason=event.reason
            )
        self.primary_address = None
        if self.state is HaState.CATCHUP and self._ready_before_link:
            # Ready before this link (a new primary), which dropped before catch-up ended:
            # this backup still holds everything it held when ready, and anything the new
            # primary confirmed waited for it. Ready again: fit to be promoted (only as a
            # member of the in-sync set, where a cluster manager keeps one).
            self._ready_before_link = False
            self._move(HaState.READY, primary=None, after="the new primary's link dropped")

    def _caught_up(self, event: CaughtUp) -> None:
        if self.state is HaState.CATCHUP:
            self._ready_before_link = False
            self._move(HaState.READY, primary=self.primary_address)

    # -- promotion ---------------------------------------------------------------------
    def _promote(self, event: PromoteRequested) -> None:
        state, epoch = self.state, event.epoch
        if self.fenced:
            self._emit(Refuse("this broker is fenced; restart it"))
        elif state.is_primary:
            if epoch is not None and epoch > self.epoch:
                self.epoch = epoch
                self._emit(PersistEpoch(epoch))
        elif state is HaState.CATCHUP:
            self._emit(Refuse("still catching up: cannot promote a backup in catch-up"))
        elif epoch is not None and epoch < self.epoch:
            self._emit(Refuse(f"epoch {epoch} is older than epoch {self.epoch} seen here"))
        else:
            self._promotion_epoch = epoch if epoch is not None else self.epoch + 1
            self._promotion_in_sync = event.in_sync
            if state is HaState.JOINING:
                self._emit(CheckCluster(primaries_only=event.store_named))
            else:
                self._emit(PersistPromotionEpoch(self._promotion_epoch))

    def _cluster_checked(self, event: ClusterChecked) -> None:
        if self._promotion_epoch is None:
            return
        if event.beyond_joining is not None:
            self._promotion_epoch = None
            busy = event.beyond_joining
            self._emit(Refuse(f"cannot promote a joining broker: {busy} is beyond joining"))
        else:
            self._emit(PersistPromotionEpoch(self._promotion_epoch))

    def _epoch_persisted(self, event: EpochPersisted) -> None:
        if self._promotion_epoch != event.epoch:
            return
        self._promotion_epoch = None
        self._starting = True
        self.epoch = max(self.epoch, event.epoch)
        in_sync = self._promotion_in_sync
        self.promotion_in_sync = in_sync
        if in_sync is not None:
            # The committed in-sync set: exactly the backups that hold every confirmed
            # message. Each is guarded and awaited, whatever it last reported.
            urls = {backup_id: url for backup_id, url, _ in event.members}
            expected = tuple(
                (backup_id, urls.get(backup_id, ""))
                for backup_id in sorted(in_sync)
                if backup_id != self.broker_id
            )
        else:
            expected = tuple(
                (backup_id, url)
                for backup_id, url, state in event.members
                if state == HaState.READY.value and backup_id != self.broker_id
            )
        self._expected_urls = dict(expected)
        self.primary_address = None
        self._emit(DropLink())
        self._emit(StartPrimary(expected))

    def _promotion_failed(self, event: PromotionFailed) -> None:
        """The promotion under way ends; the broker stays what it was (a backup)."""
        if self._promotion_epoch is None and not self._starting:
            return
        dropped = self._starting
        self._promotion_epoch = None
        self._starting = False
        self._log("ha_promotion_failed", level="error", reason=event.reason)
        if dropped:
            self._emit(Dial())  # the link was dropped for the promotion: dial again

    def _primary_started(self, event: PrimaryStarted) -> None:
        """Recovering from here on: the guards of the expected backups hold every confirm
        before the state says primary (no client is admitted as primary without them)."""
        if not self._starting:
            return
        self._starting = False
        self.url = event.url
        self.promoted_at = event.now
        self.expected = set(self._expected_urls)
        for backup_id, url in sorted(self._expected_urls.items()):
            self.backups[backup_id] = BackupRecord(url, set(event.queues), in_sync=True)
            self._emit(GuardBackup(backup_id, url))
        urls = sorted(self._expected_urls.values())
        self._move(HaState.RECOVERING, epoch=self.epoch, expected=urls)

    # -- primary side ------------------------------------------------------------------
    def _backup_connected(self, event: BackupConnected) -> None:
        if not self.state.is_primary:
            return
        record = self.backups.get(event.backup_id)
        if record is None:
            record = BackupRecord(event.url, set(event.queues))
            self.backups[event.backup_id] = record
            self._emit(GuardBackup(event.backup_id, event.url, lazy=True))
        elif record.gone:
            # Back before its removal was committed: its guards held all along.
            record.gone = False
            self._log("ha_backup_returned", backup=event.backup_id, url=event.url)
        record.url = event.url
        record.connected = True
        self._note_in_sync(event.backup_id, record)
        self._check_active()
        self._membership()

    def _backup_queue_ready(self, event: BackupQueueReady) -> None:
        record = self.backups.get(event.backup_id)
        if record is not None and event.queue in record.catch_up:
            record.catch_up.discard(event.queue)
            self._note_in_sync(event.backup_id, record)
            self._check_active()
        self._membership()

    def _backup_gone(self, event: BackupGone) -> None:
        self._leave(event.backup_id, "its link closed")
        self._check_active()
        self._membership()

    def _queue_deleted(self, event: QueueDeleted) -> None:
        for backup_id, record in self.backups.items():
            record.catch_up.discard(event.name)
            self._note_in_sync(backup_id, record)
        self._check_active()
        self._membership()

    def _in_sync_committed(self, event: InSyncCommitted) -> None:
        """The cluster manager committed the in-sync set: release whoever left it."""
        if not self.state.is_primary:
            self._emit(Refuse(f"the in-sync set is a primary's; this broker is {self.state.value}"))
            return
        if event.epoch != self.epoch:
            self._emit(
                Refuse(f"the in-sync set was committed at epoch {event.epoch}, not {self.epoch}")
            )
            return
        self.committed_in_sync = (event.epoch, event.members)
        awaited = set(self.awaited())
        for backup_id, record in sorted(self.backups.items()):
            # gone, or expected and never back: the committed set without it releases it
            # (issue 26, item 3: no ha-backup-timeout for a backup known gone)
            left = record.gone or backup_id in awaited
            if left and backup_id not in event.members:
                self._drop(backup_id)
        self._check_active()
        self._membership()

    def _tick(self, event: Tick) -> None:
        if self._lease_over(event):
            return
        promoted = self.promoted_at
        if self.state is not HaState.RECOVERING or promoted is None:
            return
        if event.now - promoted < self.backup_timeout:
            self._check_active()  # nobody expected: active at the first tick
            return
        # Qpid's rule: the expected backups not connected by now are left (an in-sync one
        # waits for its committed removal); those connected go on catching up, and the
        # primary is active once they are ready. A connected member marked gone "returned"
        # at its next stream, and a removal committed meanwhile dropped a backup whose
        # streams had already reported ready (issue 25).
        for backup_id in sorted(self.expected):
            record = self.backups.get(backup_id)
            if record is None or not record.connected:
                self._leave(backup_id, "not back within ha-backup-timeout")
        self._check_active()
        self._membership()

    # -- lease and fencing -------------------------------------------------------------
    def _lease_over(self, event: Tick) -> bool:
        """The cluster manager's lease at a tick: True when it fenced. Run out, the primary
        serves on its members' grants while the committed set is non-empty and every
        member's grant is unexpired (issue 26, item 2: a member may be promoted only when
        its own grant to this epoch lapsed, docs/reliability.md); the first lapse, or an
        empty set, fences it as before."""
        now, until = event.now, event.grants_until
        if not self.lease_expired(now):
            if self.on_grants:
                self.on_grants = False
                self._log("ha_serving_on_lease", epoch=self.epoch)
            return False
        if until is not None and now < until:
            if not self.on_grants:
                self.on_grants = True
                self._log(
                    "ha_serving_on_grants",
                    level="warning",
                    epoch=self.epoch,
                    grants_ms=round((until - now) * 1000.0, 1),
                )
            return False
        if self.on_grants:
            self._fence("a member's grant lapsed after the cluster manager's lease ran out")
        elif until is None:
            self._fence("the cluster manager's lease ran out")
        else:
            self._fence("the cluster manager's lease ran out and not every member grants")
        return True

    def _lease(self, event: LeaseGranted) -> None:
        if not self.state.is_primary:
            self._emit(Refuse(f"a lease is for a primary; this broker is {self.state.value}"))
        else:
            self.lease_until = event.now + event.seconds

    def _epoch_seen(self, event: EpochSeen) -> None:
        if event.epoch <= self.epoch:
            return
        if self.state.is_primary:
            self._fence(f"a backup has seen epoch {event.epoch} > ours {self.epoch}")
        else:
            self.epoch = event.epoch
            self._emit(PersistEpoch(event.epoch))

    def _fence_event(self, event: FenceRequested) -> None:
        self._fence(event.reason)

    # -- helpers -----------------------------------------------------------------------
    def _emit(self, action: Action) -> None:
        self._out.append(action)

    def _log(self, event: str, level: str = "info", **fields: Any) -> None:
        self._emit(Log(event, level, tuple(fields.items())))

    def _fence(self, reason: str) -> None:
        if self.fenced:
            return
        self.fenced = True
        self._log("ha_fenced", level="critical", reason=reason, epoch=self.epoch)
        self._emit(FenceBroker(reason))

    def _note_in_sync(self, backup_id: str, record: BackupRecord) -> None:
        if record.ready and record.connected and not record.in_sync:
            record.in_sync = True
            self._log("ha_backup_in_sync", backup=backup_id, url=record.url)

    def _leave(self, backup_id: str, reason: str) -> None:
        """A backup went away: an in-sync one waits for its committed removal, guarded;
        any other is dropped at once (nobody may promote it)."""
        record = self.backups.get(backup_id)
        if record is not None and record.in_sync:
            record.connected = False
            if not record.gone:
                record.gone = True
                self._log(
                    "ha_backup_removal_pending", backup=backup_id, url=record.url, reason=reason
                )
            self.expected.discard(backup_id)
        else:
            self._drop(backup_id)

    def _drop(self, backup_id: str) -> None:
        """Stop waiting for a backup: the only place guards are released."""
        if self.backups.pop(backup_id, None) is not None:
            self.dropped.append(backup_id)
            self._emit(ReleaseGuards(backup_id))
        self.expected.discard(backup_id)

    def _check_active(self) -> None:
        if self.state is not HaState.RECOVERING or self.promoted_at is None:
            return
        for backup_id in self.expected:
            record = self.backups.get(backup_id)
            if record is None or not (record.connected and record.ready):
                return
        self._move(HaState.ACTIVE, dropped=list(self.dropped))

    def _membership(self) -> None:
        if not self.state.is_primary or self.promoted_at is None:
            return
        members = self.members()
        if members != self._members:
            self._members = members
            self._emit(SendMembership(members))

    def _move(self, new: HaState, **fields: Any) -> None:
        old = self.state
        if old is new:
            return
        try:
            if self._moved:
                raise IllegalTransition(f"two HA state transitions from one event: -> {new.value}")
            reason = check_transition(old, new)
        except IllegalTransition as exc:
            self._log("ha_illegal_transition", level="critical", old=old.value, new=new.value)
            self.fenced = True
            self._emit(FenceBroker(str(exc)))
            return
        self._moved = True
        self.state = new
        self._emit(ChangeState(old, new, reason, tuple(fields.items())))
        if new.is_primary:
            # A primary's membership names its own state: it changed.
            self._membership()


_HANDLERS: dict[type[Any], Any] = {
    Start: HaRole._start,
    LinkUp: HaRole._link_up,
    LinkDown: HaRole._link_down,
    CaughtUp: HaRole._caught_up,
    PromoteRequested: HaRole._promote,
    ClusterChecked: HaRole._cluster_checked,
    EpochPersisted: HaRole._epoch_persisted,
    PromotionFailed: HaRole._promotion_failed,
    PrimaryStarted: HaRole._primary_started,
    BackupConnected: HaRole._backup_connected,
    BackupQueueReady: HaRole._backup_queue_ready,
    BackupGone: HaRole._backup_gone,
    QueueDeleted: HaRole._queue_deleted,
    Tick: HaRole._tick,
    LeaseGranted: HaRole._lease,
    EpochSeen: HaRole._epoch_seen,
    FenceRequested: HaRole._fence_event,
    InSyncCommitted: HaRole._in_sync_committed,
}
