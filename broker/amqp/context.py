"""What a connection needs of the broker around it: settings, state, policy, registry."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from broker import __version__
from broker.amqp.new_sockets import NewSockets
from broker.amqp.stream_sink import StreamSink
from broker.core.errors import AmqpError
from broker.core.queue import Queue
from broker.core.vhost import VirtualHost
from broker.core.vhosts import VirtualHosts
from broker.security.sasl import Authenticator
from common.slices import TurnBudget

if TYPE_CHECKING:
    from broker.amqp.access import AccessControl


#: The client property an HA backup sets on its replication link (``broker.ha.names``).
HA_BACKUP_PROPERTY = "qpid.ha-backup"
#: The client property of an HA admin connection (the agent, ``qpid-ha``).
HA_ADMIN_PROPERTY = "qpid.ha-admin"


def counts_toward_limits(client_properties: Mapping[str, Any]) -> bool:
    """Whether a connection is a client's, counted by a vhost's ``max-connections``: not a
    backup's replication link nor an HA admin connection (the cluster's own, never refused
    by a limit an operator sets for clients)."""
    return not (
        client_properties.get(HA_BACKUP_PROPERTY) or client_properties.get(HA_ADMIN_PROPERTY)
    )


@dataclass(frozen=True, slots=True)
class ConnectionSettings:
    """Limits offered to clients in connection.tune, and handshake timing."""

    frame_max: int = 131072
    channel_max: int = 2047  # RabbitMQ's default
    heartbeat: int = 60
    max_connections: int = 500
    handshake_timeout: float = 10.0
    close_timeout: float = 2.0
    max_body_size: int = 128 * 1024 * 1024
    product: str = "qpidd"
    version: str = __version__
    node_name: str = ""


class AdmittedConnection(Protocol):
    """What an admission policy reads of a connection (the
    :class:`~broker.amqp.connection.Connection`: this module is below the connection's,
    which imports it; no import circle)."""

    @property
    def client_properties(self) -> Mapping[str, Any]:
        """connection.start-ok's client properties."""
        ...

    @property
    def user(self) -> str | None:
        """The authenticated user (None before start-ok)."""
        ...

    @property
    def peer(self) -> str:
        """The client's address."""
        ...

    @property
    def name(self) -> str:
        """The connection's name in logs (its peer and id)."""
        ...


class AdmissionPolicy(Protocol):
    """Decides whether an authenticated connection may open (the HA role asks here)."""

    def admit(self, connection: AdmittedConnection) -> AmqpError | None: ...

    def refusal_before_login(self, client_properties: Mapping[str, Any]) -> AmqpError | None:
        """A refusal decided from what connection.start already tells anyone who connects
        (an HA backup's state and public URL), asked at start-ok before the password is
        checked: the connection then skips the login and gets this refusal at
        connection.open, where :meth:`admit` would have refused it (issue 25: a backup
        dialled by every client of a fail-over spent a password hash on each). None: the
        login goes on."""
        ...

    def released(self, connection: AdmittedConnection) -> None:
        """An admitted connection closed."""
        ...

    def may_confirm(self) -> bool:
        """May publisher confirms go out now? The confirm path's gate
        (``CONFIRM_GATES`` in broker/core/queue_contracts.py): a query the connection asks
        as it writes, which changes nothing. False: an HA primary fenced, or whose cluster
        manager's lease ran out (its role fences on the next tick; the held confirms are
        never sent) or whose member lease lapsed (sent once it serves again)."""
        ...

    def holds_output(self, connection: AdmittedConnection) -> bool:
        """Must everything an admitted connection would be sent wait now? A query, asked
        as the connection writes. (True: an HA primary whose member lease lapsed holds its
        clients' deliveries, get-oks and confirms until it serves again, then wakes every
        connection.)"""
        ...

    def confirms_sent(self, connection: AdmittedConnection) -> None:
        """Publisher confirms just went out on an admitted connection (a new primary's
        first client confirm: the web console's client outage)."""
        ...


class Stream(Protocol):
    """A stream of deliveries a channel hands over to (the HA replication streams)."""

    def acknowledged(self, delivery_tag: int, multiple: bool) -> None: ...

    def close(self) -> None: ...


class StreamHooks(Protocol):
    """Serves basic.consume of reserved names: the HA streams on the primary."""

    def serves(self, name: str) -> bool:
        """Is a basic.consume of ``name`` for these hooks (not for a queue)?"""
        ...

    def subscribe(self, sink: StreamSink, name: str, arguments: dict[str, Any]) -> Stream:
        """Start a stream writing to ``sink`` (the consuming channel); raise AmqpError to
        refuse."""
        ...


class ReplicationBarrier(Protocol):
    """Synchronous configuration: the HA primary's streams hold a replicated change's reply."""

    def after_replicated(self, reply: Callable[[], None]) -> None:
        """Call ``reply`` once every backup that must have the changes made so far has them
        (at once when none lacks anything)."""
        ...


class HaBarrier(ReplicationBarrier, Protocol):
    """The HA primary's barrier also holds answers that promise a removal (purge-ok, the
    commit-ok of acknowledgements) until the backups applied the queues' dequeues."""

    def after_replicated(self, reply: Callable[[], None], queues: Iterable[Queue] = ()) -> None:
        """As :meth:`ReplicationBarrier.after_replicated`, and once every backup applied
        every dequeue of ``queues`` so far."""
        ...


def after_replicated(
    barrier: HaBarrier | None,
    store: ReplicationBarrier | None,
    done: Callable[[], None],
    queues: Iterable[Queue] = (),
) -> None:
    """Call ``done`` once the backups (an HA primary's ``barrier``: every change so far, and
    every dequeue of ``queues``) and the ``store`` (on disk) have what is done so far: what
    a configuration answer (declare-ok, purge-ok, ...) or a management change promises. At
    once without either."""
    if barrier is None or store is None:
        if barrier is not None:
            barrier.after_replicated(done, queues)
        elif store is not None:
            store.after_replicated(done)
        else:
            done()
        return
    waiting = [2]

    def one_done() -> None:
        waiting[0] -= 1
        if waiting[0] == 0:
            done()

    store.after_replicated(one_done)
    barrier.after_replicated(one_done, queues)


class Logger(Protocol):
    def info(self, event: str, **fields: Any) -> Any: ...

    def warning(self, event: str, **fields: Any) -> Any: ...

    def debug(self, event: str, **fields: Any) -> Any: ...

    def error(self, event: str, **fields: Any) -> Any: ...


class _NullLogger:
    def info(self, event: str, **fields: Any) -> None:
        pass

    warning = debug = error = info


@dataclass(eq=False)
class BrokerContext:
    """Shared by every connection of one broker.

    Built with what the broker knows when it builds it (settings, virtual hosts, login,
    the ACL). The parts it makes later (the store's barrier, transaction and hooks once it
    recovered; the HA role's admission and server properties; a primary's streams and
    barrier, or ha-queue-replication's streams) are registered once each through
    :meth:`attach`; connections read them at each use.
    """

    vhost: VirtualHost
    authenticator: Authenticator
    #: Every virtual host, ``vhost`` (``/``) among them; None: ``vhost`` only.
    vhosts: VirtualHosts | None = None
    settings: ConnectionSettings = field(default_factory=ConnectionSettings)
    #: Whom the broker serves (the HA role's policy); None: everyone who logs in.
    admission: AdmissionPolicy | None = None
    #: Serves basic.consume of reserved names (the HA primary's or ha-queue-replication's
    #: streams).
    streams: StreamHooks | None = None
    #: Holds the replies to configuration changes until the backups have them (HA primary).
    barrier: HaBarrier | None = None
    #: Holds them until the message store has them on disk (a broker with --data-dir).
    store_barrier: ReplicationBarrier | None = None
    #: Around a ``tx.commit``: what the commit stores is written all or none (the store's
    #: ``Journal.transaction``); None without a store.
    store_transaction: Callable[[], AbstractContextManager[None]] | None = None
    #: Called after the frames of each read are processed, before the connection's output
    #: is written (the store's ``Journal.hand_over``); None without a store.
    after_read: Callable[[], None] | None = None
    #: Called after each publish is routed (the store's ``Journal.between_publishes``).
    between_publishes: Callable[[], None] | None = None
    #: Extra Connection.Start server properties, read at each handshake (HA status).
    server_properties: Callable[[], dict[str, Any]] | None = None
    log: Logger = field(default_factory=_NullLogger)
    #: The ACL (``--acl-file``) asked before each checked method, or None: no ACL.
    acl: AccessControl | None = None
    #: ``--require-encryption``: a connection that is not TLS is refused at start-ok.
    require_encryption: bool = False
    #: The reason publishers are blocked by a resource alarm (broker.core.alarms), or None.
    publish_alarm: str | None = None
    clock: Callable[[], float] = time.monotonic
    #: The open connections by id (:class:`~broker.amqp.connection.Connection`; ``Any``:
    #: that module imports this one, and the management API reads most of a connection).
    connections: dict[int, Any] = field(default_factory=dict)
    #: The open AMQP 1.0 connections by id (:class:`broker.amqp10.connection.Connection`;
    #: its id is the 0-9-1 connection's that handed it the socket, one series): counted
    #: against ``max_connections``, listed by ``/api/connections``, in ``qpidd_connections``.
    connections_1_0: dict[int, Any] = field(default_factory=dict)
    connections_opened_total: int = 0
    connections_refused_total: int = 0
    protocol_errors_total: int = 0
    #: The loop's CPU per turn for the sockets' callbacks (a read, a new socket, a login
    #: decided): past it they wait for later turns (:class:`common.slices.TurnBudget`;
    #: the broker's, one for every connection); None: each runs at once (a test's context).
    turns: TurnBudget | None = None
    #: The hosts of ``ha-brokers-url`` (:func:`broker.security.login_backoff.source_key`
    #: of each address): a new socket from one is made ahead of a storm of clients'
    #: (:meth:`broker.amqp.protocol.AmqpProtocol.connection_made`).
    cluster_hosts: frozenset[str] = frozenset()
    #: The new sockets waiting for a turn (:class:`broker.amqp.new_sockets.NewSockets`:
    #: the oldest made first while the broker keeps up, the newest once it does not);
    #: None: each made at its own place in the turns (a test's context).
    new_sockets: NewSockets | None = None

    def attach(
        self,
        *,
        admission: AdmissionPolicy | None = None,
        server_properties: Callable[[], dict[str, Any]] | None = None,
        streams: StreamHooks | None = None,
        barrier: HaBarrier | None = None,
        store_barrier: ReplicationBarrier | None = None,
        store_transaction: Callable[[], AbstractContextManager[None]] | None = None,
        after_read: Callable[[], None] | None = None,
        between_publishes: Callable[[], None] | None = None,
    ) -> None:
        """Register parts made after the context, each one once (``RuntimeError`` for a
        part registered again: two owners of one part is a bug)."""
        given = {
            "admission": admission,
            "server_properties": server_properties,
            "streams": streams,
            "barrier": barrier,
            "store_barrier": store_barrier,
            "store_transaction": store_transaction,
            "after_read": after_read,
            "between_publishes": between_publishes,
        }
        for name, part in given.items():
            if part is None:
                continue
            if getattr(self, name) is not None:
                raise RuntimeError(f"BrokerContext.{name} is registered already")
            setattr(self, name, part)

    def find_vhost(self, name: str) -> VirtualHost | None:
        """The virtual host a connection.open names, None if there is none."""
        if self.vhosts is not None:
            return self.vhosts.get(name)
        return self.vhost if name == self.vhost.name else None

    def client_connections_to(self, vhost: VirtualHost) -> int:
        """Open client connections of either protocol to ``vhost`` (a vhost's
        ``max-connections`` counts them; HA links and admin connections are not clients)."""
        return sum(
            1
            for c in (*self.connections.values(), *self.connections_1_0.values())
            if c.is_open and c.vhost is vhost and counts_toward_limits(c.client_properties)
        )

    def open_connection_count(self) -> int:
        """Open connections of either protocol (``max_connections`` counts them all)."""
        opened = sum(1 for c in self.connections.values() if c.is_open)
        return opened + sum(1 for c in self.connections_1_0.values() if c.is_open)

    def connection_limit_reached(self, limit: int) -> bool:
        """Are ``limit`` connections of either protocol open? O(1) while fewer than
        ``limit`` are known at all (open or not); counted only past that: each of the
        scale soak's 2,000 reconnecting clients counted every connection at its open."""
        if len(self.connections) + len(self.connections_1_0) < limit:
            return False
        return self.open_connection_count() >= limit
