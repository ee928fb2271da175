"""The broker process: listeners, the periodic tick, and an orderly shutdown.

:class:`Broker` owns the virtual host and the AMQP listener (and the management HTTP API
when enabled). Shutdown follows uvicorn's order: stop accepting, send connection.close
320 (CONNECTION_FORCED) to every connection, give them ``grace`` seconds to answer, then
abort what is left.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from broker import __version__
from broker.amqp.context import BrokerContext, ConnectionSettings, Logger
from broker.amqp.new_sockets import NewSockets, Shift
from broker.amqp.protocol import AmqpProtocol
from broker.broker_security import BrokerSecurity
from broker.core.alarms import ResourceAlarms, memory_limit_bytes
from broker.core.errors import ReplyCode
from broker.core.paging import PagingBudget
from broker.core.vhost import VirtualHost
from broker.core.vhosts import VirtualHosts
from broker.ha.store_history import DISCARD_MARKER
from broker.listen import Listener, ListenError, serve
from broker.liveness_server import BrokerLiveness
from broker.options import BrokerOptions
from broker.security.cluster_users import FILE_NAME as CLUSTER_USERS_FILE
from broker.security.cluster_users import load as load_cluster_users
from broker.security.cluster_users import save as save_cluster_users
from broker.security.sasl import Authenticator, UserDatabase
from broker.store.data_dir import DataDir, DataDirError
from broker.store.journal import SyncPolicy
from broker.store.message_store import MessageStore
from broker.store.page_file import Pager
from broker.store.resource_monitor import ResourceMonitor, total_memory
from broker.store.store_open import open_store
from common.log import get_logger
from common.slices import SLICE, CallSoon, Steps, TurnBudget

if TYPE_CHECKING:
    from broker.ha.ha_broker import HaBroker
    from broker.ha.remote_queue_replication import QueueReplication

TICK_INTERVAL = 0.25
#: How long a fenced broker's stop waits for its clients' close-ok (seconds): it told each
#: connection to close when it fenced, confirms nothing more and serves nobody; a peer that
#: does not answer (a stopped backup's link) must not keep it up, with its "active" state
#: (issue 26: it stayed up 2 s, the stop's whole grace). Decides how long a stop takes only.
FENCED_GRACE = 0.2
#: Share of --max-memory that ready messages may take before queues page (RabbitMQ's 0.5).
PAGING_RATIO = 0.5


#: What a confirm of a persistent message may lose under each weaker --store-sync.


class Broker:
    """One qpidd broker (stand-alone)."""

    def __init__(self, options: BrokerOptions) -> None:
        self.options = options
        self.log = get_logger("broker")
        self.started_at = time.time()
        #: The virtual hosts; ``vhost`` is ``/``, the default one.
        self.vhosts = VirtualHosts(
            lambda name: VirtualHost(default_queue_limit=options.default_queue_limit, name=name)
        )
        self.vhost = self.vhosts.default
        self.vhosts.vhost_listeners.append(self)
        users = (
            UserDatabase.load(options.sasl_users) if options.sasl_users else UserDatabase.default()
        )
        authenticator = Authenticator(
            users, options.auth, frozenset(filter(None, options.loopback_users.split(",")))
        )
        # a vhost's max-queues, kept and replicated with the cluster's users
        self.vhosts.hold_limits(authenticator.cluster_users.limits)
        amqp_log = get_logger("amqp")
        #: TLS, the ACL, login back-off, reloads (ValueError: bad settings, exit 2)
        self.security = BrokerSecurity(options, authenticator, amqp_log, self.log)
        self.context = BrokerContext(
            vhost=self.vhost,
            vhosts=self.vhosts,
            authenticator=authenticator,
            settings=ConnectionSettings(
                frame_max=options.max_frame_size,
                channel_max=options.max_channels,
                heartbeat=int(options.heartbeat + 0.999) if options.heartbeat > 0 else 0,
                max_connections=options.max_connections,
                handshake_timeout=options.handshake_timeout,
                node_name=options.node_name,
                version=__version__,
            ),
            log=amqp_log,
            acl=self.security.access,
            require_encryption=bool(options.require_encryption),  # plain AMQP refused
            # thousands of sockets read, made or logged in in one turn: a budget's a turn
            turns=TurnBudget(_running_call_soon),
            cluster_hosts=self.security.cluster_hosts,  # made ahead of a storm of clients
            # a storm longer than its clients' patience: the newest sockets made first
            new_sockets=NewSockets(on_shift=functools.partial(_log_shift, amqp_log)),
        )
        self.ha: HaBroker | None = None
        self.replications: dict[str, QueueReplication] = {}
        self.fenced_reason: str | None = None
        #: Why the broker must not run (its store belongs to another cluster): exit 1.
        self.refused_reason: str | None = None
        #: What stopped the broker when nothing above did (the signal: "SIGTERM"), logged
        #: in ``broker_stopped``.
        self.stop_reason = ""
        self.data_dir: DataDir | None = None
        self.store: MessageStore | None = None
        self._protocols: set[AmqpProtocol] = set()
        self._server: Listener | None = None
        self._tls_server: Listener | None = None
        self._management: Any = None
        self._tick_task: asyncio.Task[None] | None = None
        #: liveness and lease renewals answered off the loop (broker.liveness_server)
        self.liveness = BrokerLiveness()
        self._stopped = asyncio.Event()
        self._stopped_by_fence = asyncio.Event()
        self.amqp_port = options.port
        self.mgmt_port = options.mgmt_port
        #: The memory and disk alarms; the store calls ``resources.write_failed()`` on ENOSPC.
        self.resources = ResourceMonitor(
            ResourceAlarms(
                memory_limit_bytes(options.max_memory, total_memory()), options.disk_free_limit
            ),
            options.data_dir,
            self.log,
            self._publishers_blocked,
            held=self._bytes_held,
        )
        #: Pages ready messages to the data directory past a share of --max-memory.
        self.pager: Pager | None = None

    def _publishers_blocked(self, reason: str | None) -> None:
        """A resource alarm blocks (reason) or unblocks (None) the publishers."""
        self.context.publish_alarm = reason
        for protocol in list(self._protocols):
            protocol.publishers_blocked(reason)

    def _bytes_held(self) -> int:
        """Bytes of the ready messages of every queue (for the heap's return)."""
        return sum(q.bytes for vhost in self.vhosts for q in vhost.queues.values())

    def _start_paging(self, data_dir: Path) -> None:
        """Queues keep ready messages in memory up to PAGING_RATIO of --max-memory, the
        rest in page files (none without a memory limit)."""
        limit = self.resources.alarms.memory_limit
        if limit:
            budget = PagingBudget(int(limit * PAGING_RATIO))
            self.pager = Pager(
                self.vhosts, data_dir / "paging", budget, on_write_failed=self._page_write_failed
            ).start()

    def _page_write_failed(self, exc: OSError) -> None:
        self.log.warning("page_write_failed", reason=str(exc))
        if exc.errno == errno.ENOSPC:
            self.resources.write_failed()

    @property
    def store_status(self) -> str:
        """``empty``, ``clean`` or ``dirty`` (the data directory), ``none`` without one."""
        return "none" if self.data_dir is None else self.data_dir.store_status

    @property
    def store_id(self) -> str | None:
        """The data directory's store id (a UUID kept across restarts), None without one."""
        return None if self.data_dir is None else self.data_dir.store_id

    def _open_store(self, data_dir: DataDir) -> None:
        """Recover the message store into the virtual hosts, then start writing to it
        (:func:`broker.store.store_open.open_store`); the connections get its hooks."""
        store = open_store(
            data_dir,
            self.vhosts,
            sync=SyncPolicy(self.options.store_sync),
            cut_damaged=self.options.store_cut_damaged,
            on_write_failed=self._store_write_failed,
        )
        self.store = store
        self.context.attach(
            store_barrier=store,
            store_transaction=store.journal.transaction,
            after_read=store.journal.hand_over,
            between_publishes=store.journal.between_publishes,
        )

    def _store_write_failed(self, exc: OSError) -> None:
        """A journal write failed (its publishes were nacked): ENOSPC raises the disk
        alarm at once, before the next sample. A backup stops (HaBroker.store_write_failed):
        what it acknowledges may not be on its disk."""
        if exc.errno == errno.ENOSPC:
            self.resources.write_failed()
        if self.ha is not None:
            code = errno.errorcode.get(exc.errno or 0, "?")
            self.ha.store_write_failed(f"{exc.strerror or exc} ({code})")

    @property
    def ha_state(self) -> str:
        """standalone, or the HA state of a cluster member (joining, catch-up, ...)."""
        return "standalone" if self.ha is None else self.ha.state.value

    def _fenced(self, reason: str) -> None:
        """The HA role must stop serving at once: close every client and stop."""
        self.fenced_reason = reason
        for protocol in list(self._protocols):
            if protocol.connection is not None:
                protocol.connection.close(ReplyCode.CONNECTION_FORCED, f"fenced: {reason}")
                protocol.flush()
        self._stopped_by_fence.set()

    def _serving_resumed(self) -> None:
        """The HA primary serves again (its member lease holds): every connection's
        held output (deliveries, get-oks, confirms) goes out now."""
        for protocol in list(self._protocols):
            if protocol.connection is not None:
                protocol.connection.signal_output()

    def _close_clients_not_served(self, reason: str) -> int:
        """The HA primary has not served for a while (its member lease lapsed): close
        every client connection whose output it holds (320 CONNECTION_FORCED, what they
        were not sent yet dropped: nothing held may reach them), so they reconnect to the
        next address of their URL list; backup links and HA admin connections stay (the
        grants that would restore it come over the links). How many are closed.

        The connections are chosen now; each is closed now while the loop's turn has CPU
        left, the rest in later turns (``BrokerContext.turns``: 2,000 at once were one
        step of 126 ms at load 33), checked again then. Meanwhile each is still held as
        before (not served: nothing held reaches it); if serving resumed meanwhile, it is
        still closed, as one closed just before would have been."""
        assert self.ha is not None
        admission = self.ha.admission
        chosen = []
        for protocol in list(self._protocols):
            connection = protocol.connection
            if connection is not None and connection.is_open and admission.holds_output(connection):
                chosen.append(protocol)

        def close(protocol: AmqpProtocol) -> None:
            connection = protocol.connection
            if connection is None or not connection.is_open:
                return  # gone meanwhile
            admission.let_close(connection)
            connection.drop_unsent()
            connection.close(ReplyCode.CONNECTION_FORCED, reason)
            protocol.flush()

        turns = self.context.turns
        for protocol in chosen:
            if turns is not None and turns.spent():
                turns.later(functools.partial(close, protocol))
            else:
                close(protocol)
        return len(chosen)

    # -- virtual hosts (VhostListener) -------------------------------------------------
    def _keep_cluster_users(self, path: Path) -> None:
        """The cluster's users (broker.security.cluster_users): read from the data
        directory, written there after each change (a small file: milliseconds).

        :raises DataDirError: the file is unreadable or malformed (naming it)."""
        try:
            saved = load_cluster_users(path)
        except ValueError as exc:
            raise DataDirError(f"cluster users: {exc}") from None
        users = self.context.authenticator.cluster_users
        users.replace(saved.event())
        users.listeners.append(lambda: save_cluster_users(users, path))

    def vhost_created(self, vhost: VirtualHost) -> None:
        self.log.info("vhost_created", vhost=vhost.name)

    def vhost_deleted(self, vhost: VirtualHost) -> None:
        """Its objects are gone: its connections are closed (320), as RabbitMQ does; its
        users' permissions go."""
        self.context.authenticator.cluster_users.vhost_deleted(vhost.name)
        closed = 0
        for protocol in list(self._protocols):
            connection = protocol.connection
            if connection is not None and connection.vhost is vhost and connection.is_open:
                connection.close(ReplyCode.CONNECTION_FORCED, f"vhost '{vhost.name}' is deleted")
                protocol.flush()
                closed += 1
        self.log.info("vhost_deleted", vhost=vhost.name, connections_closed=closed)

    def _refused(self, reason: str) -> None:
        """This broker must not run (its store belongs to another cluster): stop, exit 1."""
        self.refused_reason = reason
        self._stopped_by_fence.set()

    # -- start -------------------------------------------------------------------------
    def _protocol_factory(self) -> AmqpProtocol:
        return _TrackedProtocol(self.context, self._protocols)

    async def start(self, *, before_listening: Callable[[], None] | None = None) -> None:
        """Open the store, then bind and serve the ports. ``before_listening`` is called
        once everything of the start but the ports, the management API and the HA role's
        links is made, before any port is bound: ``qpidd`` sets the collector there
        (:func:`broker.collector.tune_after_start`, a full collection: 68-82 ms of CPU at
        load 16 for a restarted backup, which no client or link then waits for)."""
        options = self.options
        if options.data_dir:
            self.data_dir = DataDir(options.data_dir).open()
            if options.truncate and self.data_dir.store_status != "empty":
                self.data_dir.move_store_aside("--truncate yes")
            diverged = self.data_dir.path / DISCARD_MARKER
            if diverged.exists():  # a backup found it holds an era its primary never saw
                reason = diverged.read_text(encoding="utf-8", errors="replace").strip()
                self.data_dir.move_store_aside(f"diverged: {reason}", keep_epoch=True)
            self._open_store(self.data_dir)
            self._keep_cluster_users(self.data_dir.path / CLUSTER_USERS_FILE)
        self.resources.sample()
        if self.data_dir is not None:
            self._start_paging(self.data_dir.path)
        if options.ha_cluster:
            # Before listening: a cluster member must never admit a client as stand-alone.
            from broker.ha.ha_broker import HaBroker

            self.ha = HaBroker(
                self.vhosts,
                self.context,
                options,
                amqp_port=lambda: self.amqp_port,
                on_fenced=self._fenced,
                data_dir=self.data_dir,
                on_refused=self._refused,
                disk=None if self.store is None else self.store.journal,
                lease_offers=self.liveness.offers,
            )
            self.ha.lease.on_serving_resumed = self._serving_resumed
            self.ha.lease.on_close_clients = self._close_clients_not_served
        if before_listening is not None:
            before_listening()
        # Bound now (the port is known, a busy one fails the start), listening only once
        # the broker is started (below): a client dialling a broker that is starting (one
        # restarted after a fail-over, on every client's URL list) is refused at once and
        # tries its next address, instead of waiting in a backlog nobody reads while the
        # rest of the start runs (0.2 s seen after a broker kill; issue 26).
        self._server = await serve(
            self._protocol_factory,
            "AMQP",
            "--interface/--port",
            options.interface,
            options.port,
            start_serving=False,
        )
        self.amqp_port = self._server.port
        try:
            self._tls_server = await self.security.listen_tls(
                self._protocol_factory, options.interface, start_serving=False
            )
            if options.mgmt_port:
                from broker.management.web_import import ca_directory_only

                with ca_directory_only():  # aiohttp's client contexts: no CA file parse
                    from broker.management.api import start_management

                self._management = await start_management(
                    self, options.mgmt_interface, options.mgmt_port
                )
        except ListenError:
            for server in (self._server, self._tls_server):
                if server is not None:
                    server.close()
                    await server.wait_closed()
            raise
        if self.ha is not None:
            self.ha.start()
        elif options.ha_queue_replication:
            from broker.ha.remote_queue_replication import serve_queue_streams, stream_formats

            self.context.attach(
                streams=serve_queue_streams(self.vhosts, self.context.clock),
                server_properties=stream_formats,  # which stream names it serves
            )
        self._tick_task = asyncio.create_task(self._tick_loop())
        at = (options.mgmt_interface, options.ha_liveness_port)  # a member with an API only
        listen = at if self.ha is not None and options.mgmt_port else None
        tls = None if listen is None else self.security.mgmt_ssl()
        self.liveness.start(self.ha, lambda: self.ha_state, listen, tls)  # ListenError
        for server in (self._server, self._tls_server):
            if server is not None:
                await server.start_serving()
        self.log.info(
            "broker_started",
            version=__version__,
            interface=options.interface,
            port=self.amqp_port,
            mgmt_port=self.mgmt_port or None,
            ssl_port=self.security.ssl_port or None,
            ha_state=self.ha_state,
            auth=options.auth,
        )

    async def _tick_loop(self) -> None:
        while True:
            await asyncio.sleep(TICK_INTERVAL)
            await self._tick()

    async def _tick(self) -> None:
        """The housekeeping of one tick, its walks over every queue and every connection a
        :data:`~common.slices.SLICE` a turn of the loop (issue 25, "no long stalls": at
        10,000 queues and 2,000 connections, one step of 100-115 ms on 2 loaded cores)."""
        ha = self.ha
        try:
            if ha is not None:
                ha.tick()
        except Exception as exc:  # keep housekeeping alive; a bug is logged, not fatal
            self.log.error("tick_failed", part="ha", exception=repr(exc))
        try:
            if not self._quiet():
                self.resources.sample()
            self.security.tick()  # a changed users file is read again
        except Exception as exc:
            self.log.error("tick_failed", part="resources", exception=repr(exc))
        try:
            # A backup never expires or dead-letters by itself: its primary does.
            await _in_turns(self.vhosts.tick_steps(), self._walks_queues)
        except Exception as exc:
            self.log.error("tick_failed", part="vhost", exception=repr(exc))
        protocols = list(self._protocols)
        for start in range(0, len(protocols), SLICE):
            if start:
                await asyncio.sleep(0)
            for protocol in protocols[start : start + SLICE]:
                if protocol not in self._protocols:
                    continue  # its connection was lost meanwhile
                try:
                    protocol.tick()
                except Exception as exc:
                    self.log.error("tick_failed", part="connection", exception=repr(exc))

    def _quiet(self) -> bool:
        """A promotion's quiet holds: the walks of every queue wait
        (:mod:`broker.ha.promotion_quiet`)."""
        ha = self.ha
        return ha is not None and ha.quiet.holds(ha.now())

    def _walks_queues(self) -> bool:
        """Whether the tick's walk of the queues (expiry, ``x-expires``) goes on: on a
        broker without HA or on a primary, outside a promotion's quiet."""
        ha = self.ha
        return (ha is None or ha.state.is_primary) and not self._quiet()

    @property
    def connections(self) -> list[AmqpProtocol]:
        return list(self._protocols)

    async def replicate(self, queue: str, remote: str, vhost: str = "/") -> QueueReplication:
        """Start copying ``queue`` of ``vhost`` from the broker at ``remote`` (the same
        vhost there; ha-queue-replication)."""
        from broker.core.vhosts import check_vhost_name, queue_key
        from broker.ha.remote_queue_replication import QueueReplication
        from common.url import parse_address

        options = self.options
        if not options.ha_queue_replication:
            raise ValueError("queue replication needs ha-queue-replication=yes on this broker")
        host = self.vhosts.get(check_vhost_name(vhost))
        if host is None:
            raise ValueError(f"no vhost '{vhost}' on this broker")
        key = queue_key(vhost, queue)
        if key in self.replications:
            raise ValueError(
                f"queue '{queue}' in vhost '{vhost}' is already replicated from another broker"
            )
        address = parse_address(remote)
        replication = QueueReplication(
            host,
            queue,
            address,
            user=options.ha_username,
            password=options.ha_password,
            mechanism=options.ha_mechanism,
            maintenance_interval=options.link_maintenance_interval,
            heartbeat=options.link_heartbeat_interval,
            local_url=f"{options.node_name}:{self.amqp_port}",
            disk=None if self.store is None else self.store.journal,
        )
        self.replications[key] = replication
        replication.start()
        self.log.info("ha_queue_replication_started", queue=queue, vhost=vhost, remote=str(address))
        return replication

    # -- stop --------------------------------------------------------------------------
    def prepare_cluster_shutdown(self, shutdown_id: str, *, quiesce: bool) -> int:
        """A clean all-stop (``qpid-ha shutdown --all``): a clean stop from now on leaves
        ``shutdown_id`` in the store. ``quiesce`` (the primary, before its backups stop):
        stop listening and close every client connection but the backups' links, so that
        nothing changes while the backups catch up. Returns the connections closed."""
        if self.data_dir is not None:
            self.data_dir.closing_shutdown_id = shutdown_id
        if not quiesce:
            return 0
        from broker.ha.names import BACKUP_PROPERTY

        for server in (self._server, self._tls_server):
            if server is not None:
                server.close()
        closed = 0
        for protocol in list(self._protocols):
            connection = protocol.connection
            if connection is not None and not connection.client_properties.get(BACKUP_PROPERTY):
                connection.close(ReplyCode.CONNECTION_FORCED, "cluster shutdown")
                protocol.flush()
                closed += 1
        return closed

    async def stop(self, grace: float = 2.0) -> None:
        """Stop accepting, close every connection (320), then abort stragglers."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        if self.fenced_reason is not None:
            grace = min(grace, FENCED_GRACE)
        if self._server is not None:
            self._server.close()
        if self._tls_server is not None:
            self._tls_server.close()
        if self.ha is not None:
            await self.ha.stop()
        for replication in self.replications.values():
            await replication.stop()
        if self.store is not None:
            await self._confirm_what_is_stored(grace)
        for protocol in list(self._protocols):
            if protocol.connection is not None:
                protocol.connection.close(ReplyCode.CONNECTION_FORCED, "broker shutdown")
                protocol.flush()
        deadline = time.monotonic() + grace
        while self._protocols and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
            for protocol in list(self._protocols):
                protocol.flush()
        for protocol in list(self._protocols):
            if protocol.transport is not None:
                protocol.transport.abort()
        if self._tick_task is not None:
            self._tick_task.cancel()
        self.liveness.stop()
        if self._management is not None:
            await self._management.cleanup()
        if self._server is not None:
            await self._server.wait_closed()
        stored = True
        if self.store is not None:
            if self.ha is None or self.ha.primary is not None:  # a backup delivers nothing
                self.store.mark_delivered()  # the clients are gone: their unacked are back
            stored = await self.store.journal.close()
        if self.pager is not None:
            self.pager.stop()
        store_status = "none"  # no --data-dir: no store
        if self.data_dir is not None:
            self.data_dir.close(clean=stored)
            store_status = "clean" if stored else "dirty"
        self.log.info(
            "broker_stopped",
            uptime=round(time.time() - self.started_at, 3),
            reason=self._why_stopped(),
            store_status=store_status,
        )

    def _why_stopped(self) -> str:
        if self.fenced_reason is not None:
            return f"fenced: {self.fenced_reason}"
        if self.refused_reason is not None:
            return f"refused: {self.refused_reason}"
        shutdown_id = None if self.data_dir is None else self.data_dir.closing_shutdown_id
        if shutdown_id is not None:
            return f"cluster shutdown {shutdown_id}"
        return self.stop_reason or "stopped"

    async def _confirm_what_is_stored(self, grace: float) -> None:
        """Before closing the clients: let the store write what it holds, and send the
        confirms that write releases (a client would otherwise publish those again). The
        wait is bounded by ``grace``: it decides how long a stop takes, never what is
        confirmed."""
        assert self.store is not None
        paused = list(self._protocols)  # nothing new to store from here on
        for protocol in paused:
            protocol.hold_reading(True)
        # What was read before the pause and waits for its turn of the loop (the turn
        # budget kept it) is routed and stored first, so the write waited for below holds
        # it and its confirms go out: a clean stop's store holds exactly what was confirmed
        # (it was stored after the confirms otherwise, never confirmed: a loaded test run).
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        while loop.time() < deadline and any(p.reads_waiting for p in self._protocols):
            await asyncio.sleep(0)
        written = loop.create_future()

        def done(_ok: bool) -> None:
            if not written.done():
                written.set_result(None)

        self.store.journal.after_durable(done)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(written, max(0.0, deadline - loop.time()))
        for protocol in list(self._protocols):
            protocol.flush()
        for protocol in paused:  # to read the clients' close-ok
            protocol.hold_reading(False)

    async def wait_stopped(self) -> None:
        """Until stop() is called or the HA role fenced this broker."""
        stopped = asyncio.ensure_future(self._stopped.wait())
        fenced = asyncio.ensure_future(self._stopped_by_fence.wait())
        try:
            await asyncio.wait({stopped, fenced}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
            fenced.cancel()


class _TrackedProtocol(AmqpProtocol):
    """A client socket the broker keeps in ``protocols`` while it is connected. One class
    for every connection (a class made per connection was a reference cycle of its own,
    left to the cyclic collector with the connection's objects)."""

    def __init__(self, ctx: BrokerContext, protocols: set[AmqpProtocol]) -> None:
        super().__init__(ctx)
        self._tracked_in = protocols

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._tracked_in.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self._tracked_in.discard(self)


async def _in_turns(steps: Steps[None], go_on: Callable[[], bool]) -> None:
    """Run ``steps`` a slice a turn of the loop while ``go_on()`` holds, looked at before
    each slice (the first included); once it does not, the rest is dropped (the next tick
    walks again)."""
    try:
        while go_on():
            try:
                next(steps)
            except StopIteration:
                return
            await asyncio.sleep(0)
    finally:
        steps.close()


def _log_shift(log: Logger, shift: Shift) -> None:
    """The new sockets' order changed (:mod:`broker.amqp.new_sockets`)."""
    if shift.newest_first:
        log.warning("new_sockets_newest_first", waited_s=shift.waited_s, waiting=shift.waiting)
    else:
        log.info("new_sockets_in_order", waited_s=shift.waited_s, waiting=shift.waiting)


def _running_call_soon() -> CallSoon | None:
    """The running loop's ``call_soon``; None outside a loop."""
    try:
        return asyncio.get_running_loop().call_soon
    except RuntimeError:
        return None
