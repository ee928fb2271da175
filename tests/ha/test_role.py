"""The HA role machine without sockets or files: a table of scripts, and its invariants.

Each script starts from a fresh :class:`~broker.ha.role.HaRole` (joining, epoch 0) and
feeds events; the expected actions are listed by kind (Log lines left out) with the state
after each step. Hypothesis then feeds random event sequences, answering the role's
requests as the shell does, and checks the rules of the module docstring.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.ha.role import HaRole
from broker.ha.role_events import (
    EVENT_ACTIONS,
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
from broker.ha.state import TRANSITIONS, HaState

S = HaState
QUEUES = frozenset({"q1", "q2"})
READY_B1 = (("b1", "h1:5672", "ready"),)


def kinds(actions: list[Action]) -> list[str]:
    return [type(a).__name__ for a in actions if not isinstance(a, Log)]


# -- scripts: (event, action kinds, state after) ------------------------------------------
Step = tuple[Event, list[str], HaState]

BACKUP_LIFE: list[Step] = [
    (Start(), ["Dial"], S.JOINING),
    (LinkUp("p:5672", 3), ["PersistEpoch", "ChangeState"], S.CATCHUP),
    (LinkDown("link closed"), [], S.CATCHUP),  # never ready: still catching up
    (LinkUp("p:5672", 3), [], S.CATCHUP),
    (CaughtUp(), ["ChangeState"], S.READY),
    (LinkDown("link closed"), [], S.READY),  # a ready backup stays eligible
    (LinkUp("p2:5672", 3), ["ChangeState"], S.CATCHUP),  # same epoch: nothing to persist
    (CaughtUp(), ["ChangeState"], S.READY),
    (CaughtUp(), [], S.READY),
    # A new primary vanishes before this backup caught up with it: ready again, it still
    # holds what it held (the new primary's confirms waited for it).
    (LinkUp("p3:5672", 4), ["PersistEpoch", "ChangeState"], S.CATCHUP),
    (LinkDown("link closed"), ["ChangeState"], S.READY),
    (LinkDown("link closed"), [], S.READY),
]

PROMOTE_READY_EXPECTING_B1: list[Step] = [
    (LinkUp("p:5672", 1), ["PersistEpoch", "ChangeState"], S.CATCHUP),
    (CaughtUp(), ["ChangeState"], S.READY),
    (PromoteRequested(None), ["PersistPromotionEpoch"], S.READY),
    (EpochPersisted(2, READY_B1), ["DropLink", "StartPrimary"], S.READY),
    (
        PrimaryStarted("me:5672", QUEUES, 0.0),
        ["GuardBackup", "ChangeState", "SendMembership"],
        S.RECOVERING,
    ),
    (Tick(1.0), [], S.RECOVERING),  # b1 expected, not back yet
    (BackupConnected("b1", "h1:5672", QUEUES), [], S.RECOVERING),  # back, catching up
    (BackupQueueReady("b1", "q1"), [], S.RECOVERING),
    (BackupQueueReady("b1", "q2"), ["ChangeState", "SendMembership"], S.ACTIVE),
    (BackupGone("b1"), ["SendMembership"], S.ACTIVE),  # in sync: held until removed
    (InSyncCommitted(1, frozenset()), ["Refuse"], S.ACTIVE),  # an old epoch's set
    (InSyncCommitted(2, frozenset({"b1"})), [], S.ACTIVE),  # still in the set: held
    (InSyncCommitted(2, frozenset()), ["ReleaseGuards", "SendMembership"], S.ACTIVE),
]

PROMOTE_NEW_CLUSTER: list[Step] = [
    (PromoteRequested(None), ["CheckCluster"], S.JOINING),
    (ClusterChecked(None), ["PersistPromotionEpoch"], S.JOINING),
    (EpochPersisted(1), ["DropLink", "StartPrimary"], S.JOINING),
    (PrimaryStarted("me:5672", QUEUES, 0.0), ["ChangeState", "SendMembership"], S.RECOVERING),
    (Tick(0.0), ["ChangeState", "SendMembership"], S.ACTIVE),  # nobody expected
    (BackupConnected("b9", "h9:5672", QUEUES), ["GuardBackup", "SendMembership"], S.ACTIVE),
    (BackupConnected("b9", "h9:5672", QUEUES), [], S.ACTIVE),  # a second stream
    (QueueDeleted("q1"), [], S.ACTIVE),
    (BackupQueueReady("b9", "q2"), ["SendMembership"], S.ACTIVE),  # now listed ready
]

BACKUP_TIMEOUT: list[Step] = [
    (LinkUp("p:5672", 1), ["PersistEpoch", "ChangeState"], S.CATCHUP),
    (CaughtUp(), ["ChangeState"], S.READY),
    (PromoteRequested(5), ["PersistPromotionEpoch"], S.READY),
    (EpochPersisted(5, READY_B1), ["DropLink", "StartPrimary"], S.READY),
    (
        PrimaryStarted("me:5672", QUEUES, 100.0),
        ["GuardBackup", "ChangeState", "SendMembership"],
        S.RECOVERING,
    ),
    (Tick(109.9), [], S.RECOVERING),
    (Tick(110.0), ["ChangeState", "SendMembership"], S.ACTIVE),  # b1 held until removed
    (Tick(200.0), [], S.ACTIVE),
    (InSyncCommitted(5, frozenset()), ["ReleaseGuards", "SendMembership"], S.ACTIVE),
]

# Qpid's rule at ha-backup-timeout: an expected backup connected by then (catching up on
# thousands of queues) is still awaited, never marked gone while it is there (issue 25).
A_CONNECTED_MEMBER_IS_AWAITED: list[Step] = [
    *BACKUP_TIMEOUT[:5],  # promoted at 100.0 expecting b1
    (BackupConnected("b1", "h1:5672", QUEUES), [], S.RECOVERING),
    (Tick(110.0), [], S.RECOVERING),  # connected, catching up: not left
    (Tick(150.0), [], S.RECOVERING),
    (BackupQueueReady("b1", "q1"), [], S.RECOVERING),
    (BackupQueueReady("b1", "q2"), ["ChangeState", "SendMembership"], S.ACTIVE),
]

EXPECTED_LEFT_OUT: list[Step] = [  # issue 26, item 3: released by the commit, at once
    (LinkUp("p:5672", 1), ["PersistEpoch", "ChangeState"], S.CATCHUP),
    (CaughtUp(), ["ChangeState"], S.READY),
    (PromoteRequested(5, frozenset({"b1", "b2"})), ["PersistPromotionEpoch"], S.READY),
    (EpochPersisted(5, READY_B1), ["DropLink", "StartPrimary"], S.READY),
    (
        PrimaryStarted("me:5672", QUEUES, 100.0),
        ["GuardBackup", "GuardBackup", "ChangeState", "SendMembership"],
        S.RECOVERING,
    ),
    (BackupConnected("b2", "h2:5672", QUEUES), ["SendMembership"], S.RECOVERING),
    (Tick(101.0), [], S.RECOVERING),
    (InSyncCommitted(5, frozenset({"b1", "b2"})), [], S.RECOVERING),  # still in it: held
    # b2 is connected (catching up): never released by leaving it out; b1 never came
    (InSyncCommitted(5, frozenset()), ["ReleaseGuards", "SendMembership"], S.RECOVERING),
    (BackupQueueReady("b2", "q1"), [], S.RECOVERING),
    (BackupQueueReady("b2", "q2"), ["ChangeState", "SendMembership"], S.ACTIVE),
]

STORE_NAMED: list[Step] = [  # issue 25, item 3: only a serving primary refuses it
    (PromoteRequested(None, None, store_named=True), ["CheckCluster"], S.JOINING),
    (ClusterChecked(None), ["PersistPromotionEpoch"], S.JOINING),
]

IN_SYNC_SET: list[Step] = [
    (PromoteRequested(None), ["CheckCluster"], S.JOINING),
    (ClusterChecked(None), ["PersistPromotionEpoch"], S.JOINING),
    (EpochPersisted(1), ["DropLink", "StartPrimary"], S.JOINING),
    (PrimaryStarted("me:5672", QUEUES, 0.0), ["ChangeState", "SendMembership"], S.RECOVERING),
    (Tick(0.0), ["ChangeState", "SendMembership"], S.ACTIVE),
    (BackupConnected("b1", "h1:5672", QUEUES), ["GuardBackup", "SendMembership"], S.ACTIVE),
    (BackupGone("b1"), ["ReleaseGuards", "SendMembership"], S.ACTIVE),  # never in sync
    (BackupConnected("b1", "h1:5672", QUEUES), ["GuardBackup", "SendMembership"], S.ACTIVE),
    (BackupQueueReady("b1", "q1"), [], S.ACTIVE),
    (BackupQueueReady("b1", "q2"), ["SendMembership"], S.ACTIVE),  # in sync now
    (BackupGone("b1"), ["SendMembership"], S.ACTIVE),  # removal pending
    (BackupConnected("b1", "h1:5672", QUEUES), ["SendMembership"], S.ACTIVE),  # back: held
    (InSyncCommitted(1, frozenset()), [], S.ACTIVE),  # not gone: nothing to release
    (BackupGone("b1"), ["SendMembership"], S.ACTIVE),
    (InSyncCommitted(1, frozenset()), ["ReleaseGuards", "SendMembership"], S.ACTIVE),
]

PROMOTE_WITH_THE_IN_SYNC_SET: list[Step] = [
    (LinkUp("p:5672", 1), ["PersistEpoch", "ChangeState"], S.CATCHUP),
    (CaughtUp(), ["ChangeState"], S.READY),
    # b2 is in the committed set though the last membership said catch-up: expected.
    (PromoteRequested(2, frozenset({"me", "b2"})), ["PersistPromotionEpoch"], S.READY),
    (
        EpochPersisted(2, (*READY_B1, ("b2", "h2:5672", "catch-up"))),
        ["DropLink", "StartPrimary"],
        S.READY,
    ),
    (
        PrimaryStarted("me:5672", QUEUES, 0.0),
        ["GuardBackup", "ChangeState", "SendMembership"],
        S.RECOVERING,
    ),
]

# Issue 25: the old primary restarted (a new broker id, in no committed set) and catching
# up on 10,000 queues never holds the new primary in recovering: only the set's members do.
A_RESTARTED_BROKER_IS_NOT_AWAITED: list[Step] = [
    (LinkUp("p:5672", 1), ["PersistEpoch", "ChangeState"], S.CATCHUP),
    (CaughtUp(), ["ChangeState"], S.READY),
    (PromoteRequested(2, frozenset({"me", "b2"})), ["PersistPromotionEpoch"], S.READY),
    (EpochPersisted(2, READY_B1), ["DropLink", "StartPrimary"], S.READY),
    (
        PrimaryStarted("me:5672", QUEUES, 0.0),
        ["GuardBackup", "ChangeState", "SendMembership"],
        S.RECOVERING,
    ),
    (BackupConnected("old", "p:5672", QUEUES), ["GuardBackup", "SendMembership"], S.RECOVERING),
    (BackupConnected("b2", "h2:5672", QUEUES), ["SendMembership"], S.RECOVERING),
    (BackupQueueReady("b2", "q1"), [], S.RECOVERING),
    (BackupQueueReady("b2", "q2"), ["ChangeState", "SendMembership"], S.ACTIVE),  # "old" not
    (BackupQueueReady("old", "q1"), [], S.ACTIVE),
]

REFUSALS: list[Step] = [
    (LinkUp("p:5672", 7), ["PersistEpoch", "ChangeState"], S.CATCHUP),
    (PromoteRequested(None), ["Refuse"], S.CATCHUP),  # still catching up
    (CaughtUp(), ["ChangeState"], S.READY),
    (PromoteRequested(6), ["Refuse"], S.READY),  # older than epoch 7
    (LeaseGranted(5.0, 0.0), ["Refuse"], S.READY),  # a lease is for a primary
]

LEASE_AND_FENCING: list[Step] = [
    (PromoteRequested(3), ["CheckCluster"], S.JOINING),
    (ClusterChecked(None), ["PersistPromotionEpoch"], S.JOINING),
    (EpochPersisted(3), ["DropLink", "StartPrimary"], S.JOINING),
    (PrimaryStarted("me:5672", QUEUES, 0.0), ["ChangeState", "SendMembership"], S.RECOVERING),
    (Tick(0.0), ["ChangeState", "SendMembership"], S.ACTIVE),
    (LeaseGranted(2.0, 10.0), [], S.ACTIVE),
    (EpochSeen(3), [], S.ACTIVE),  # a backup at our epoch
    (Tick(12.0), [], S.ACTIVE),
    (Tick(12.5), ["FenceBroker"], S.ACTIVE),  # the lease ran out: fenced
    (BackupConnected("b1", "h1:5672", QUEUES), [], S.ACTIVE),  # fenced: nothing more
    (PromoteRequested(9), ["Refuse"], S.ACTIVE),
]

# Issue 26, item 2: the manager's lease run out, the primary serves on its members' grants
# while every member of a non-empty committed set grants (Tick's grants_until); the first
# lapse fences it; an empty set (None) fences it at the lease's end as before.
SERVING_ON_GRANTS: list[Step] = [
    *LEASE_AND_FENCING[:6],  # active, leased until 12.0
    (Tick(12.5, 13.0), [], S.ACTIVE),  # run out: on grants (ha_serving_on_grants)
    (Tick(12.9, 13.7), [], S.ACTIVE),  # renewed grants: still serving
    (LeaseGranted(2.0, 13.0), [], S.ACTIVE),  # ZooKeeper back: the agent renews
    (Tick(13.1, 13.7), [], S.ACTIVE),  # on the lease again (ha_serving_on_lease)
    (Tick(15.5, 16.0), [], S.ACTIVE),  # run out again: on grants
    (Tick(16.0, 16.0), ["FenceBroker"], S.ACTIVE),  # a grant lapsed: fenced
    (Tick(16.1, 17.0), [], S.ACTIVE),  # fenced: nothing more
]

NOT_EVERY_MEMBER_GRANTS: list[Step] = [
    *LEASE_AND_FENCING[:6],
    (Tick(12.5, float("-inf")), ["FenceBroker"], S.ACTIVE),  # a member never granted
]

EMPTY_SET_FENCES: list[Step] = [
    *LEASE_AND_FENCING[:6],
    (Tick(12.0, None), [], S.ACTIVE),
    (Tick(12.5, None), ["FenceBroker"], S.ACTIVE),  # no member: fenced as before
]

NEWER_EPOCH_FENCES: list[Step] = [
    (PromoteRequested(3), ["CheckCluster"], S.JOINING),
    (ClusterChecked("h2:5672 (active)"), ["Refuse"], S.JOINING),  # not a new cluster
    (PromoteRequested(3), ["CheckCluster"], S.JOINING),
    (ClusterChecked(None), ["PersistPromotionEpoch"], S.JOINING),
    (EpochPersisted(3), ["DropLink", "StartPrimary"], S.JOINING),
    (PrimaryStarted("me:5672", QUEUES, 0.0), ["ChangeState", "SendMembership"], S.RECOVERING),
    (EpochSeen(4), ["FenceBroker"], S.RECOVERING),
    (FenceRequested("again"), [], S.RECOVERING),
]

FAILED_PROMOTIONS: list[Step] = [
    (LinkUp("p:5672", 1), ["PersistEpoch", "ChangeState"], S.CATCHUP),
    (CaughtUp(), ["ChangeState"], S.READY),
    (PromoteRequested(2), ["PersistPromotionEpoch"], S.READY),
    (PromotionFailed("EpochError: disk full"), [], S.READY),  # the epoch was not written
    (LinkUp("p2:5672", 1), ["ChangeState"], S.CATCHUP),  # no promotion under way any more
    (CaughtUp(), ["ChangeState"], S.READY),
    (PromoteRequested(2), ["PersistPromotionEpoch"], S.READY),
    (EpochPersisted(2), ["DropLink", "StartPrimary"], S.READY),
    (LinkUp("p2:5672", 1), [], S.READY),  # promotion under way: not catching up again
    (PromotionFailed("OSError: boom"), ["Dial"], S.READY),  # the link was dropped: redial
    (PrimaryStarted("me:5672", QUEUES, 0.0), [], S.READY),  # too late: ignored
]

SCRIPTS = {
    "the in-sync set": IN_SYNC_SET,
    "promote with the in-sync set": PROMOTE_WITH_THE_IN_SYNC_SET,
    "failed promotions": FAILED_PROMOTIONS,
    "backup life": BACKUP_LIFE,
    "promote a ready backup expecting b1": PROMOTE_READY_EXPECTING_B1,
    "promote in a new cluster": PROMOTE_NEW_CLUSTER,
    "ha-backup-timeout": BACKUP_TIMEOUT,
    "an expected backup left out of the committed set": EXPECTED_LEFT_OUT,
    "a joining broker whose store the record names": STORE_NAMED,
    "a restarted broker out of the set is not awaited": A_RESTARTED_BROKER_IS_NOT_AWAITED,
    "a connected member is awaited past ha-backup-timeout": A_CONNECTED_MEMBER_IS_AWAITED,
    "refusals": REFUSALS,
    "lease and fencing": LEASE_AND_FENCING,
    "serving on grants after the lease": SERVING_ON_GRANTS,
    "not every member grants: fenced at the lease's end": NOT_EVERY_MEMBER_GRANTS,
    "an empty set fences at the lease's end": EMPTY_SET_FENCES,
    "a newer epoch fences the primary": NEWER_EPOCH_FENCES,
}


@pytest.mark.parametrize("name", list(SCRIPTS))
def test_script(name: str) -> None:
    role = HaRole("me", epoch=0, backup_timeout=10.0)
    for i, (event, expected, state) in enumerate(SCRIPTS[name]):
        actions = role.handle(event)
        assert (i, kinds(actions)) == (i, expected), event
        assert (i, role.state) == (i, state), event


def test_serving_on_grants_is_logged_with_why_it_ends() -> None:
    role = HaRole("me", epoch=0, backup_timeout=10.0)
    logged: list[tuple[str, dict[str, object]]] = []
    for event, _, _ in SERVING_ON_GRANTS:
        logged += [(a.event, dict(a.fields)) for a in role.handle(event) if isinstance(a, Log)]
    names = [name for name, _ in logged if name.startswith("ha_serving") or name == "ha_fenced"]
    assert names == [
        "ha_serving_on_grants",
        "ha_serving_on_lease",
        "ha_serving_on_grants",
        "ha_fenced",
    ]
    fenced = dict(logged)["ha_fenced"]
    assert fenced["reason"] == "a member's grant lapsed after the cluster manager's lease ran out"


def test_confirms_past_the_lease_only_while_every_member_grants() -> None:
    role = HaRole("me", epoch=0, backup_timeout=10.0)
    for event, _, _ in LEASE_AND_FENCING[:6]:
        role.handle(event)
    assert role.may_confirm(11.0) and role.may_confirm(11.0, None)
    assert not role.may_confirm(12.5) and not role.may_confirm(12.5, None)
    assert role.may_confirm(12.5, 13.0)  # every member grants until 13.0
    assert not role.may_confirm(13.0, 13.0) and not role.may_confirm(12.5, float("-inf"))
    role.handle(FenceRequested("a newer epoch"))
    assert not role.may_confirm(12.5, 13.0)


def test_refusals_say_why() -> None:
    role = HaRole("me", epoch=0, backup_timeout=10.0)
    reasons = []
    for event, _, _ in REFUSALS:
        reasons += [a.reason for a in role.handle(event) if isinstance(a, Refuse)]
    assert reasons == [
        "still catching up: cannot promote a backup in catch-up",
        "epoch 6 is older than epoch 7 seen here",
        "a lease is for a primary; this broker is ready",
    ]


def test_membership_names_every_guarded_backup() -> None:
    role = HaRole("me", epoch=0, backup_timeout=10.0)
    sent: list[Any] = []
    for event, _, _ in PROMOTE_READY_EXPECTING_B1[:9]:
        sent += [a.members for a in role.handle(event) if isinstance(a, SendMembership)]
    assert sent[0] == (("me", "me:5672", "recovering"), ("b1", "h1:5672", "catch-up"))
    assert sent[-1] == (("me", "me:5672", "active"), ("b1", "h1:5672", "ready"))


def test_promotion_records_the_expected_backups_and_the_epoch() -> None:
    role = HaRole("me", epoch=0, backup_timeout=10.0)
    actions: list[Action] = []
    for event, _, _ in PROMOTE_READY_EXPECTING_B1[:5]:
        actions += role.handle(event)
    assert StartPrimary((("b1", "h1:5672"),)) in actions
    assert PersistPromotionEpoch(2) in actions and role.epoch == 2
    change = next(a for a in actions if isinstance(a, ChangeState) and a.new is S.RECOVERING)
    assert dict(change.fields) == {"epoch": 2, "expected": ["h1:5672"]}


# -- invariants (hypothesis) --------------------------------------------------------------
BACKUPS = ["b1", "b2", "b3"]

events = st.one_of(
    st.just(Start()),
    st.builds(LinkUp, st.just("p:5672"), st.integers(0, 4)),
    st.builds(LinkDown, st.just("gone")),
    st.just(CaughtUp()),
    st.builds(PromoteRequested, st.none() | st.integers(0, 6)),
    st.builds(BackupConnected, st.sampled_from(BACKUPS), st.just("h:5672"), st.just(QUEUES)),
    st.builds(BackupQueueReady, st.sampled_from(BACKUPS), st.sampled_from(sorted(QUEUES))),
    st.builds(BackupGone, st.sampled_from(BACKUPS)),
    st.builds(QueueDeleted, st.sampled_from(sorted(QUEUES))),
    st.builds(Tick, st.floats(0, 30)),
    st.builds(LeaseGranted, st.floats(0.1, 5), st.floats(0, 30)),
    st.builds(EpochSeen, st.integers(0, 8)),
    st.builds(FenceRequested, st.just("told to")),
    st.builds(InSyncCommitted, st.integers(0, 6), st.frozensets(st.sampled_from(BACKUPS))),
)


class Checker:
    """Feeds events, answers the role's requests like the shell, and checks each step."""

    def __init__(self, members: tuple[tuple[str, str, str], ...], busy: bool) -> None:
        self.role = HaRole("me", epoch=0, backup_timeout=10.0)
        self.members = members
        self.busy = busy
        self.guarded: set[str] = set()
        self.in_sync: set[str] = set()
        self.epoch = 0

    def feed(self, event: Event) -> None:
        was_fenced = self.role.fenced
        self.in_sync = {b for b, r in self.role.backups.items() if r.in_sync}
        self.epoch = self.role.epoch
        actions = self.role.handle(event)
        allowed = EVENT_ACTIONS[type(event)] | {Log}
        assert {type(a) for a in actions} <= allowed, (event, actions)
        moves = [a for a in actions if isinstance(a, ChangeState)]
        assert len(moves) <= 1, (event, moves)  # never two transitions from one event
        for move in moves:
            assert (move.old, move.new) in TRANSITIONS
        if was_fenced:
            assert all(isinstance(a, (Refuse, Log)) for a in actions), (event, actions)
            assert self.role.fenced  # never un-fenced
        if self.role.state.is_primary:
            assert self.role.promoted_at is not None  # guards exist before it serves
        for action in actions:
            self.perform(event, action)

    def perform(self, event: Event, action: Action) -> None:
        match action:
            case GuardBackup(backup_id, _url):
                assert backup_id not in self.guarded
                self.guarded.add(backup_id)
            case ReleaseGuards(backup_id):
                # Confirms released only for a guarded backup that left or timed out, and
                # for an in-sync one only once its removal is committed at this epoch.
                assert backup_id in self.guarded
                if backup_id in self.in_sync:
                    assert isinstance(event, InSyncCommitted), event
                    assert backup_id not in event.members and event.epoch == self.epoch
                else:
                    assert isinstance(event, Tick) or event == BackupGone(backup_id)
                self.guarded.discard(backup_id)
            case CheckCluster():
                self.feed(ClusterChecked("h2:5672 (active)" if self.busy else None))
            case PersistPromotionEpoch(epoch):
                self.feed(EpochPersisted(epoch, self.members))
            case StartPrimary():
                self.feed(PrimaryStarted("me:5672", QUEUES, 0.0))
                self.feed(Tick(0.0))
            case Dial() | DropLink() | PersistEpoch() | SendMembership() | FenceBroker():
                pass
            case ChangeState() | Refuse() | Log():
                pass


@settings(max_examples=300, deadline=None)
@given(
    st.lists(events, max_size=40),
    st.lists(st.sampled_from(BACKUPS), unique=True),
    st.booleans(),
)
def test_invariants(sequence: list[Event], ready: list[str], busy: bool) -> None:
    checker = Checker(tuple((b, f"{b}:5672", "ready") for b in ready), busy)
    for event in sequence:
        checker.feed(event)
    role = checker.role
    assert set(role.backups) == checker.guarded  # the role's records are the guards held
    assert role.expected <= set(role.backups)
