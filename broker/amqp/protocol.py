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
from broker.amqp.context import BrokerContext
from broker.amqp.ports import ShellConnection
from broker.listen import peer_address
from broker.security.password_checks import run_password_check
from broker.security.tls import certificate_identity
from common.loop_errors import where_raised

#: Transport write buffer water marks: deliveries pause above HIGH, resume below LOW.
HIGH_WATER = 4 * 1024 * 1024
LOW_WATER = 1024 * 1024


class AmqpProtocol(asyncio.Protocol):
    """One client socket."""

    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        self.connection: ShellConnection | None = None
        self.transport: asyncio.Transport | None = None
        self._flush_scheduled = False
        self._checking_login = False
        self._reading_paused = False  # the transport's reading is paused
        self._parse_scheduled = False  # the rest of a read's frames, next turn of the loop
        #: When the shell closed the transport (the loop's clock): a transport whose peer
        #: takes nothing of what is left to write is aborted after ``close_timeout``.
        self._hung_up_at: float | None = None
        self._loop = asyncio.get_running_loop()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCPTransport is not an asyncio.Transport subclass, but behaves as one.
        tcp = cast(asyncio.Transport, transport)
        self.transport = tcp
        tcp.set_write_buffer_limits(high=HIGH_WATER, low=LOW_WATER)
        # an IPv4 client of the dual-stack listener as IPv4 (loopback rule, names, logs)
        host, peer = peer_address(transport.get_extra_info("peername"))
        identity = certificate_identity(transport.get_extra_info("peercert"))  # TLS only
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
        new.receive_data(data)
        self.flush()
        if new.login_check is not None and not self._checking_login:
            self._check_login(new)
        return True

    def data_received(self, data: bytes) -> None:
        connection = self.connection
        if connection is None:
            return
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
            self._parse_later()
        elif connection.reading_paused:
            self._follow_reading()

    def _parse_later(self) -> None:
        """The read's slice was spent: the rest of its frames next turn, nothing read
        meanwhile (so the buffer holds one read at most)."""
        if not self._parse_scheduled:
            self._parse_scheduled = True
            self._follow_reading()
            self._loop.call_soon(self._parse_more)

    def _parse_more(self) -> None:
        self._parse_scheduled = False
        connection = self.connection
        if connection is None or self.transport is None:
            return
        connection.parse_more()
        self._parsed(connection)
        self._follow_reading()

    def _follow_reading(self) -> None:
        """Pause or resume reading the socket as the connection (and a login check) say."""
        connection, transport = self.connection, self.transport
        if connection is None or transport is None or transport.is_closing():
            return
        paused = connection.reading_paused or self._checking_login or self._parse_scheduled
        if paused != self._reading_paused:
            self._reading_paused = paused
            if paused:
                transport.pause_reading()
            else:
                transport.resume_reading()

    def _check_login(self, connection: ShellConnection) -> None:
        """Run the password hash in a thread; read nothing more until it is decided."""
        check = connection.login_check
        assert check is not None
        self._checking_login = True
        self._follow_reading()

        def checked(future: asyncio.Future[bool]) -> None:
            self._checking_login = False
            if future.cancelled():
                return  # the loop is closing
            exc = future.exception()
            if exc is not None:
                self.ctx.log.error(
                    "internal_error", connection=connection.name, exception=repr(exc)
                )
            connection.password_checked(exc is None and bool(future.result()))
            self.flush()
            if connection.unparsed:
                self._parse_later()
            self._follow_reading()

        run_password_check(check).add_done_callback(checked)

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
        connection = self.connection
        if connection is not None:
            if exc is not None and connection.close_reason is None:
                connection.close_reason = f"socket error: {exc}"
            connection.connection_lost()
        self.transport = None
