"""The agent: one per node, the cluster resource manager of seed 001 on ZooKeeper.

:Status: Beta

The shell around :func:`ha_agent.promotion.decide`. One loop thread owns everything; other
threads (kazoo's, the election's, the session watcher's, the broker supervisor's) only put
events on its queue, except the fence, which must not wait for the loop (see below).

Every ``check_interval`` (and at once on any event) the loop

1. checks the broker (``/api/status``, ``/api/ha``);
2. on the primary's node, keeps the in-sync set (below);
3. reads the members, the primary record and the in-sync set from ZooKeeper and publishes
   its own member record when it changed;
4. asks :func:`~ha_agent.promotion.decide` what to do, logs why when that changes, and
   carries out the actions: contend / withdraw (kazoo's Election recipe), promote (next
   epoch from ZooKeeper, the in-sync set at that epoch, ``POST /api/ha/promote``, then the
   primary record), take the virtual IP, fence, watchdog kill.

The in-sync set (:mod:`ha_agent.in_sync`, issue 10): the agent of the primary reads its
broker's ``in_sync`` and the committed set (with its version), writes
:func:`~ha_agent.promotion.isr_update` when it changes (conditionally on that version, only
while the set's epoch is the one it promoted its broker with), and then, when the committed
set leaves out backups whose removal the broker waits for, tells the broker
(``POST /api/ha/in-sync``) so it releases the confirms it holds for them. A promotion
re-checks eligibility against a fresh read of the set and writes the set at the new epoch
(conditionally) before it promotes the broker with the members to expect.

Fresh views (issue 10, item 4): the check sends the broker check first and reads ZooKeeper
after it, so the broker view is the older of the two. The agent notes when its ZooKeeper
connection was last established (a kazoo listener, before any answer on that connection)
and when it last killed its broker or saw it exit (:class:`~ha_agent.watchdog.BrokerWatch`,
also the watchdog's clock); :func:`~ha_agent.promotion.decide` refuses to act on a broker
view read before either and asks for :attr:`~ha_agent.promotion.Step.RECHECK`: the loop
reads the broker again at once and decides with the cluster as just read.

Fencing (docs/agent.md has the timing argument): the :class:`~ha_agent.fencing.SessionWatcher`
calls :meth:`Agent._session_fenced` in its own thread when the lease on the ZooKeeper
session runs out (``T - M`` after the last answered request) or on LOST. If this agent leads
or its broker is the primary, that call kills the broker and drops the virtual IP at once,
before the session can expire and another agent win; the loop then withdraws.

Error Handling
==============

- ZooKeeper calls that fail (connection loss, retries exhausted) are logged
  (``zookeeper_error``) and tried again at the next check; the session guard fences in time
  whatever the loop is doing.
- A promotion the broker refuses (409: catching up, older epoch) is logged
  (``promotion_refused``) and the agent resigns.
- A virtual IP that cannot be added is logged (``vip_failed``) and the agent resigns: a
  primary clients cannot reach is no primary.
- An in-sync write that loses a race (another write since the read) is logged
  (``in_sync_conflict``) and read again at the next check; a removal is posted to the broker
  only once a write or a read shows it committed. A set at a newer epoch than the broker's
  fences the broker (:func:`~ha_agent.promotion.decide`). A set that cannot be parsed is
  logged (``in_sync_record_invalid``) and lets no backup contend.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState

from broker.management.client import ManagementError
from common.log import set_log_context
from ha_agent.broker_check import BrokerCheck, PromoteRefused
from ha_agent.election import LeaderElection
from ha_agent.epoch_counter import next_epoch
from ha_agent.fencing import Fence, SessionGuard, SessionWatcher
from ha_agent.in_sync import (
    InSyncEpochError,
    InSyncRecordError,
    VersionedInSync,
    read_in_sync,
    write_in_sync,
)
from ha_agent.membership import Member, MemberPublisher, read_members
from ha_agent.primary_record import delete_primary, read_primary, write_primary
from ha_agent.promotion import (
    Action,
    BrokerInSync,
    BrokerView,
    ClusterView,
    InSyncMember,
    InSyncRecord,
    PrimaryRecord,
    Step,
    decide,
    eligibility,
    isr_update,
    promotion_in_sync,
    releasable,
)
from ha_agent.supervisor import BrokerSupervisor, kill_pid
from ha_agent.vip import VipError, VirtualIp
from ha_agent.watchdog import BrokerWatch
from ha_agent.zk_layout import check_name

__all__ = ["Agent", "AgentSettings"]

_log = structlog.get_logger("ha_agent.agent", component="agent")

#: The longest a promotion call may take (seconds); also bounded by the lease.
PROMOTE_TIMEOUT = 5.0

#: kazoo reconnects quickly (its default backs off to a minute).
CONNECTION_RETRY = {"max_tries": -1, "delay": 0.05, "backoff": 1.5, "max_delay": 0.5}


@dataclass
class AgentSettings:
    zk_hosts: str
    cluster: str
    node: str
    broker: str  # management address of the local broker, [user/password@]host:port
    broker_command: str | None = None
    broker_log: str | None = None  # where a supervised broker's stdout/stderr go
    session_timeout: float = 4.0
    check_interval: float = 0.5
    cluster_size: int = 1
    vip: str | None = None
    vip_interface: str | None = None
    vip_netns: str | None = None  # run the ip commands in this namespace (tests)
    watchdog_timeout: float = 10.0
    extra: dict[str, Any] = field(default_factory=dict)

    def check(self) -> None:
        """ValueError naming the first bad value."""
        check_name("cluster", self.cluster)
        check_name("node", self.node)
        if not self.zk_hosts.strip():
            raise ValueError("--zk: no ZooKeeper address given")
        if not 1 <= self.session_timeout <= 60:
            raise ValueError(f"--session-timeout must be 1 to 60 s: {self.session_timeout!r}")
        if not 0 < self.check_interval <= self.session_timeout / 2:
            raise ValueError(
                f"--check-interval must be positive and at most half the session timeout: "
                f"{self.check_interval!r}"
            )
        if self.cluster_size < 1:
            raise ValueError(f"--cluster-size must be at least 1: {self.cluster_size!r}")
        if self.watchdog_timeout < 0:
            raise ValueError(f"--watchdog-timeout must be 0 (off) or more: {self.watchdog_timeout}")
        if (self.vip is None) != (self.vip_interface is None):
            raise ValueError("--vip and --vip-interface go together")


class Agent:
    """See the module docstring. :meth:`run` until :meth:`stop`."""

    def __init__(self, settings: AgentSettings) -> None:
        settings.check()
        self.settings = settings
        self.broker_check = BrokerCheck(
            settings.broker, timeout=min(2.0, settings.check_interval * 4)
        )
        self.vip = (
            VirtualIp(settings.vip, settings.vip_interface, netns=settings.vip_netns)
            if settings.vip is not None and settings.vip_interface is not None
            else None
        )
        self.events: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self._stop = threading.Event()
        self.client: Any = None
        self.election: LeaderElection | None = None
        self.watcher: SessionWatcher | None = None
        self.publisher: MemberPublisher | None = None
        self.supervisor: BrokerSupervisor | None = None
        self.view: BrokerView | None = None
        #: the broker's answers, kills and exits (the watchdog's clock, a view's freshness);
        #: written by the loop, the session watcher and the supervisor: under _watch_lock
        self.watch = BrokerWatch()
        self._watch_lock = threading.Lock()
        #: when the ZooKeeper connection was last established (kazoo's thread writes it)
        self.connected_at: float | None = None
        self.last_pid: int | None = None
        self.promoted_epoch: int | None = None
        self.members: dict[str, Member] = {}
        self.primary: PrimaryRecord | None = None
        #: the committed in-sync set as last read or written (None: none recorded)
        self.in_sync: VersionedInSync | None = None
        self.in_sync_error = ""
        self._in_sync_posted: tuple[int, int, tuple[str, ...]] | None = None
        self.cluster_view: ClusterView | None = None
        self._eligibility = ""
        self._fence_lock = threading.Lock()

    # -- lifecycle --------------------------------------------------------------------
    def stop(self) -> None:
        self._stop.set()
        self.events.put(("stop", None))

    def run(self) -> int:
        s = self.settings
        set_log_context(cluster=s.cluster, node=s.node, component="agent")
        _log.info(
            "agent_started",
            zk=s.zk_hosts,
            broker=self.broker_check.address,
            supervise=s.broker_command is not None,
            session_timeout=s.session_timeout,
            cluster_size=s.cluster_size,
            vip=s.vip,
        )
        if s.broker_command is not None:
            self.supervisor = BrokerSupervisor(
                s.broker_command,
                on_exit=self._broker_exited,
                log_file=s.broker_log,
            ).start()
        self.client = KazooClient(
            hosts=s.zk_hosts,
            timeout=s.session_timeout,
            connection_retry=dict(CONNECTION_RETRY),
            command_retry={"max_tries": 3, "delay": 0.05, "max_delay": 0.5},
        )
        self.client.add_listener(self._zookeeper_state)
        try:
            self._connect()
            guard = SessionGuard(s.session_timeout)
            self.watcher = SessionWatcher(self.client, guard, self._session_fenced).start()
            self.election = LeaderElection(
                self.client,
                s.cluster,
                s.node,
                on_leading=lambda: self.events.put(("won", None)),
                on_ended=lambda reason: self.events.put(("ended", reason)),
            )
            self._loop()
        finally:
            self._shutdown()
        return 0

    def _connect(self) -> None:
        while not self._stop.is_set():
            try:
                self.client.start(timeout=self.settings.session_timeout)
                return
            except KazooTimeoutError:
                _log.warning("zookeeper_unreachable", zk=self.settings.zk_hosts)
                self.client.stop()

    def _zookeeper_state(self, state: str) -> bool:
        """kazoo's listener (its thread, never blocks): note when a connection is
        established. kazoo calls it before it reads any answer on that connection, so every
        cluster read answered over it comes later."""
        if state == KazooState.CONNECTED:
            self.connected_at = time.monotonic()
        return False

    def _broker_exited(self, code: int) -> None:
        """The supervisor's call (its thread), before it restarts the broker."""
        self._reset_watch()
        self.events.put(("broker_exited", code))

    def _reset_watch(self) -> None:
        """The broker was killed or exited: its silence counts again once it answered, and
        views read before now are stale."""
        with self._watch_lock:
            self.watch.reset(time.monotonic())

    def _shutdown(self) -> None:
        _log.info("agent_stopping")
        if self.watcher is not None:
            self.watcher.stop()  # before the client: stopping a client reports LOST
        leading = self.election is not None and self.election.leading
        if leading or (self.view is not None and self.view.is_primary):
            # The broker stops serving first; only then may another agent win.
            self._drop_vip()
            if self.supervisor is not None:
                self.supervisor.stop()
            else:  # nobody would stop an unmanaged primary: never leave one serving
                self._kill_broker("agent stopping while its broker is the primary")
            with contextlib.suppress(KazooException, KazooTimeoutError):
                delete_primary(self.client, self.settings.cluster)
        if self.election is not None:
            self.election.cancel(timeout=2.0)
        if self.publisher is not None:
            with contextlib.suppress(KazooException, KazooTimeoutError):
                self.publisher.withdraw()
        if self.supervisor is not None:
            self.supervisor.stop()
        with contextlib.suppress(Exception):
            self.client.stop()
            self.client.close()
        _log.info("agent_stopped")

    # -- the loop ---------------------------------------------------------------------
    def _loop(self) -> None:
        interval = self.settings.check_interval
        next_check = time.monotonic()
        while not self._stop.is_set():
            timeout = max(0.0, next_check - time.monotonic())
            try:
                kind, _value = self.events.get(timeout=timeout)
            except queue.Empty:
                kind, _value = "tick", None
            if kind == "stop":
                return
            if kind == "ended":
                self.promoted_epoch = None
            # Won, the supervised broker died, or the last view was stale: act on the
            # broker's state at once, with the cluster as last read (the broker refuses a
            # promotion it may not take).
            at_once = kind in ("won", "broker_exited", "recheck")
            self._check(read_cluster=not at_once)
            if at_once:
                continue  # the regular check follows on time
            next_check = time.monotonic() + interval

    def _check(self, read_cluster: bool = True) -> None:
        sent = time.monotonic()
        view = self.broker_check.check()
        now = time.monotonic()
        if view is not None:
            with self._watch_lock:
                counted = self.watch.answered(sent, now)
            if counted and view.pid is not None:
                self.last_pid = view.pid
        old = self.view
        self.view = view
        in_sync_read = False
        if view is not None and view.is_primary and self.promoted_epoch is not None:
            self._renew_lease()  # first: a slow ZooKeeper below must not delay it
            in_sync_read = self._keep_in_sync(view, self.promoted_epoch)
        if (old is None) != (view is None) or (
            old is not None and view is not None and old.ha_state != view.ha_state
        ):
            _log.info(
                "broker_state",
                ha_state=None if view is None else view.ha_state,
                broker_epoch=None if view is None else view.epoch,
                reason=self.broker_check.last_error or None,
            )
        if read_cluster:
            self._read_cluster(view, read_in_sync_set=not in_sync_read)
        election = self.election
        assert election is not None and self.watcher is not None
        now = time.monotonic()
        with self._watch_lock:
            silent_for, reset_at = self.watch.silent_for(now), self.watch.reset_at
        cluster_view = ClusterView(
            node=self.settings.node,
            broker=view,
            members=self.members,
            primary=self.primary,
            leadership=election.state.value,
            promoted=self.promoted_epoch is not None,
            session_ok=self.watcher.guard.state.value != "fenced",
            cluster_size=self.settings.cluster_size,
            broker_silent_for=silent_for,
            watchdog_timeout=self.settings.watchdog_timeout,
            in_sync=None if self.in_sync is None else self.in_sync.record,
            in_sync_error=self.in_sync_error,
            broker_read_at=sent,
            connected_at=self.connected_at,
            broker_reset_at=reset_at,
        )
        self.cluster_view = cluster_view
        decision = decide(cluster_view)
        if decision.steps == (Step.RECHECK,):
            _log.info("broker_recheck", reason=decision.eligibility)
            self.events.put(("recheck", None))
            return
        if decision.eligibility != self._eligibility:
            self._eligibility = decision.eligibility
            _log.info("promotion_eligibility", reason=decision.eligibility)
        for action in decision.actions:
            self._act(action, view)

    def _read_cluster(self, view: BrokerView | None, read_in_sync_set: bool = True) -> None:
        s = self.settings
        member = Member(
            node=s.node,
            broker_url=(view.url if view is not None and view.url else self.broker_check.address),
            ha_state="down" if view is None else view.ha_state,
            epoch=0 if view is None else view.epoch,
            store_status="unknown" if view is None else view.store_status,
            replication_position=0 if view is None else view.replication_position,
            broker_id="" if view is None else view.broker_id,
        )
        sent = time.monotonic()
        try:
            if self.publisher is None:
                publisher = MemberPublisher(self.client, s.cluster, member)
                publisher.publish(timeout=s.session_timeout * 1.5)
                self.publisher = publisher
            elif self.publisher.member != member:
                changes = {k: getattr(member, k) for k in asdict(member) if k != "node"}
                self.publisher.update(**changes)
            self.members = read_members(self.client, s.cluster)
            self.primary = read_primary(self.client, s.cluster)
            if read_in_sync_set:
                self._read_in_sync()
        except (KazooException, KazooTimeoutError) as exc:
            _log.warning("zookeeper_error", reason=repr(exc))
            return
        assert self.watcher is not None
        self.watcher.note_contact(sent)

    def _read_in_sync(self) -> VersionedInSync | None:
        """Read the committed in-sync set into :attr:`in_sync` (kazoo errors propagate)."""
        try:
            self.in_sync = read_in_sync(self.client, self.settings.cluster)
        except InSyncRecordError as exc:
            if str(exc) != self.in_sync_error:
                _log.error("in_sync_record_invalid", reason=str(exc))
            self.in_sync, self.in_sync_error = None, str(exc)
            return None
        self.in_sync_error = ""
        return self.in_sync

    # -- the in-sync set (this agent's broker is the primary) -------------------------
    def _keep_in_sync(self, view: BrokerView, epoch: int) -> bool:
        """Bring the committed in-sync set in line with the broker's, then tell the broker
        which removals are committed. True when the set was read (the loop need not read
        it again); any ZooKeeper error is logged and the next check tries again."""
        broker = view.in_sync
        if broker is None or view.epoch != epoch:
            return False  # a broker without the set, or not yet at the promoted epoch
        try:
            read = self._read_in_sync()
            if self.in_sync_error:
                return True
            if read is not None and read.record.epoch != epoch:
                # A newer epoch: another primary owns the set, decide() fences. An older
                # one cannot follow a promotion that wrote its own: touch nothing.
                _log.warning("in_sync_epoch_mismatch", in_sync_epoch=read.record.epoch)
                return True
            committed = self._update_in_sync(read, broker, epoch)
        except (KazooException, KazooTimeoutError) as exc:
            _log.warning("zookeeper_error", reason=repr(exc), during="in_sync")
            return False
        if committed is not None:
            self._post_in_sync(committed, broker)
        return True

    def _update_in_sync(
        self, read: VersionedInSync | None, broker: BrokerInSync, epoch: int
    ) -> VersionedInSync | None:
        """The committed set after writing the update, if any; None when a write lost a race
        (nothing is known committed then)."""
        old = None if read is None else read.record
        members = isr_update(old, broker)
        if members is None:
            assert old is not None and read is not None
            # Same set; name a member recorded before its agent published its broker id
            # (names are only shown: this write changes no member).
            named = tuple(self._named(m, broker) for m in old.members)
            if named == old.members:
                return read
            members, record = tuple(sorted(old.broker_ids)), InSyncRecord(epoch, named)
        else:
            kept = {} if old is None else {m.broker_id: m for m in old.members}
            record = InSyncRecord(
                epoch,
                tuple(self._named(kept.get(i) or InSyncMember(i), broker) for i in members),
            )
        try:
            committed = write_in_sync(self.client, self.settings.cluster, record, read)
        except (BadVersionError, NodeExistsError, InSyncEpochError) as exc:
            _log.warning("in_sync_conflict", reason=repr(exc))
            return None
        before = set() if old is None else old.broker_ids
        self.in_sync = committed
        _log.info(
            "in_sync_changed",
            added=sorted(set(members) - before),
            removed=sorted(before - set(members)),
            members=[m.node or m.broker_id for m in record.members],
            in_sync_epoch=epoch,
            version=committed.version,
        )
        return committed

    def _named(self, entry: InSyncMember, broker: BrokerInSync) -> InSyncMember:
        """``entry`` with its node and URL filled in where unknown, from the member records
        (by broker id) and the broker's list of backups (they are only shown)."""
        if entry.node and entry.url:
            return entry
        bid = entry.broker_id
        member = next((m for m in self.members.values() if m.broker_id == bid), None)
        node = entry.node or (member.node if member is not None else "")
        url = entry.url or dict(broker.urls).get(bid) or (member.broker_url if member else "")
        return InSyncMember(bid, node, url)

    def _post_in_sync(self, committed: VersionedInSync, broker: BrokerInSync) -> None:
        """Tell the broker the committed set when it leaves out backups whose held
        confirms wait for their removal (only a committed record gets here)."""
        released = releasable(committed.record, broker)
        if not released:
            return
        record = committed.record
        members = sorted(record.broker_ids)
        try:
            answer = self.broker_check.commit_in_sync(record.epoch, members)
        except (PromoteRefused, ManagementError) as exc:
            _log.warning("in_sync_post_failed", reason=str(exc))
            return
        key = (record.epoch, committed.version, released)
        if key != self._in_sync_posted:
            self._in_sync_posted = key
            _log.info(
                "in_sync_committed",
                in_sync_epoch=record.epoch,
                version=committed.version,
                members=members,
                removed=list(released),
                released=answer.get("released"),
                pending_removal=answer.get("pending_removal"),
            )

    # -- actions ----------------------------------------------------------------------
    def _act(self, action: Action, view: BrokerView | None) -> None:
        election = self.election
        assert election is not None
        step = action.step
        if step is Step.CONTEND:
            election.contend()
        elif step is Step.WITHDRAW:
            _log.info("election_withdraw", reason=action.reason)
            self._resign()
        elif step is Step.PROMOTE:
            assert view is not None
            self._promote(view, action.reason)
        elif step is Step.TAKE_VIP:
            # Only after a promotion that succeeded: a failed one has just resigned.
            if self.vip is not None and not self.vip.held and self.promoted_epoch is not None:
                try:
                    self.vip.take()
                except (VipError, OSError) as exc:
                    _log.error("vip_failed", reason=str(exc))
                    self._fence("cannot take the virtual IP")
        elif step is Step.FENCE:
            self._fence(action.reason)
        elif step is Step.KILL_BROKER:
            self._kill_broker(f"watchdog: {action.reason}")

    def _resign(self) -> None:
        election = self.election
        assert election is not None
        if self.promoted_epoch is not None:
            with contextlib.suppress(KazooException, KazooTimeoutError):
                delete_primary(self.client, self.settings.cluster)
        self.promoted_epoch = None
        election.cancel(timeout=1.0)

    def _promote(self, view: BrokerView, reason: str) -> None:
        s = self.settings
        started = time.monotonic()
        answer: dict[str, Any] | None = None
        try:
            in_sync = self._take_in_sync(view)
            if in_sync is None:
                self._resign()
                return
            epoch, expected = in_sync
            lease = self._lease()
            if lease is None:
                raise PromoteRefused("no lease left on the ZooKeeper session")
            # The promotion must be over well within the lease; past it, its outcome is
            # unknown (see below).
            timeout = min(PROMOTE_TIMEOUT, max(0.5, lease * 0.8))
            try:
                answer = self.broker_check.promote(epoch, lease, timeout=timeout, in_sync=expected)
            except ManagementError as exc:
                # No answer: the broker may yet become primary after this agent resigned,
                # beside the next one. Fence it (it restarts as a backup), then resign.
                _log.warning("promotion_failed", reason=str(exc))
                self._fence(f"promotion of unknown outcome: {exc}")
                return
            record = PrimaryRecord(s.node, epoch, view.url)
            write_primary(self.client, s.cluster, record, s.vip)
        except PromoteRefused as exc:
            _log.warning("promotion_refused", reason=str(exc))
            self._resign()
            return
        except (KazooException, KazooTimeoutError) as exc:
            if isinstance(exc, NodeExistsError):
                _log.error("primary_record_conflict", reason=str(exc))
            else:
                _log.warning("promotion_failed", reason=repr(exc))
            if answer is not None:
                # promoted, but not recorded: another agent must not meet it serving
                self._fence("promoted, but the primary record could not be written")
            else:
                self._resign()
            return
        self.promoted_epoch = epoch
        set_log_context(epoch=epoch)
        _log.info(
            "agent_promoted",
            new_epoch=epoch,
            ha_state=answer.get("state"),
            reason=reason,
            took_ms=round((time.monotonic() - started) * 1000, 3),
        )

    def _take_in_sync(self, view: BrokerView) -> tuple[int, list[str]] | None:
        """Before a promotion: read the in-sync set, check eligibility against it, take the
        next epoch and commit the set at that epoch (conditionally on the version read).
        Returns the epoch and the broker ids the new primary must expect; None (logged)
        when this broker may not be promoted after all or the write lost a race. kazoo's
        connection errors propagate (nothing promoted yet)."""
        s = self.settings
        read = self._read_in_sync()
        assert self.cluster_view is not None
        fresh = replace(
            self.cluster_view,
            broker=view,
            in_sync=None if read is None else read.record,
            in_sync_error=self.in_sync_error,
        )
        eligible, why = eligibility(fresh)
        if not eligible:
            _log.info("election_withdraw", reason=f"won the election, but {why}")
            return None
        epoch = next_epoch(self.client, s.cluster, minimum=view.epoch + 1)
        _log.info("epoch_taken", new_epoch=epoch, reason=why)
        record = InSyncRecord(epoch, promotion_in_sync(None if read is None else read.record, view))
        try:
            committed = write_in_sync(self.client, s.cluster, record, read)
        except (BadVersionError, NodeExistsError, InSyncEpochError) as exc:
            _log.warning("in_sync_conflict", reason=repr(exc), new_epoch=epoch)
            return None
        self.in_sync = committed
        _log.info(
            "in_sync_changed",
            added=[],
            removed=sorted((set() if read is None else read.record.broker_ids) - record.broker_ids),
            members=[m.node or m.broker_id for m in record.members],
            in_sync_epoch=epoch,
            version=committed.version,
        )
        return epoch, sorted(record.broker_ids)

    def _lease(self) -> float | None:
        """What is left of this agent's lease on its ZooKeeper session (seconds), the time
        its broker may serve without another word from it; None when nothing is left."""
        watcher = self.watcher
        deadline = None if watcher is None else watcher.guard.deadline
        if deadline is None:
            return None
        left = deadline - time.monotonic()
        return left if left > 0 else None

    def _renew_lease(self) -> None:
        lease = self._lease()
        if lease is None:
            return  # the session guard fences; the broker's lease runs out by itself
        try:
            self.broker_check.renew_lease(lease)
        except (PromoteRefused, ManagementError) as exc:
            _log.warning("lease_renewal_failed", reason=str(exc))

    def _kill_broker(self, reason: str) -> bool:
        """SIGKILL the broker (any reason: fence, watchdog, shutdown), then reset the watch:
        the broker that comes back is new (its silence counts once it answered)."""
        try:
            if self.supervisor is not None:
                return self.supervisor.kill(reason)
            pid = self.view.pid if self.view is not None else None
            pid = pid or self.last_pid
            return pid is not None and kill_pid(pid, reason)
        finally:
            self._reset_watch()  # after the signal: no answer sent later is the old broker's

    def _drop_vip(self) -> None:
        if self.vip is not None:
            try:
                self.vip.drop()
            except (VipError, OSError) as exc:
                _log.error("vip_failed", reason=str(exc))

    def _fence(self, reason: str) -> None:
        """Stop the broker serving (kill it; it restarts as a backup), drop the VIP, resign."""
        with self._fence_lock:
            _log.warning("agent_fenced", reason=reason)
            self._kill_broker(f"fenced: {reason}")
            self._drop_vip()
        self._resign()
        self.view = None

    def _session_fenced(self, fence: Fence) -> None:
        """The session watcher's call (its own thread): the lease on the session ran out."""
        election = self.election
        leading = election is not None and election.leading
        primary = self.view is not None and self.view.is_primary
        _log.warning(
            "zookeeper_session_fence",
            reason=fence.reason,
            leading=leading,
            broker_primary=primary,
        )
        if leading or primary:
            with self._fence_lock:
                self._kill_broker(f"fenced: ZooKeeper {fence.reason}")
                self._drop_vip()
        self.events.put(("session_fenced", fence.reason))
