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
   carries out the actions: contend / withdraw (a claim that waits for the takeover rule,
   :mod:`ha_agent.primary_claim`), promote (one ZooKeeper multi-op: the next epoch, the
   in-sync set at that epoch and the primary record; then ``POST /api/ha/promote``), take
   the virtual IP, fence, watchdog kill.

The agent owns its parts and calls them (the fencer calls back only to reset the broker's
watch): its settings (:mod:`ha_agent.settings`); the in-sync set, kept on the primary's node
and taken at a promotion (:class:`~ha_agent.in_sync_keeper.InSyncKeeper`, issue 10); the
promotion steps and the broker's lease (:class:`~ha_agent.promoter.Promoter`: it returns
what came of a promotion for the agent to carry out); the kill and the virtual IP
(:class:`~ha_agent.fencer.Fencer`); what it has seen of its broker and which instance a
kill means (:class:`~ha_agent.local_broker.LocalBroker`, issue 25); the back-off of
silence fences in a cascade and the reason it decides by, logged and published for
operators (:class:`~ha_agent.agent_report.AgentReport`); the backups' link hints, its own
published and the others' watched (:class:`~ha_agent.agent_hints.AgentHints`); its member
record and the cluster's records as last read, with when
(:class:`~ha_agent.cluster_reader.ClusterReader`); its own stop and a cluster shutdown's
(:class:`~ha_agent.agent_shutdown.AgentShutdown`).

Slow is not dead (issue 25): each check reads the broker's liveness, answered off the
broker's event loop, before its status; a broker whose loop progresses is busy, not silent,
and its lease is renewed off its loop too.

Fresh views (issue 10, item 4): the check sends the broker check first and reads ZooKeeper
after it, so the broker view is the older of the two. The agent notes when its ZooKeeper
connection was last established (a kazoo listener, before any answer on that connection)
and when it last killed its broker or saw it exit (:class:`~ha_agent.watchdog.BrokerWatch`,
also the watchdog's clock); :func:`~ha_agent.promotion.decide` refuses to act on a broker
view read before either and asks for :attr:`~ha_agent.promotion.Step.RECHECK`: the loop
reads the broker again at once and decides with the cluster as just read. The cluster's
records are fresh only when their last successful read was sent after that connection (a
read that fails leaves the older ones): on older ones nothing is decided but what the
session and the broker's answer decide alone, until the next check reads them again.

Fencing (docs/agent.md has the timing argument): the :class:`~ha_agent.fencing.SessionWatcher`
calls :meth:`Agent._session_fenced` in its own thread when the lease on the ZooKeeper
session runs out (``T - M`` after the last answered request) or on LOST. If this agent leads
or its broker is the primary, that call kills the broker and drops the virtual IP at once
(:meth:`~ha_agent.fencer.Fencer.fence`),
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
- The in-sync set's and the promotion's own errors: :mod:`ha_agent.in_sync_keeper`,
  :mod:`ha_agent.promoter`.
- A cluster shutdown and the agent's own stop: :mod:`ha_agent.agent_shutdown`.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from typing import Any

import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState

from common.log import set_log_context
from ha_agent import listener_probe
from ha_agent import loop_events as loop
from ha_agent.agent_hints import AgentHints
from ha_agent.agent_report import AgentReport
from ha_agent.agent_shutdown import AgentShutdown
from ha_agent.broker_check import BrokerCheck, LivenessView
from ha_agent.cluster_reader import ClusterReader
from ha_agent.ended import record_reaped
from ha_agent.fencer import Fencer
from ha_agent.fencing import Fence, SessionGuard, SessionWatcher
from ha_agent.in_sync_keeper import InSyncKeeper
from ha_agent.local_broker import LocalBroker
from ha_agent.member_formats import MemberFormats
from ha_agent.primary_claim import PrimaryClaim
from ha_agent.primary_record import delete_primary
from ha_agent.promoter import Promoter
from ha_agent.promotion import Action, BrokerView, ClusterView, Step, decide
from ha_agent.reclaim import Reclaimer
from ha_agent.session_grant import GrantProbe, log_grant
from ha_agent.settings import AgentSettings
from ha_agent.supervisor import BrokerSupervisor
from ha_agent.takeover import TakeoverRule, default_rule
from ha_agent.vip import VirtualIp
from ha_agent.zk_auth import zk_security
from ha_agent.zk_connect import connect_until_stopped

__all__ = ["Agent", "AgentSettings"]

_log = structlog.get_logger("ha_agent.agent", component="agent")


#: kazoo reconnects quickly (its default backs off to a minute).
CONNECTION_RETRY = {"max_tries": -1, "delay": 0.05, "backoff": 1.5, "max_delay": 0.5}


class Agent:
    """See the module docstring. :meth:`run` until :meth:`stop`."""

    def __init__(self, settings: AgentSettings, takeover: TakeoverRule | None = None) -> None:
        settings.check()
        self.settings = settings
        self.broker_check = BrokerCheck(  # its own broker: refuses promotions by hand
            settings.broker, timeout=min(2.0, settings.check_interval * 4), agent=settings.node
        )
        #: when a candidate may take the primary record over: the old record gone, else its
        #: broker's grant to the old primary (which counted it) lapsed (ha_agent.takeover)
        self.takeover = takeover or default_rule(
            settings.node,
            self.broker_check.grant,
            self._link_down,
            reclaim_grace=settings.session_timeout,
            link_lost=lambda _primary, _epoch: self.events.put(loop.LinkLost()),
            accepts=listener_probe.accepts,
        )
        vip = (
            VirtualIp(settings.vip, settings.vip_interface, netns=settings.vip_netns)
            if settings.vip is not None and settings.vip_interface is not None
            else None
        )
        #: kills the broker, drops the VIP (the loop's thread and the session watcher's)
        self.fencer = Fencer(vip, on_kill=lambda: self.broker.reset(time.monotonic()))
        #: what other threads tell the loop (ha_agent.loop_events); only the loop takes
        self.events: queue.SimpleQueue[loop.LoopEvent] = queue.SimpleQueue()
        self._stop = threading.Event()
        self.client: Any = None
        self.election: PrimaryClaim | None = None
        self.watcher: SessionWatcher | None = None
        #: its member record, and the cluster's records as last read (made in run())
        self.reader: ClusterReader | None = None
        #: the broker's answers, its instances, its watch (the watchdog's clock, a view's
        #: freshness), which instance a kill means: the loop, the session watcher and the
        #: supervisor use it
        self.broker = LocalBroker(settings.broker_timeout)
        #: when the ZooKeeper connection was last established (kazoo's thread writes it)
        self.connected_at: float | None = None
        self.promoted_epoch: int | None = None
        #: the number of the claim it promoted under (PrimaryClaim.term; None: none)
        self.promoted_term: int | None = None
        #: takes the primary record back after a session lost while the broker served on
        #: its members' grants (issue 26, item 2)
        self.reclaimer = Reclaimer(settings.cluster, settings.node, settings.vip)
        #: the in-sync set (made in run() with the client)
        self.in_sync_keeper: InSyncKeeper | None = None
        #: the promotion steps and the lease (made in run() with the session watcher)
        self.promoter: Promoter | None = None
        self.cluster_view: ClusterView | None = None
        #: the session timeout ZooKeeper granted (None before the first connect answer)
        self.granted_timeout: float | None = None
        #: why the agent refused to run ("": it did not); run() then returns 2
        self.refusal = ""
        #: what it tells operators: its reason, its fence brake (log, status record)
        self.report = AgentReport(settings.node, settings.broker_timeout)
        #: the members' replication formats, as last told to a primary broker
        self.member_formats = MemberFormats()
        #: this agent's early hints (made in run() with the client)
        self.hints: AgentHints | None = None
        #: its own stop, and a cluster shutdown's (ha_agent.agent_shutdown)
        self.shutdown = AgentShutdown(
            self, settings.cluster, self.fencer, self.broker, self.broker_check, self.events
        )

    @property
    def session_timeout(self) -> float:
        """The session timeout the agent's timing counts: ZooKeeper's grant once known."""
        return self.granted_timeout or self.settings.session_timeout

    @property
    def supervisor(self) -> BrokerSupervisor | None:
        """The local broker's supervisor, when the agent runs its broker (set by :meth:`run`)."""
        return self.fencer.supervisor

    # -- lifecycle --------------------------------------------------------------------
    def stop(self) -> None:
        self._stop.set()
        self.events.put(loop.Stop())

    def run(self) -> int:
        """Run until :meth:`stop`; 0, or 2 when ZooKeeper's grant was refused
        (:attr:`refusal` says why)."""
        s = self.settings
        set_log_context(cluster=s.cluster, node=s.node, component="agent")
        _log.info(
            "agent_started",
            zk=s.zk_hosts,
            broker=self.broker_check.address,
            supervise=s.broker_command is not None,
            session_timeout=s.session_timeout,
            check_interval=s.check_interval,
            broker_timeout=s.broker_timeout,
            watchdog_timeout=s.watchdog_timeout,
            cluster_size=s.cluster_size,
            vip=s.vip,
        )
        # A virtual IP left on this node by an agent that died holding it (SIGKILL, node
        # loss) would make two holders on the LAN, and this node's own next take fail:
        # drop it; a leader takes it again once its broker is promoted.
        self.fencer.drop_vip()
        if s.broker_command is not None:
            self.fencer.supervisor = BrokerSupervisor(
                s.broker_command,
                on_exit=self.shutdown.broker_exited,
                log_file=s.broker_log,
            ).start()
        self.client = KazooClient(
            hosts=s.zk_hosts,
            timeout=s.session_timeout,
            connection_retry=dict(CONNECTION_RETRY),
            command_retry={"max_tries": 3, "delay": 0.05, "max_delay": 0.5},
            **zk_security(s.zk_auth, s.zk_tls),  # --zk-auth's digest and ACL, --zk-ssl*
        )
        self.client.add_listener(self._zookeeper_state)
        probe = GrantProbe(self.client, on_grant=self._granted)
        self.in_sync_keeper = InSyncKeeper(self.client, s.cluster, self.broker_check, s.node)
        try:
            if not connect_until_stopped(self.client, s, self._stop):
                return 0  # stopped before ZooKeeper answered
            granted = probe.wait(s.session_timeout)
            if granted is None or not self._judge(granted):
                return 2 if self.refusal else 0
            guard = SessionGuard(granted)
            self.watcher = SessionWatcher(self.client, guard, self._session_fenced).start()
            keeper = self.in_sync_keeper
            checker = self.broker_check
            self.promoter = Promoter(
                s, self.client, checker, keeper, guard, self.takeover, self.broker.heard
            )
            self.promoter.stopping = self._stop  # a promotion awaited ends at a stop
            self.hints = AgentHints(self.client, s.cluster, s.node, self.events, self._stop)
            self.hints.watch()
            reader = ClusterReader(
                self.client, s.cluster, s.node, checker.address, keeper, self.hints, self.report
            )
            self.reader = reader
            self.election = PrimaryClaim(  # the promotion's multi-op decides, not a lock
                self.client,
                s.cluster,
                s.node,
                self.promoter.takeover,
                lambda: (keeper.in_sync, reader.members),
                on_leading=lambda: self.events.put(loop.Won()),
                on_ended=lambda reason, term: self.events.put(loop.TermEnded(reason, term)),
            )
            interval = min(s.check_interval, self.session_timeout / 10)
            self.promoter.start_renewing(self._stop, interval, self._serves_promoted)
            self._loop()
        finally:
            self.shutdown.stop_agent()
        return 2 if self.refusal else 0

    def _link_down(self, primary: str, epoch: int) -> frozenset[str]:
        """The nodes whose link hints name ``primary`` at ``epoch`` (none before the run)."""
        return frozenset() if self.hints is None else self.hints.against(primary, epoch)

    def _serves_promoted(self) -> bool:
        """Does the broker this agent promoted serve (its lease is renewed between checks)?"""
        election = self.election  # its claim ended (LOST): the loop decides, no lease meanwhile
        leads = election is not None and election.leading
        return self.promoted_epoch is not None and leads and self.broker.serves()

    def _granted(self, seconds: float) -> None:
        """The probe's call (kazoo's connection thread, before CONNECTED is reported):
        the guard counts the grant from that CONNECTED on; the loop judges it."""
        previous, self.granted_timeout = self.granted_timeout, seconds
        if self.watcher is not None and previous is not None and seconds != previous:
            self.watcher.retime(seconds)
            self.events.put(loop.Granted(seconds))

    def _judge(self, granted: float) -> bool:
        """Log the grant; False (and :attr:`refusal`) when it is too far from the request."""
        self.refusal = log_grant(self.settings.session_timeout, granted)
        return not self.refusal

    def _zookeeper_state(self, state: str) -> bool:
        """kazoo's listener (its thread, never blocks): note when a connection is
        established. kazoo calls it before it reads any answer on that connection, so every
        cluster read answered over it comes later."""
        if state == KazooState.CONNECTED:
            self.connected_at = time.monotonic()
        return False

    # -- the loop ---------------------------------------------------------------------
    def _loop(self) -> None:
        interval = self.settings.check_interval
        next_check = time.monotonic()
        while not self._stop.is_set():
            timeout = max(0.0, next_check - time.monotonic())
            try:
                event: loop.LoopEvent = self.events.get(timeout=timeout)
            except queue.Empty:
                event = loop.CheckDue()
            match event:
                case loop.Stop():
                    return
                case loop.Granted(seconds) if not self._judge(seconds):
                    return  # refused: its shutdown fences a primary, as any stop does
                case loop.TermEnded(reason) as ended if ended.ends(self.promoted_term):
                    if reason == "session_lost":  # its next check may take the record back
                        self.reclaimer.session_lost(self.broker.view, self.promoted_epoch)
                    self.promoted_epoch = self.promoted_term = None
                # (an older claim's end, heard after a newer one promoted or took the record
                # back: nothing ended)
                case loop.Hinted() if not (self.hints and self.hints.hinted(self.promoted_epoch)):
                    continue  # not about this agent's primary: the regular check is on time
            # Won, the supervised broker died, or the last view was stale: act on the
            # broker's state at once, with the cluster as last read (the broker refuses a
            # promotion it may not take).
            at_once = isinstance(event, loop.AT_ONCE)
            self._check(read_cluster=not at_once)
            if at_once:
                continue  # the regular check follows on time
            next_check = time.monotonic() + interval

    def _check(self, read_cluster: bool = True) -> None:
        sent, now, view, live = self.broker.read(self.broker_check)
        old = self.broker.view
        self.broker.answered(sent, now, view)
        keeper, promoter, reader = self.in_sync_keeper, self.promoter, self.reader
        assert keeper is not None and promoter is not None and reader is not None
        election = self.election
        assert election is not None
        if self.promoted_epoch is not None and not election.leading:
            # Its claim ended under it (LOST: the session expired), heard before the
            # "ended" event: no renewal on the new session; take the record back if it may.
            self.reclaimer.session_lost(view, self.promoted_epoch)
            self.promoted_epoch = self.promoted_term = None
        if self.reclaimer.epoch is not None:
            done, epoch = self.reclaimer.take(self.client, view, election)
            if not done:
                return  # ZooKeeper not back yet: nothing is decided meanwhile
            if epoch is not None:  # the claim now leads again, resumed
                self.promoted_epoch, self.promoted_term = epoch, election.term
        in_sync_read = False
        if view is None and live is not None and live.is_primary and self.promoted_epoch:
            promoter.renew_lease()  # a busy primary: its lease is renewed off its loop too
        if view is not None and view.is_primary and self.promoted_epoch is not None:
            promoter.renew_lease()  # first: a slow ZooKeeper below must not delay it
            if self.shutdown.announced() is None:
                in_sync_read = keeper.keep(view, self.promoted_epoch, reader.members)
                self.member_formats.tell(self.broker_check, view.broker_id, reader.members)
            # else a cluster shutdown: its backups stop clean, each holding every confirmed
            # message; committing their removal would leave only this store a candidate for
            # the restart (the quiesced primary confirms nothing: it holds nothing for them)
        if (old is None) != (view is None) or (
            old is not None and view is not None and old.ha_state != view.ha_state
        ):
            _log.info(
                "broker_state",
                ha_state=None if view is None else view.ha_state,
                broker_epoch=None if view is None else view.epoch,
                reason=self.broker_check.last_error or None,
            )
        if self.shutdown.broker_stopping(view):
            return  # for a cluster shutdown: it resigned, nothing more is decided
        if read_cluster:  # its member record: a starved broker is not down
            self._read_cluster(self.broker.standing(), read_in_sync_set=not in_sync_read)
        election = self.election
        assert election is not None and self.watcher is not None
        now = time.monotonic()
        silent_for, reset_at = self.broker.silence(now)
        cluster_view = ClusterView(
            node=self.settings.node,
            broker=view,
            members=reader.members,
            primary=reader.primary,
            leadership=election.state.value,
            promoted=self.promoted_epoch is not None,
            session_ok=self.watcher.guard.state.value != "fenced",
            cluster_size=self.settings.cluster_size,
            broker_silent_for=silent_for,
            watchdog_timeout=self.settings.watchdog_timeout,
            broker_timed_out=view is None and self._slow_not_gone(live),
            broker_timeout=self.report.patience(now),
            in_sync=None if keeper.in_sync is None else keeper.in_sync.record,
            in_sync_error=keeper.error,
            format_error=reader.format_faults.error,
            broker_read_at=sent,
            connected_at=self.connected_at,
            broker_reset_at=reset_at,
            cluster_read_at=reader.read_at,
            node_loads=reader.node_loads,
        )
        self.cluster_view = cluster_view
        decision = decide(cluster_view)
        if decision.steps == (Step.RECHECK,):
            _log.info("broker_recheck", reason=decision.eligibility)
            self.events.put(loop.Recheck())
            return
        self.report.decided(decision.eligibility)
        for action in decision.actions:
            self._act(action, view)
        # after the actions: the claim this check started or ended is told at once
        self.report.claim = election.state.value
        self.report.publish(self.client, self.settings.cluster)

    def _slow_not_gone(self, live: LivenessView | None) -> bool:
        """The broker did not answer its check, but is not gone: its loop's progress was
        answered off the loop, or the check timed out while nothing refused the liveness
        probe. A refused liveness probe: nothing listens, the broker is gone."""
        check = self.broker_check
        return live is not None or (check.last_timed_out and not check.liveness_refused)

    def _read_cluster(self, view: BrokerView | None, read_in_sync_set: bool = True) -> None:
        """Its member record published, the cluster read (:class:`ClusterReader`); an
        answered read is contact with ZooKeeper for the session guard."""
        election, reader = self.election, self.reader
        assert reader is not None and self.watcher is not None
        leads = election is None or election.leading or self.promoted_epoch is not None
        sent = reader.read(view, leads, read_in_sync_set, self.session_timeout * 1.5)
        if sent is not None:
            self.watcher.note_contact(sent)

    # -- actions ----------------------------------------------------------------------
    def _act(self, action: Action, view: BrokerView | None) -> None:
        election = self.election
        assert election is not None
        step = action.step
        if step is Step.CONTEND:
            election.contend()
        elif step is Step.WITHDRAW:
            _log.info("election_withdraw", reason=action.reason)
            self.resign()
        elif step is Step.PROMOTE:
            assert view is not None
            self._promote(view, action.reason)
        elif step is Step.TAKE_VIP:
            # Only after a promotion that succeeded: a failed one has just resigned.
            if self.promoted_epoch is not None and not self.fencer.take_vip():
                self._fence("cannot take the virtual IP")
        elif step is Step.FENCE:
            self._fence(action.reason)
        elif step is Step.RESTART_BROKER and self.supervisor is not None:
            self.fencer.kill_broker(f"restart to join: {action.reason}", self.broker.last_pid)
        elif step is Step.KILL_BROKER:  # the instance whose silence the watchdog counted
            self.fencer.kill_broker(f"watchdog: {action.reason}", self.broker.last_pid)

    def resign(self) -> None:
        """Delete the primary record it may have written and end its claim."""
        election = self.election
        assert election is not None
        if self.promoted_epoch is not None or election.leading:  # its multi-op may have
            with contextlib.suppress(KazooException, KazooTimeoutError):  # recorded it
                delete_primary(self.client, self.settings.cluster)
        self.promoted_epoch = self.promoted_term = None
        self.broker.resigned()
        election.cancel(timeout=1.0)

    def _promote(self, view: BrokerView, reason: str) -> None:
        """Carry out a promotion (:class:`~ha_agent.promoter.Promoter`) and what came of it."""
        promoter = self.promoter
        assert promoter is not None and self.cluster_view is not None
        self.broker.promoting(view.pid)  # before the request: a fence meanwhile means it
        election = self.election
        locked = election is not None and election.locked
        promotion = promoter.promote(view, reason, self.cluster_view, locked)
        if promotion.epoch is not None and election is not None and not election.leading:
            # The term ended while the promotion ran (the session expired during a ZooKeeper
            # outage): the broker was promoted and recorded by a leader that no longer
            # leads. Void it: fence the broker, delete the record (issue 10, item 7: seen
            # at a 1 s session when the whole ensemble was lost; everybody waited for a
            # primary record whose agent did not lead).
            self.promoted_epoch = promotion.epoch
            self._fence("the election ended during the promotion")
        elif promotion.epoch is not None:
            self.promoted_epoch = promotion.epoch
            self.promoted_term = None if election is None else election.term
            if promotion.pid is not None:  # the instance said it: primary of that epoch
                self.broker.saw_primary(promotion.pid, promotion.broker_id, promotion.epoch)
        elif promotion.fence:
            self._fence(promotion.fence)
        else:
            self.resign()

    def _fence(self, reason: str) -> None:
        """Stop the broker serving (kill it; it restarts as a backup), drop the VIP, record
        the epochs it served as ended once its process is reaped (ha_agent.ended: before
        the primary record goes), resign."""
        target = self.broker.fence_target()
        self.fencer.fence(reason, target)
        supervisor = self.supervisor
        record_reaped(
            self.client,
            self.settings.cluster,
            self.settings.node,
            (target, *self.broker.served(target)),
            None if supervisor is None else supervisor.reaped,
            reason,
        )
        self.resign()
        self.broker.view = None

    def _session_fenced(self, fence: Fence) -> None:
        """The session watcher's call (its own thread): the lease on the session ran out."""
        election = self.election
        leading = election is not None and election.leading
        primary = self.broker.serves()
        # Asked afresh, and only so: the loop's view may be seconds old (its ZooKeeper reads
        # block), from before its broker was told its committed set: ZooKeeper lost within
        # a check of the set's commit, the agent would kill a primary that serves on its
        # members' grants (the broker's own lease fences it at their first lapse).
        on_grants = self.broker_check.serving_on_grants()
        _log.warning(
            "zookeeper_session_fence",
            reason=fence.reason,
            leading=leading,
            broker_primary=primary,
            broker_on_grants=on_grants,
        )
        if on_grants:
            # Issue 26, item 2: no renewal follows (the lease comes from this guard, now
            # fenced), and the broker's own lease ends no later than this one did. Past it,
            # it serves only while every member of its committed set grants, and fences
            # itself at the first lapse; a member is promoted only once its own grant
            # lapsed (docs/reliability.md). ZooKeeper's loss alone does not kill it.
            pass
        elif leading or primary:
            # The instance that may serve: the one promoted (or being promoted) or seen
            # primary; not a broker the supervisor started since (after a ZooKeeper outage
            # the loop's fence killed the restarted, joining broker: 4 of 4 cycles).
            target = self.broker.session_fence_target()
            self.fencer.fence(f"ZooKeeper {fence.reason}", target, announce=False)
        self.events.put(loop.SessionFenced(fence.reason))
