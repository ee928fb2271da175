"""The asyncio shell around :class:`~broker.amqp.connection.Connection`.

It only moves bytes: what is read goes to the connection, what the connection has to send is
written, once per read and once per loop iteration for output produced elsewhere. Transport
back-pressure (``pause_writing``/``resume_writing``) stops and restarts deliveries to this
connection's consumers. Losing the socket wakes everything through
``Connection.connection_lost``. A login's password hash runs in a thread
(:func:`~broker.security.password_checks.run_password_check`), reading paused meanwhile: a
burst of logins does not stall the loop. The socket is also not read while the connection
says ``reading_paused`` (a resource alarm, too much kept behind held basic.gets), nor
while the frames of the last read wait for the next turn of the loop (``unparsed``: a read
of many methods is handled a slice a turn, :data:`~broker.amqp.connection.READ_SLICE`):
:meth:`AmqpProtocol._follow_reading` after each read and whenever the connection says it
changed.

Thousands of sockets may need the loop in one turn (clients that all come back at a
fail-over, or are all refused by a backup, or all go with their host): the broker's
:class:`~common.slices.TurnBudget` (``BrokerContext.turns``) lets each socket's callback
run at once while the turn has CPU left (a read, a new socket's connection, a login
decided, a lost socket's release); past it the socket waits for a later turn, its read
kept, reading paused, in the order they came (issue 25, "no long stalls": 2,000 clients
connecting at once were one step of 1.4 s of CPU at load 30). A backup's replication link
and an HA admin connection are read at once all the same, once their start-ok says what
they are: the link carries the member lease's grants.

The same port serves AMQP 1.0: the 0-9-1 connection reads the protocol header, and one of
1.0's (:func:`broker.amqp10.framing.is_amqp10_header`) is handed back here
(``on_other_header``), where a :class:`broker.amqp10.connection.Connection` takes the socket
from its first byte on; the shell then serves it through the same calls
(:class:`~broker.amqp.ports.ShellConnection`). The 0-9-1 path pays nothing for it: the
hand-over is decided once, at the header. AMQP 1.0's modules are imported there, by the
first 1.0 connection: a broker no 1.0 client speaks to never loads them (about 7 % of a
broker's imports at start-up).
"""

from __future__ import annotations

import asyncio
from typing import cast

from broker.amqp.connection import Connection
from broker.amqp.context import BrokerContext, counts_toward_limits
from broker.amqp.new_sockets import Waiting
from broker.amqp.ports import ShellConnection
from broker.listen import peer_address
from broker.security.login_backoff import source_key
from broker.security.password_checks import run_password_check
from broker.security.tls import certificate_identity
from common.loop_errors import where_raised
from common.slices import HANDSHAKE, TRAFFIC, run_in_turns, run_steps

#: Transport write buffer water marks: deliveries pause above HIGH, resume below LOW.
HIGH_WATER = 4 * 1024 * 1024
LOW_WATER = 1024 * 1024


#: Bytes a socket not made yet may send while it waits for its turn before its reading
#: is paused (a client sends its 8-byte protocol header, then waits for the broker).
HELD_BEFORE_MADE = 4096


class AmqpProtocol(asyncio.Protocol):
    """One client socket."""

    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        self.connection: ShellConnection | None = None
        self.transport: asyncio.Transport | None = None
        self._flush_scheduled = False
        self._checking_login = False
        self._reading_paused = False  # the transport's reading is paused
        self._held_by_stop = False  # a clean stop reads nothing more (hold_reading)
        #: The socket waits for a later turn of the loop (:meth:`_wait_turn`): the rest of
        #: a read's frames, a read kept, or the connection not made yet.
        self._parse_scheduled = False
        #: What was read while the socket waits for its turn, handled then, in order.
        self._held: list[bytes] = []
        self._waits_known: bool | None = None  # see _waits
        #: When the shell closed the transport (the loop's clock): a transport whose peer
        #: takes nothing of what is left to write is aborted after ``close_timeout``.
        self._hung_up_at: float | None = None
        self._loop = asyncio.get_running_loop()
        #: The socket's wait among the new sockets, until it is made.
        self._waiting: Waiting | None = None
        #: When the socket was accepted, and the seconds it then waited to be made (the
        #: loop's clock; logged with a handshake abandoned).
        self._accepted_at = self._loop.time()
        self._waited_s = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCPTransport is not an asyncio.Transport subclass, but behaves as one.
        tcp = cast(asyncio.Transport, transport)
        self.transport = tcp
        self._accepted_at = self._loop.time()
        tcp.set_write_buffer_limits(high=HIGH_WATER, low=LOW_WATER)
        turns = self.ctx.turns
        if turns is not None and turns.spent():
            # Made at a later turn (thousands of clients coming at once). Not paused here:
            # uvloop starts reading after connection_made whatever it did; a read kept.
            # In arrival order with the open connections' reads (TurnBudget's ranks),
            # unless it comes from one of the cluster's brokers: a backup's link is made
            # at a handshake's rank, not behind a storm of clients reconnecting after a
            # fail-over (soak39: a restarted backup's dials unanswered for 30 s, again
            # and again).
            # A client's socket waits among the new sockets, its place in the turns a
            # ticket that makes the oldest waiting while the broker keeps up and the
            # newest once it does not (:mod:`broker.amqp.new_sockets`).
            self._parse_scheduled = True
            new_sockets = self.ctx.new_sockets
            if self._from_cluster(tcp):
                turns.later(self._parse_more, HANDSHAKE)
            elif new_sockets is None:
                turns.later(self._parse_more, TRAFFIC)
            else:
                ticket, self._waiting = new_sockets.arrive(self._made_in_turn)
                turns.later(ticket, TRAFFIC)
            return
        self._make(tcp)

    def _made_in_turn(self) -> None:
        """Chosen among the waiting new sockets: made now."""
        self._waiting = None
        self._parse_more()

    def _from_cluster(self, transport: asyncio.Transport) -> bool:
        """Whether the socket's peer is on a host of ``ha-brokers-url``."""
        hosts = self.ctx.cluster_hosts
        if not hosts:
            return False
        peer = transport.get_extra_info("peername")
        return isinstance(peer, tuple) and source_key(str(peer[0])) in hosts

    def _make(self, transport: asyncio.Transport) -> None:
        """The connection of the socket."""
        # an IPv4 client of the dual-stack listener as IPv4 (loopback rule, names, logs)
        host, peer = peer_address(transport.get_extra_info("peername"))
        identity = certificate_identity(transport.get_extra_info("peercert"))  # TLS only
        self._waited_s = self._loop.time() - self._accepted_at
        connection = Connection(
            self.ctx,
            peer,
            on_output=self._schedule_flush,
            peer_host=host,
            tls_identity=identity,
            encrypted=transport.get_extra_info("ssl_object") is not None,
        )
        connection.on_reading_changed = self._follow_reading
        connection.on_other_header = self._other_header
        self.connection = connection

    def _other_header(self, data: bytes) -> bool:
        """The 0-9-1 connection read a protocol header not its own (``data``: everything
        read so far): an AMQP 1.0 connection takes the socket, or False."""
        from broker.amqp10.connection import Connection as Amqp10Connection
        from broker.amqp10.framing import is_amqp10_header

        old = self.connection
        if not is_amqp10_header(data[:8]) or not isinstance(old, Connection):
            return False
        new = Amqp10Connection(
            self.ctx,
            old.peer,
            on_output=self._schedule_flush,
            peer_host=old.peer_host,
            tls_identity=old.tls_identity,
            encrypted=old.encrypted,
            connection_id=old.id,
        )
        self.connection = new
        new.recv_oct, new.send_oct = old.recv_oct, old.send_oct
        old.ended()
        new.receive_data(data)
        self.flush()
        if new.login_check is not None and not self._checking_login:
            self._check_login(new)
        return True

    def data_received(self, data: bytes) -> None:
        turns = self.ctx.turns
        if self._parse_scheduled or (turns is not None and self._waits() and turns.spent()):
            self._held.append(data)  # handled at the socket's turn, reading paused
            self._wait_turn()
            return
        connection = self.connection
        if connection is None:
            return
        self._receive(connection, data)

    def _receive(self, connection: ShellConnection, data: bytes) -> None:
        connection.recv_oct += len(data)  # a counter a read: the rates are the sampler's
        connection.receive_data(data)
        self._parsed(connection)

    def _parsed(self, connection: ShellConnection) -> None:
        """After the connection handled (part of) what was read."""
        after_read = connection.ctx.after_read
        if after_read is not None:
            after_read()  # the store: what the read appended goes to disk now
        self.flush()
        if connection.login_check is not None and not self._checking_login:
            self._check_login(connection)
        elif connection.unparsed:
            self._wait_turn()
        elif connection.reading_paused:
            self._follow_reading()

    def _wait_turn(self) -> None:
        """Go on at a later turn of the loop, nothing read meanwhile (so what is kept is
        one read at most): the read's slice was spent (the rest of its frames), or the
        loop's turn was (:class:`~common.slices.TurnBudget`: the read itself)."""
        if not self._parse_scheduled:
            self._parse_scheduled = True
            turns = self.ctx.turns
            if turns is None or not self._waits():
                self._loop.call_soon(self._parse_more)
            else:  # a handshake's steps before the open connections' reads
                connection = self.connection
                opened = connection is not None and connection.is_open
                turns.later(self._parse_more, TRAFFIC if opened else HANDSHAKE)
        self._follow_reading()

    def _waits(self) -> bool:
        """Whether this socket's reads wait behind others' when the loop's turn is spent:
        a client's do; a backup's replication link and an HA admin connection (the agent,
        ``qpid-ha``) never wait behind a storm of clients (the link carries the member
        lease's grants), known from the client's start-ok."""
        waits = self._waits_known
        if waits is None:
            connection = self.connection
            properties = None if connection is None else connection.client_properties
            if not properties:
                return True  # not known yet
            waits = self._waits_known = counts_toward_limits(properties)
        return waits

    def _parse_more(self) -> None:
        """The socket's turn: its connection made if it is not yet, then what was kept."""
        self._parse_scheduled = False
        transport = self.transport
        if transport is None:  # the socket is gone
            self._held.clear()
            return
        if self.connection is None:
            self._make(transport)
        connection = self.connection
        assert connection is not None
        held, self._held = self._held, []
        if held:
            self._receive(connection, b"".join(held))
        else:
            connection.parse_more()
            self._parsed(connection)
        self._follow_reading()

    def _follow_reading(self) -> None:
        """Pause or resume reading the socket as the connection (and a login check, and
        a turn waited for) say."""
        connection, transport = self.connection, self.transport
        if transport is None or transport.is_closing():
            return
        paused = (
            self._held_by_stop
            or (connection is not None and connection.reading_paused)
            or self._checking_login
            or (self._parse_scheduled and (connection is not None or self._held_much()))
        )
        if paused != self._reading_paused:
            self._reading_paused = paused
            if paused:
                transport.pause_reading()
            else:
                transport.resume_reading()

    def _held_much(self) -> bool:
        """A socket not made yet is read on while it waits for its turn (only its protocol
        header comes before the broker answers), so that a client that gave up meanwhile
        is seen gone and its turn costs nothing: paused, such clients' sockets were made
        and sent connection.start long after they left, the broker's whole work in a
        storm (soak42: 1,330 a minute, none opened). More than a header's worth waits."""
        return sum(map(len, self._held)) > HELD_BEFORE_MADE

    def _check_login(self, connection: ShellConnection) -> None:
        """Run the password hash in a thread; read nothing more until it is decided."""
        check = connection.login_check
        assert check is not None
        self._checking_login = True
        self._follow_reading()

        def checked(future: asyncio.Future[bool]) -> None:
            turns = self.ctx.turns
            if future.cancelled():
                self._checking_login = False
                return  # the loop is closing
            if turns is not None and turns.spent():
                turns.later(lambda: decided(future), HANDSHAKE)  # a burst of logins
            else:
                decided(future)

        def decided(future: asyncio.Future[bool]) -> None:
            self._checking_login = False
            exc = future.exception()
            if exc is not None:
                self.ctx.log.error(
                    "internal_error", connection=connection.name, exception=repr(exc)
                )
            connection.password_checked(exc is None and bool(future.result()))
            self.flush()
            if connection.unparsed:
                self._wait_turn()
            self._follow_reading()

        run_password_check(check).add_done_callback(checked)

    def hold_reading(self, held: bool) -> None:
        """A clean stop: read nothing more from the socket (``held``) until it says so
        again (to read the clients' close-ok), whatever else would resume it (a read kept
        for a later turn resumed reading once handled: publishes read after the stop's
        store write, stored and never confirmed)."""
        self._held_by_stop = held
        self._follow_reading()

    @property
    def reads_waiting(self) -> bool:
        """What was read waits for a later turn of the loop (a read kept while the turn's
        budget was spent, the rest of a read's frames): a clean stop handles it before it
        asks the store for the write whose confirms it sends."""
        connection = self.connection
        return self._parse_scheduled or (connection is not None and connection.unparsed)

    def publishers_blocked(self, reason: str | None) -> None:
        """A resource alarm was raised or cleared: block or unblock this connection."""
        connection = self.connection
        if connection is None:
            return
        connection.publishers_blocked(reason)
        self.flush()
        self._follow_reading()

    def _schedule_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self.flush)

    def flush(self) -> None:
        """Write what the connection has; close the socket when it asks to."""
        self._flush_scheduled = False
        connection, transport = self.connection, self.transport
        if connection is None or transport is None or transport.is_closing():
            return
        try:
            data = connection.data_to_send()
        except Exception as exc:  # a bug behind the flush (a stream's pump): an event, and
            # this connection dropped, rather than a traceback and output never written
            self.ctx.log.error(
                "internal_error",
                connection=connection.name,
                exception=f"{type(exc).__name__}: {exc}",
                where=where_raised(exc),
            )
            transport.abort()
            return
        if data:
            connection.send_oct += len(data)
            transport.write(data)
        if connection.should_close:
            transport.close()  # once what is written has gone
            self._hung_up_at = self._loop.time()

    def tick(self) -> None:
        if self.connection is not None:
            self.connection.tick()
            self.flush()
        transport, hung_up_at = self.transport, self._hung_up_at
        if (
            transport is not None
            and hung_up_at is not None
            and self._loop.time() - hung_up_at >= self.ctx.settings.close_timeout
        ):
            # A peer that reads nothing (its window shut) would keep a closing transport,
            # and the connection's resources, forever: what it has not taken is dropped.
            self._hung_up_at = None
            transport.abort()

    def pause_writing(self) -> None:
        if self.connection is not None:
            self.connection.set_writable(False)

    def resume_writing(self) -> None:
        if self.connection is not None:
            self.connection.set_writable(True)
            self.flush()

    def eof_received(self) -> bool | None:
        return None  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        unread = sum(map(len, self._held))
        self._held.clear()
        if self._waiting is not None:  # its client left before it was made
            self._waiting.cancel()
            self._waiting = None
        connection = self.connection
        if connection is None:
            return
        if exc is not None and connection.close_reason is None:
            connection.close_reason = f"socket error: {exc}"
        turns = self.ctx.turns
        steps = connection.connection_lost_steps(unread=unread, waited_s=self._waited_s)
        if turns is None:
            run_steps(steps)
            return

        # thousands of sockets gone at once (their clients' host, a partition): each
        # connection's release and log line in turns, the socket gone already; a link's
        # thousands of channels a slice a turn
        if turns.spent():
            turns.later(lambda: run_in_turns(steps, turns.later))
        else:
            run_in_turns(steps, turns.later)
