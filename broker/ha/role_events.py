"""The events the HA role machine takes and the actions it returns (sans-I/O).

Frozen, slotted dataclasses: the vocabulary of :class:`~broker.ha.role.HaRole`, whose
docstring has the table of which event may return which action
(:data:`EVENT_ACTIONS`, tested). Time travels in the events (``now``); nothing here reads a
clock or does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from broker.ha.state import HaState


# -- events ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Start:
    """The broker listens: a cluster member starts as a backup and dials the primary."""


@dataclass(frozen=True, slots=True)
class LinkUp:
    """The backup link was accepted by the primary at ``primary`` with ``primary_epoch``."""

    primary: str
    primary_epoch: int


@dataclass(frozen=True, slots=True)
class LinkDown:
    """The backup link closed; the backup keeps its state and dials again."""

    reason: str


@dataclass(frozen=True, slots=True)
class CaughtUp:
    """Every queue of the link's first snapshot has caught up."""


@dataclass(frozen=True, slots=True)
class PromoteRequested:
    """The cluster manager asks this broker to become primary (with an epoch, or the next),
    expecting the backups of the committed in-sync set ``in_sync`` (broker ids) when it
    keeps one, else the ready members last heard of. ``store_named``: the cluster manager's
    committed in-sync record names this broker's store, which holds every confirmed message
    (issue 25, item 3): a joining broker is then refused only beside a serving primary, not
    beside backups."""

    epoch: int | None = None
    in_sync: frozenset[str] | None = None
    store_named: bool = False


@dataclass(frozen=True, slots=True)
class ClusterChecked:
    """Answer to CheckCluster: the address of a broker beyond joining, or None."""

    beyond_joining: str | None


@dataclass(frozen=True, slots=True)
class EpochPersisted:
    """The promotion's epoch is durable; ``members`` is the last membership heard."""

    epoch: int
    members: tuple[tuple[str, str, str], ...] = ()  # (id, url, state)


@dataclass(frozen=True, slots=True)
class PromotionFailed:
    """Performing a promotion's action failed (e.g. the epoch could not be written)."""

    reason: str


@dataclass(frozen=True, slots=True)
class PrimaryStarted:
    """The shell built the primary's guards and streams (answer to StartPrimary)."""

    url: str
    queues: frozenset[str]  # replicated queues (level all): each expected backup's catch-up set
    now: float


@dataclass(frozen=True, slots=True)
class BackupConnected:
    """A backup opened a stream; ``queues`` would be its catch-up set if it is new."""

    backup_id: str
    url: str
    queues: frozenset[str]


@dataclass(frozen=True, slots=True)
class BackupQueueReady:
    """A backup caught up on one queue."""

    backup_id: str
    queue: str


@dataclass(frozen=True, slots=True)
class BackupGone:
    """A backup's link closed or went silent past twice the link heartbeat."""

    backup_id: str


@dataclass(frozen=True, slots=True)
class QueueDeleted:
    """A queue was deleted: it no longer delays any backup's readiness."""

    name: str


@dataclass(frozen=True, slots=True)
class Tick:
    """Housekeeping time (the broker's monotonic clock), with the instant until which every
    member of the committed in-sync set grants this primary the member lease (None: the
    lease not in force or the set empty; ``MemberLeases.grants_until``)."""

    now: float
    grants_until: float | None = None


@dataclass(frozen=True, slots=True)
class LeaseGranted:
    """The cluster manager vouches for this primary until ``now + seconds``."""

    seconds: float
    now: float


@dataclass(frozen=True, slots=True)
class EpochSeen:
    """Another broker announced ``epoch`` (a backup link's client properties)."""

    epoch: int


@dataclass(frozen=True, slots=True)
class InSyncCommitted:
    """The cluster manager committed the in-sync set ``members`` (broker ids) at ``epoch``
    (the agent: a conditional write in ZooKeeper; without agents: ``qpid-ha in-sync
    --commit``)."""

    epoch: int
    members: frozenset[str]


@dataclass(frozen=True, slots=True)
class FenceRequested:
    """Stop serving at once, for ``reason``."""

    reason: str


Event = (
    Start
    | LinkUp
    | LinkDown
    | CaughtUp
    | PromoteRequested
    | ClusterChecked
    | EpochPersisted
    | PromotionFailed
    | PrimaryStarted
    | BackupConnected
    | BackupQueueReady
    | BackupGone
    | QueueDeleted
    | Tick
    | LeaseGranted
    | EpochSeen
    | FenceRequested
    | InSyncCommitted
)


# -- actions -----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Dial:
    """Start the backup link: dial the addresses of ha-brokers-url."""


@dataclass(frozen=True, slots=True)
class DropLink:
    """Drop the backup link at once, without the close handshake (promotion)."""


@dataclass(frozen=True, slots=True)
class CheckCluster:
    """Ask the other brokers their state; answer with ClusterChecked (the first beyond
    joining; with ``primaries_only``, the first that serves as primary)."""

    primaries_only: bool = False


@dataclass(frozen=True, slots=True)
class PersistEpoch:
    """Write ``epoch`` durably now (a newer epoch seen)."""

    epoch: int


@dataclass(frozen=True, slots=True)
class PersistPromotionEpoch:
    """Write ``epoch`` durably, then answer with EpochPersisted (persist before serving)."""

    epoch: int


@dataclass(frozen=True, slots=True)
class StartPrimary:
    """Become the primary's shell: guards, streams; answer with PrimaryStarted."""

    expected: tuple[tuple[str, str], ...]  # (backup id, url) of the expected backups


@dataclass(frozen=True, slots=True)
class GuardBackup:
    """Hold publisher confirms for this backup on every replicated queue from now on.

    ``lazy``: a backup that just connected, not in sync, is guarded on a queue only from
    the moment its stream of that queue opens (the stream takes its queue's guard before
    it sends anything), and on every queue created from now on at once; until then a
    confirm on that queue does not wait for it. It counts as ready (and may enter the
    in-sync set) only once each queue of its catch-up set reported ready through its
    stream, so every guard exists by then, each from the first position it must hold
    (docs/ha-design.md, "Who a confirm waits for"). A catching-up backup's 10,000 queues
    held every confirm of a queue it subscribed last for the whole catch-up (issue 25).
    An expected, in-sync backup at a promotion is guarded on every queue before the
    broker serves: it holds every confirmed message, and so must whatever is confirmed
    from now on."""

    backup_id: str
    url: str
    lazy: bool = False


@dataclass(frozen=True, slots=True)
class ReleaseGuards:
    """Stop waiting for this backup: release every confirm held for it."""

    backup_id: str


@dataclass(frozen=True, slots=True)
class SendMembership:
    """Tell every backup the membership (on the configuration streams)."""

    members: tuple[tuple[str, str, str], ...]  # (id, url, state)


@dataclass(frozen=True, slots=True)
class ChangeState:
    """The state moved (the shell logs ``ha_state_changed``)."""

    old: HaState
    new: HaState
    reason: str
    fields: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True, slots=True)
class FenceBroker:
    """Stop serving at once: refuse clients, send no confirm (the broker exits 3)."""

    reason: str


@dataclass(frozen=True, slots=True)
class Refuse:
    """The request (promotion, lease) is refused; ``reason`` is shown to the caller (the
    shell raises :class:`PromoteError`)."""

    reason: str


class PromoteError(Exception):
    """A request the role refused (a promotion, a lease, an in-sync set); the message says
    why (shown by qpid-ha and the API)."""


@dataclass(frozen=True, slots=True)
class Log:
    """A log event of the ``ha`` component."""

    event: str
    level: str = "info"
    fields: tuple[tuple[str, Any], ...] = ()


Action = (
    Dial
    | DropLink
    | CheckCluster
    | PersistEpoch
    | PersistPromotionEpoch
    | StartPrimary
    | GuardBackup
    | ReleaseGuards
    | SendMembership
    | ChangeState
    | FenceBroker
    | Refuse
    | Log
)

#: Which actions each event may return (besides Log, always allowed); tested.
EVENT_ACTIONS: dict[type[Any], frozenset[type[Any]]] = {
    Start: frozenset({Dial}),
    LinkUp: frozenset({PersistEpoch, ChangeState}),
    LinkDown: frozenset({ChangeState}),
    CaughtUp: frozenset({ChangeState}),
    PromoteRequested: frozenset({Refuse, CheckCluster, PersistPromotionEpoch, PersistEpoch}),
    ClusterChecked: frozenset({Refuse, PersistPromotionEpoch}),
    EpochPersisted: frozenset({DropLink, StartPrimary}),
    PromotionFailed: frozenset({Dial}),
    PrimaryStarted: frozenset({GuardBackup, ChangeState, SendMembership, FenceBroker}),
    BackupConnected: frozenset({GuardBackup, ChangeState, SendMembership, FenceBroker}),
    BackupQueueReady: frozenset({ChangeState, SendMembership, FenceBroker}),
    BackupGone: frozenset({ReleaseGuards, ChangeState, SendMembership, FenceBroker}),
    QueueDeleted: frozenset({ChangeState, SendMembership, FenceBroker}),
    Tick: frozenset({FenceBroker, ReleaseGuards, ChangeState, SendMembership}),
    LeaseGranted: frozenset({Refuse}),
    EpochSeen: frozenset({FenceBroker, PersistEpoch}),
    FenceRequested: frozenset({FenceBroker}),
    InSyncCommitted: frozenset({Refuse, ReleaseGuards, ChangeState, SendMembership}),
}
