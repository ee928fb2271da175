"""HaBroker: the HA role of one broker, the asyncio shell of :class:`~broker.ha.role.HaRole`.

With ``ha-cluster=yes`` a broker always starts as a backup (JOINING) and never decides by
itself to become primary: a cluster manager (our agent, Pacemaker, or an operator with
``qpid-ha promote --cluster-manager``) calls :meth:`promote`. Every decision (state, epoch,
fencing, lease, which backups the primary waits for) is the role machine's: this class turns
what happens (link callbacks, streams opened and closed through
:class:`~broker.ha.backup_events.BackupEventsToRole`, management calls, ticks) into its
events and carries out the actions it returns, in order, in one place
(:meth:`HaBroker._perform`: at once, or, for a promotion's actions that wait for I/O, in
turn by :meth:`HaBroker.promote`; a ``Refuse`` raises :class:`PromoteError`). It

- logs every transition (``ha_state_changed``); an illegal one stops the broker (fail-stop);
- owns the connection admission policy (:class:`~broker.ha.admission.HaAdmission`): a
  backup refuses every connection except HA admin ones with 530 NOT_ALLOWED ("HA backup:
  not the primary ..."), so clients move on to the next address of their URL list; the
  primary accepts clients and backup links;
- runs its backup side (:class:`~broker.ha.backup_side.BackupSide`, the owner of the
  :class:`~broker.ha.backup.BackupLink`) while a backup, and the
  :class:`~broker.ha.primary.Primary` role with its replication streams once promoted;
- keeps the fencing epoch (:class:`~broker.ha.epoch.EpochStore`): a primary that sees a
  higher epoch (a backup link announcing it) stops serving at once;
- publishes its status in Connection.Start server properties (``qpid.ha-status``,
  ``qpid.ha-epoch``), the cheap status check used before promoting a joining broker;
- advertises the cluster's public URL (``ha-public-url``, else ``ha-brokers-url``, without
  credentials) to clients: ``known-hosts`` of connection.open-ok, the server property
  ``qpid.ha-public-url``, a backup's refusal text and ``/api/ha``;
- as a new primary, deletes the replicated auto-delete queues nobody consumes from within
  their grace period (:mod:`broker.ha.auto_delete`), a delete replicated like any other.

THREAD UNSAFE: the broker's event loop owns it.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from broker.core.vhosts import VirtualHosts
from broker.ha.admission import HaAdmission
from broker.ha.backup import BackupLink, DiskSync
from broker.ha.backup_events import BackupEventsToRole
from broker.ha.backup_side import BackupSide
from broker.ha.beyond_joining import cluster_beyond_joining
from broker.ha.cluster_identity import ClusterIdentity
from broker.ha.epoch import EpochStore
from broker.ha.ha_status import (
    HaRows,
    HaSnapshot,
    backup_snapshots,
    ha_status_steps,
    in_sync_status,
    member_dicts,
    rows_of,
)
from broker.ha.lease_keeper import LeaseKeeper
from broker.ha.manager_lease import ManagerLease
from broker.ha.member_lease import GrantLedger, LeaseTimes
from broker.ha.names import (
    BASE_EPOCH_PROPERTY,
    BROKER_ID_PROPERTY,
    EPOCH_PROPERTY,
    FORMATS_PROPERTY,
    PROMOTING_PROPERTY,
    PUBLIC_URL_PROPERTY,
    STATUS_PROPERTY,
)
from broker.ha.primary import Primary, PrimaryListener
from broker.ha.primary_start import loop_call_soon, start_primary
from broker.ha.promotion_quiet import PromotionQuiet
from broker.ha.replicate_level import ReplicateLevel
from broker.ha.replication_contract import ContractFloor, ReplicationContract
from broker.ha.replication_errors import ReplicationErrors
from broker.ha.role import HaRole
from broker.ha.role_events import (
    Action,
    CaughtUp,
    ChangeState,
    CheckCluster,
    ClusterChecked,
    Dial,
    DropLink,
    EpochPersisted,
    Event,
    FenceBroker,
    FenceRequested,
    GuardBackup,
    InSyncCommitted,
    LinkDown,
    Log,
    PersistEpoch,
    PersistPromotionEpoch,
    PrimaryStarted,
    PromoteError,
    PromoteRequested,
    PromotionFailed,
    Refuse,
    ReleaseGuards,
    SendMembership,
    Start,
    StartPrimary,
    Tick,
)
from broker.ha.snapshot_rows import SnapshotRows
from broker.ha.state import HaState
from broker.ha.store_lineage import StoreLineage
from broker.ha.streams import PrimaryStreams
from broker.options import public_url
from common.log import get_logger, set_log_context
from common.slices import Steps, run_in_turns, run_steps
from common.url import Address, parse_url
from common.version import replication_formats

if TYPE_CHECKING:
    from broker.amqp.context import BrokerContext
    from broker.liveness import LeaseOffers
    from broker.options import BrokerOptions
    from broker.store.data_dir import DataDir

__all__ = ["HaBroker", "PromoteError"]


class HaBroker:
    """See the module docstring."""

    def __init__(
        self,
        vhost: Any,
        context: BrokerContext,
        options: BrokerOptions,
        *,
        amqp_port: Callable[[], int],
        on_fenced: Callable[[str], None],
        data_dir: DataDir | None = None,
        on_refused: Callable[[str], None] | None = None,
        disk: DiskSync | None = None,
        lease_offers: LeaseOffers | None = None,
    ) -> None:
        self.vhost = vhost
        self.context = context
        self.options = options
        self.log_ = get_logger("ha")
        #: Called with each HA event (name, fields) as it is logged: the web console's
        #: fail-over timeline (broker.management.console) listens here.
        self.listeners: list[Callable[[str, dict[str, Any]], None]] = []
        self._amqp_port = amqp_port
        self._on_fenced = on_fenced
        self.identity = ClusterIdentity(data_dir, self.log_)
        self.epoch_store = EpochStore(options.data_dir)
        self.epoch_store.load()
        #: The era this broker's store holds (broker.ha.store_history).
        self.lineage = StoreLineage(options.data_dir, self.log_)
        self.role = HaRole(
            str(uuid.uuid4()),
            epoch=self.epoch_store.current,
            backup_timeout=options.ha_backup_timeout,
        )
        self.addresses = list(parse_url(options.ha_brokers_url or "").addresses)
        #: What clients are told to connect to (canonical, no credentials).
        self.public_url = public_url(options) or ""
        self.replicate_default = ReplicateLevel.parse(options.ha_replicate)
        #: The replication formats this broker speaks (announced, and asked of backups).
        self.formats = replication_formats()
        #: Which format's limits a client's declare is held to (the lowest the cluster may
        #: use: backup links admitted, members the cluster manager reported).
        self.contract_floor = ContractFloor(self.formats)
        # What a client declares must be what the replication wire carries (issue 24).
        vhost.hold_contract(ReplicationContract(self.replicate_default, self.contract_floor))
        #: Each queue's and binding's snapshot row, encoded as each is declared, whatever
        #: the role: a promoted backup's first snapshots join them (issue 25).
        self.rows = SnapshotRows(self.replicate_default)
        vhost.listeners.append(self.rows)
        self.primary: Primary | None = None
        #: The member lease (issue 26): its grants, promises and serving check.
        self.lease = LeaseKeeper(
            self,
            LeaseTimes.for_links(
                options.ha_member_lease,
                options.ha_clock_drift,
                options.link_heartbeat_interval,
                options.link_maintenance_interval,
                options.ha_member_lease_max,
            ),
        )
        #: The cluster manager's lease: renewals ``lease_offers`` takes off the loop
        #: (broker.liveness), applied at each tick; a timer at its end.
        self.manager_lease = ManagerLease(self, lease_offers)
        self.streams: PrimaryStreams | None = None
        #: As a primary: each backup's latest replication error (``/api/ha``).
        self.backup_errors = ReplicationErrors()
        #: As a backup: the link to the primary, and what it last heard.
        self.backup = BackupSide(
            self,
            vhost,
            options,
            self.log_,
            addresses=self.addresses,
            identity=self.identity,
            lineage=self.lineage,
            lease=self.lease,
            formats=self.formats,
            disk=disk,
            on_fenced=on_fenced,
            on_refused=on_refused,
            cluster_users=context.authenticator.cluster_users,
        )
        self._promoting = asyncio.Lock()
        #: The promotion's awaited steps and their parts, in milliseconds (logged once
        #: it ends: ``ha_promotion_steps``).
        self._promotion_steps: dict[str, float] = {}
        #: the epochs the promotion in progress was told ended (``promote``'s ``ended``)
        self._ended: frozenset[int] = frozenset()
        #: While promoted (and a moment after), housekeeping over every queue waits.
        self.quiet = PromotionQuiet()
        #: A promotion's actions that wait for I/O, in order (:meth:`_perform` queues them,
        #: :meth:`promote` awaits each; each feeds the role its answer).
        self._awaiting: deque[Callable[[], Awaitable[None]]] = deque()
        #: Whom this broker serves (``BrokerContext.admission``).
        self.admission = HaAdmission(
            self,
            self.log_,
            public_url=self.public_url,
            explicit_public_url=options.ha_public_url,
            link_user=options.ha_username,
            formats=self.formats,
            vhosts=vhost if isinstance(vhost, VirtualHosts) else [vhost],  # read at each admit
            replicate_default=self.replicate_default,
            contract_floor=self.contract_floor,
            lease=self.lease,
            manager_lease=self.manager_lease,
        )
        context.attach(admission=self.admission, server_properties=self.server_properties)
        set_log_context(epoch=self.epoch)

    # -- identity, read from the role ----------------------------------------------------
    @property
    def broker_id(self) -> str:
        return self.role.broker_id

    @property
    def state(self) -> HaState:
        return self.role.state

    @property
    def epoch(self) -> int:
        return self.role.epoch

    @property
    def fenced(self) -> bool:
        return self.role.fenced

    @property
    def lease_until(self) -> float | None:
        return self.role.lease_until

    def manager_silent(self) -> bool:
        return self.manager_lease.silent()

    @property
    def primary_address(self) -> str | None:
        return self.role.primary_address

    @property
    def url(self) -> str:
        host = self.options.interface.split(",")[0].strip().strip("[]")  # the first address
        if host in ("0.0.0.0", "::", ""):
            host = self.options.node_name
        return str(Address(host, self._amqp_port()))

    def tell(self, event: str, fields: dict[str, Any]) -> None:
        """Hand an HA event just logged to :attr:`listeners`; a listener that fails is
        logged and never stops the role."""
        for listener in self.listeners:
            try:
                listener(event, fields)
            except Exception:
                self.log_.exception("ha_listener_failed", ha_event=event)

    def server_properties(self) -> dict[str, Any]:
        base = self.lineage.base_epoch
        return {
            STATUS_PROPERTY: self.state.value,
            EPOCH_PROPERTY: self.epoch,
            BROKER_ID_PROPERTY: self.broker_id,
            PUBLIC_URL_PROPERTY: self.public_url,
            FORMATS_PROPERTY: self.formats.text,
            **self.identity.server_properties(),
            **({} if base is None else {BASE_EPOCH_PROPERTY: base}),
            **({PROMOTING_PROPERTY: True} if self.promoting else {}),
        }

    @property
    def promoting(self) -> bool:
        """A promotion of this backup is under way (it is not the primary yet)."""
        return self._promoting.locked() and not self.state.is_primary

    # -- events in, actions out ----------------------------------------------------------
    def handle(self, event: Event) -> None:
        """Feed one event to the role and carry out its actions in order (:meth:`_perform`);
        :class:`PromoteError` when the role refuses (a promotion, a lease, an in-sync set)."""
        if self.state.is_backup:
            self._member_quiet(event)
        for action in self.role.handle(event):
            self._perform(action)

    def _member_quiet(self, event: Event) -> None:
        """A backup's side of the fail-over's quiet (:mod:`broker.ha.promotion_quiet`): its
        link to the primary lost (a member about to link to a new primary and catch up on
        its busy queues first) until it caught up again, at most ``LONGEST``."""
        now = self.now()
        if isinstance(event, LinkDown):
            self.quiet.began(now)
        elif isinstance(event, CaughtUp) and self.quiet.holds(now):
            self.quiet.ended(now)

    def _perform(self, action: Action) -> None:
        """Carry out one action of the role: the one place every action is performed. Those
        that wait for I/O (a promotion's) are queued for :meth:`promote`, which awaits them
        in turn; each hands the role its answer (an event) when done."""
        match action:
            case Log(event, level, fields):
                getattr(self.log_, level)(event, **dict(fields))
                self.tell(event, dict(fields))
            case ChangeState(old, new, reason, fields):
                self.log_.info(
                    "ha_state_changed", old=old.value, new=new.value, reason=reason, **dict(fields)
                )
                self.tell("ha_state_changed", {"old": old.value, "new": new.value, **dict(fields)})
                if new is HaState.RECOVERING:
                    self.admission.recovering()
            case PersistEpoch(epoch):
                self.epoch_store.observe(epoch)
                set_log_context(epoch=self.epoch_store.current)
            case Dial():
                self.backup.dial()
            case GuardBackup(backup_id, url, lazy):
                if self.primary is not None and lazy:  # not in sync: guarded by its streams
                    self.primary.guard_lazily(backup_id, url)
                elif self.primary is not None:
                    self.primary.guard_backup(backup_id, url)
            case ReleaseGuards(backup_id):
                if self.primary is not None:
                    self.primary.release(backup_id)
            case SendMembership(members):
                if self.streams is not None:
                    self.streams.broadcast({"type": "membership", "members": member_dicts(members)})
            case FenceBroker(reason):
                self._on_fenced(reason)
            case Refuse(reason):
                raise PromoteError(reason)
            case CheckCluster(primaries_only):
                self._awaiting.append(partial(self._check_cluster, primaries_only))
            case PersistPromotionEpoch(epoch):
                self._awaiting.append(partial(self._persist_promotion_epoch, epoch))
            case DropLink():
                self._awaiting.append(self.backup.drop)
            case StartPrimary(expected):
                self._awaiting.append(partial(self._start_primary, dict(expected)))

    # -- lifecycle ---------------------------------------------------------------------
    def start(self) -> None:
        """Start as a backup: dial the primary."""
        self.log_.info(
            "ha_started",
            broker_id=self.broker_id,
            state=self.state.value,
            brokers_url=self.options.ha_brokers_url,
            public_url=self.public_url,
            replicate=self.replicate_default.value,
            link_heartbeat_interval=self.options.link_heartbeat_interval,
            link_maintenance_interval=self.options.link_maintenance_interval,
            ha_backup_timeout=self.options.ha_backup_timeout,
        )
        # the rows of what the store recovered before this broker listened, a slice a turn
        vhosts = list(self.vhost) if isinstance(self.vhost, VirtualHosts) else [self.vhost]
        run_in_turns(self.rows.warm_steps(vhosts), loop_call_soon())
        self.handle(Start())

    async def stop(self) -> None:
        self.lease.stop()
        self.manager_lease.stop()
        await self.backup.stop()

    def tick(self) -> None:
        primary = self.primary
        if primary is None:
            return
        self.take_offered_lease()
        self.handle(Tick(self.context.clock(), self.grants_until()))
        if self.fenced:
            return
        primary.tick()
        primary.delete_orphans(self.log_)

    # -- the member lease (broker.ha.lease_keeper) --------------------------------------
    def member_grant(self, epoch: int, duration: float) -> None:
        """As a backup: grant the primary of ``epoch`` a member lease."""
        self.lease.member_grant(epoch, duration)

    @property
    def grants(self) -> GrantLedger:
        """The member-lease grants this broker gave as a backup (``GET /grant``)."""
        return self.lease.grants

    def grants_until(self) -> float | None:
        """Until when every member of the committed set grants this primary (None: the
        member lease not in force, or the set empty): past the cluster manager's lease it
        serves on those grants alone (issue 26, item 2; ``HaRole.may_confirm``)."""
        return self.lease.leases.grants_until()

    def serving_window(self) -> tuple[float, float] | None:
        """As a primary, when it serves on its members' grants (None: not a primary, or
        the member lease not in force over a non-empty set); the liveness thread answers
        it (``serving_on_grants`` in ``GET /liveness``)."""
        if self.state not in (HaState.ACTIVE, HaState.RECOVERING):
            return None
        return self.lease.serving_window()

    def lease_status(self) -> dict[str, Any]:
        return self.lease.status()

    # -- the cluster manager's lease ----------------------------------------------------
    def grant_lease(self, seconds: float) -> None:
        """The cluster manager vouches for this primary for ``seconds`` more.

        The agent renews it at every check with what is left of its own lease on its
        ZooKeeper session. Once granted, a primary whose lease runs out fences itself
        (stops serving, exits 3; its supervisor restarts it as a backup): a primary whose
        agent died, froze or lost ZooKeeper never serves beside the next one.
        """
        self.manager_lease.grant(seconds)  # PromoteError: not a primary

    def commit_in_sync(self, epoch: int, members: list[str]) -> list[str]:
        """The cluster manager committed the in-sync set ``members`` at ``epoch``: release
        the confirms held for every backup that went away (or, expected, never came) and is
        not in it. Returns the backups released; :class:`PromoteError` when the role refuses
        (not a primary, or another epoch's set)."""
        role = self.role
        before = set(role.pending_removal()) | set(role.awaited())
        self.handle(InSyncCommitted(epoch, frozenset(members)))  # PromoteError: refused
        self.lease.set_changed()
        released = sorted(before - set(role.pending_removal()) - set(role.awaited()))
        if released:
            self.log_.info("ha_in_sync_committed", epoch=epoch, released=released)
        return released

    def in_sync_status(self) -> dict[str, Any]:
        """The in-sync set in ``GET /api/ha``: while the member lease is in force a backup
        joins it only once it granted (a member of the committed set stays)."""
        return in_sync_status(self.role, self.lease.joined())

    @property
    def lease_offers(self) -> LeaseOffers | None:
        """Renewals the liveness thread takes off the loop (``ManagerLease.offers``)."""
        return self.manager_lease.offers

    def take_offered_lease(self) -> None:
        """Apply a renewal the liveness thread took (as received: its time, not now)."""
        self.manager_lease.take_offered()

    def may_confirm(self) -> bool:
        """Publisher confirms go out only while both leases hold: the cluster manager's
        and the member lease (admission policy hook; the confirm path's last step, after
        its holds: ``CONFIRM_PATH`` in broker/core/queue_contracts.py). It decides
        nothing: the fence is the role's (its Tick), a lapse the lease keeper's."""
        return self.admission.may_confirm()

    def fence(self, reason: str) -> None:
        """Stop serving at once (a newer primary exists)."""
        self.handle(FenceRequested(reason))

    # -- promotion ---------------------------------------------------------------------
    async def promote(
        self,
        epoch: int | None = None,
        in_sync: list[str] | None = None,
        store_named: bool = False,
        ended: frozenset[int] = frozenset(),
    ) -> HaState:
        """Become the primary (cluster-manager only), expecting the backups of the
        committed in-sync set ``in_sync`` (broker ids) when the cluster manager keeps one;
        ``store_named``: its committed record names this broker's store (a joining broker
        is then refused only beside a serving primary); ``ended``: older epochs whose
        primary's process exited (its grants to them are not waited out). Returns the new
        state.

        One promotion at a time: a second request waits for the first and then finds the
        broker primary already (or fenced)."""
        members = None if in_sync is None else frozenset(in_sync)
        async with self._promoting:
            quiet = not self.state.is_primary  # a backup's promotion: housekeeping waits
            if quiet:
                self.quiet.began(self.now())
            self._awaiting.clear()
            self._ended = ended
            # each awaited step's milliseconds, and the loop thread's CPU meanwhile (its
            # ``_cpu``: the step's work and every other callback's), logged
            steps = self._promotion_steps = {}
            try:
                # A link's end under way first: the rest of a snapshot it left half applied
                # (a slice a turn) and its LinkDown (a backup ready before that link is
                # ready again): the role decides on what the backup holds, never on half.
                began = time.monotonic()
                await self.backup.settled()
                steps["link_settled"] = round((time.monotonic() - began) * 1000.0, 1)
                self.handle(PromoteRequested(epoch, members, store_named))
                while self._awaiting:
                    step = self._awaiting.popleft()
                    began = time.monotonic()
                    cpu0 = time.thread_time()
                    await step()
                    name = getattr(step, "func", step).__name__.lstrip("_")
                    steps[name] = round((time.monotonic() - began) * 1000.0, 1)
                    steps[name + "_cpu"] = round((time.thread_time() - cpu0) * 1000.0, 1)
                self.log_.debug("ha_promotion_steps", **steps)
            except PromoteError:
                raise
            except Exception as exc:
                self._awaiting.clear()
                self.handle(PromotionFailed(f"{type(exc).__name__}: {exc}"))
                raise
            finally:
                if quiet:
                    self.quiet.ended(self.now())
                self._awaiting.clear()
            return self.state

    # The promotion's actions that wait for I/O (queued by _perform, awaited by promote).
    async def _check_cluster(self, primaries_only: bool) -> None:
        options = self.options
        beyond = await cluster_beyond_joining(
            self.addresses,
            self._amqp_port(),
            options.interface,
            options.node_name,
            primaries_only,
        )
        self.handle(ClusterChecked(beyond))

    async def _persist_promotion_epoch(self, new_epoch: int) -> None:
        await asyncio.to_thread(self.epoch_store.observe, new_epoch)
        set_log_context(epoch=self.epoch_store.current)
        members = tuple(
            (str(m.get("id")), str(m.get("url")), str(m.get("state"))) for m in self.last_members()
        )
        self.handle(EpochPersisted(new_epoch, members))

    async def _start_primary(self, expected: dict[str, str]) -> None:
        """Become the primary's shell: the work over every queue first, a slice a turn
        (:func:`broker.ha.primary_start.start_primary`), then its streams."""
        primary = await start_primary(
            self.vhost,
            expected,
            epoch=self.epoch_store.current,
            lineage=self.lineage,
            identity=self.identity,
            replicate_default=self.replicate_default,
            clock=self.context.clock,
            auto_delete_grace=self.options.ha_backup_timeout,
            timings=self._promotion_steps,
        )
        self.primary = primary
        events = BackupEventsToRole(
            primary,
            self.role,
            self.handle,
            link_gone=self.lease.leases.link_gone,
            errors=self.backup_errors,
            log=self.log_,
        )
        self.streams = PrimaryStreams(primary, events, self.formats)
        self.streams.rows = self.rows  # the snapshots' rows, encoded ahead
        self.streams.link_user = self.options.ha_username  # links only from that user
        self.streams.lease_events = self.lease  # the member lease's grants
        self.streams.users.serve(self.context.authenticator.cluster_users)  # format 4's links
        # replication streams; declare-ok and friends after the backups
        self.context.attach(streams=self.streams, barrier=self.streams)
        self.vhost.listeners.append(PrimaryListener(primary, events.queue_deleted))
        orphans = primary.orphans.waiting(self.context.clock())
        if orphans:
            self.log_.info("ha_orphan_queues", queues=orphans)
        now = self.context.clock()
        self.lease.promoted(self.epoch_store.current, now, self._ended)  # its own grant
        self.handle(PrimaryStarted(self.url, primary.replicated_queue_names(), now))
        self.lease.start()
        self.handle(Tick(now, self.grants_until()))  # active at once when nobody is expected

    def now(self) -> float:
        return self.context.clock()

    def last_members(self) -> list[dict[str, Any]]:
        return self.backup.last_members()

    @property
    def link(self) -> BackupLink | None:
        """The backup's link to the primary, while a backup."""
        return self.backup.link

    def store_write_failed(self, error: str) -> None:
        """A store write failed: a backup stops; a primary nacked (``BackupSide``)."""
        self.backup.store_write_failed(error)

    # -- status ------------------------------------------------------------------------
    def membership(self) -> list[dict[str, Any]]:
        return member_dicts(self.role.members())

    def snapshot(self) -> HaSnapshot:
        """This broker at one instant, as ``GET /api/ha`` shows it."""
        role, primary, now, link = self.role, self.primary, self.now(), self.link
        until = self.lease_until
        return HaSnapshot(
            state=self.state,
            epoch=self.epoch,
            broker_id=self.broker_id,
            cluster_id=self.identity.cluster_id,
            replication_formats=self.formats.text,
            url=self.url,
            public_url=self.public_url,
            primary=self.primary_address if primary is None else self.url,
            members=self.membership() if primary is not None else self.last_members(),
            held_confirms=primary.held_confirms() if primary else 0,
            lease_remaining=None if until is None else round(max(0.0, until - now), 3),
            orphan_queues=primary.orphans.waiting(now) if primary else {},
            backups=(
                ()
                if primary is None or self.streams is None
                else backup_snapshots(role, primary, self.backup_errors)
            ),
            in_sync=self.in_sync_status() if primary is not None else None,
            member_lease=self.lease_status(),
            replication_errors=self.backup_errors.views(role.ready),  # not those ready again
            refused_links=self.admission.refused_links() if primary is not None else [],
            link_error=link.link_error() if link is not None else None,
            replication_error=link.replication_error() if link is not None else None,
        )

    def status_rows(self, ordered: bool = True) -> HaRows:
        """What the status view lists a row of (:func:`broker.ha.ha_status.rows_of`)."""
        streams = None if self.primary is None else self.streams
        return rows_of(self.link, self.vhost, self.role, streams, ordered)

    def status(self) -> dict[str, Any]:
        """What GET /api/ha shows, at once (:meth:`status_steps`)."""
        return run_steps(self.status_steps())

    def status_steps(
        self, rows: bool = True, positions: bool | None = None
    ) -> Steps[dict[str, Any]]:
        """:meth:`status` in slices (:func:`broker.ha.ha_status.ha_status_steps`); ``rows``
        False: without the per-queue rows (``positions``: but with each backup's)."""
        self.take_offered_lease()
        return ha_status_steps(self, rows, positions)
