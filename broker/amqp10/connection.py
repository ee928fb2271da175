"""One AMQP 1.0 connection, without I/O: bytes in, bytes out (part 2, sections 2.2-2.4).

The asyncio shell (:class:`broker.amqp.protocol.AmqpProtocol`, after the listener read an
AMQP 1.0 protocol header: :func:`broker.amqp10.framing.is_amqp10_header`) feeds what it
reads to :meth:`Connection.receive_data`, writes what :meth:`Connection.data_to_send`
returns, calls :meth:`Connection.tick` for heartbeats and time-outs and
:meth:`Connection.connection_lost` when the socket goes: the same calls as the 0-9-1
:class:`~broker.amqp.connection.Connection`, so one shell serves both.

The header decides the layer:

- ``AMQP 3 1 0 0`` (SASL): our header and ``sasl-mechanisms``; ``sasl-init`` logs in
  (its :class:`~broker.amqp10.sasl_layer.SaslLayer`; a password hash waits in ``AWAIT_LOGIN`` with
  :attr:`Connection.login_check` set, for the shell to run off the loop); ``sasl-outcome``;
  then the client's ``AMQP 0 1 0 0`` and ours.
- ``AMQP 0 1 0 0`` straight away: only with authentication off (``--auth no``), as the
  user ``anonymous``; otherwise answered with the SASL header and closed, never logged in.
- ``AMQP 2 1 0 0`` (TLS inside AMQP): answered with the SASL header and closed (TLS is the
  TLS port's, ``--ssl-port``).

Then ``open`` (its ``hostname`` ``vhost:NAME`` names a virtual host, any other the default
one; the ACL's ``access``, the connection limit and the HA admission policy as for 0-9-1),
sessions (its :class:`~broker.amqp10.sessions.SessionTable`: begin, each session's frames,
end, dispositions at the flush), idle-time-out heartbeats both ways, and ``close``. An
error is answered in its scope (:class:`~broker.amqp10.errors.Amqp10Error`): a
connection error with ``close`` (after an ``open`` of ours if none was sent yet), and the
broker and every other connection carry on.

THREAD UNSAFE: one event loop owns the connection.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from broker.amqp.context import BrokerContext
from broker.amqp.handshake import check_vhost_connections, open_vhost
from broker.amqp.timeouts import ConnectionTimeouts
from broker.amqp10 import codec
from broker.amqp10.codec import DecodeError
from broker.amqp10.errors import (
    CONNECTION_FORCED,
    DECODE_ERROR,
    FRAME_SIZE_TOO_SMALL,
    FRAMING_ERROR,
    ILLEGAL_STATE,
    INTERNAL_ERROR,
    RESOURCE_LIMIT_EXCEEDED,
    Amqp10Error,
    Scope,
    from_core,
)
from broker.amqp10.framing import (
    EMPTY_FRAME,
    FRAME_AMQP,
    FRAME_HEAD,
    MIN_MAX_FRAME_SIZE,
    TRANSFER_DESCRIPTOR,
    decode_transfer,
    frame,
    read_flow_or_disposition,
    read_frame,
    read_transfer,
)
from broker.amqp10.performatives import (
    Begin,
    Close,
    Error,
    Open,
)
from broker.amqp10.sasl_layer import SaslLayer
from broker.amqp10.session import Session
from broker.amqp10.sessions import SessionTable
from broker.amqp10.state import HANDSHAKE, TRANSITIONS, State
from broker.core.errors import AmqpError, ReplyCode, RoutineRefusal
from broker.security.sasl import PasswordCheck
from common.slices import Steps
from common.weakly import weakly

S = State
_ids = itertools.count(1)
#: A client's open names a virtual host with this prefix on its hostname (RabbitMQ's).
VHOST_PREFIX = "vhost:"


class Connection:
    """See the module docstring."""

    def __init__(
        self,
        ctx: BrokerContext,
        peer: str,
        on_output: Callable[[], None] | None = None,
        peer_host: str | None = None,
        tls_identity: str | None = None,
        encrypted: bool = False,
        connection_id: int | None = None,
    ) -> None:
        self.ctx = ctx
        #: The 0-9-1 connection's id that handed over the socket (ids are one series, so
        #: ``/api/connections`` lists both protocols), or our own in tests.
        self.id = next(_ids) if connection_id is None else connection_id
        self.peer = peer
        self.peer_host = peer_host
        self.tls_identity = tls_identity
        self.encrypted = encrypted
        self.name = f"{peer} #1.0-{self.id}"
        self.vhost = ctx.vhost
        self.on_output = on_output
        self.on_reading_changed: Callable[[], None] | None = None
        #: Every read is parsed whole (the 0-9-1 connection's per-read slice is not here).
        self.unparsed = False
        self.state = S.AWAIT_HEADER
        self.user: str | None = None
        self.client_properties: dict[str, Any] = {}
        self.login_check: PasswordCheck | None = None
        self.container_id = ""
        settings = ctx.settings
        self.max_frame_size = max(settings.frame_max, MIN_MAX_FRAME_SIZE)
        self.peer_max_frame_size = MIN_MAX_FRAME_SIZE
        self.channel_max = settings.channel_max
        #: Our idle time-out (ms; 0: none) and the client's (we send at least that often).
        self.idle_timeout_ms = settings.heartbeat * 1000
        self.peer_idle_timeout_ms = 0
        self.writable = True
        self.should_close = False
        self.close_reason: str | None = None
        self.admitted = False
        #: the SASL layer skipped the login: ``open`` is refused (:meth:`refusal_without_login`)
        self.refused_before_login = False
        self.messages_published = 0
        #: Bytes read from and written to the socket (RabbitMQ's recv_oct, send_oct): counted
        #: by the asyncio shell at each read and write, made rates by the console's sampler.
        self.recv_oct = 0
        self.send_oct = 0
        self.messages_delivered = 0
        #: The sessions, by the client's channel (begin, their frames, end).
        self.session_table = SessionTable(self)
        self._open_sent = False
        self._buf = bytearray()
        self._out: list[bytes] = []
        self._in_receive = False
        self._output_signalled = False
        #: The parts only the connection calls hold it weakly (no reference cycle:
        #: :mod:`common.weakly`); its sessions until it ends (:meth:`connection_lost`).
        me = weakly(self)
        #: The handshake's and the close's time-outs, the client's silence, our empty frames.
        self.timeouts = ConnectionTimeouts(settings, ctx.clock(), me)
        #: The protocol headers and the SASL exchange before ``open``.
        self._sasl = SaslLayer(me, ctx, peer_host, tls_identity)
        ctx.connections_1_0[self.id] = self

    # -- what the shell and the broker read ----------------------------------------------
    #: The management API's ``protocol`` of a connection (RabbitMQ's words).
    protocol = "AMQP 1-0"

    @property
    def sessions(self) -> dict[int, Session]:
        """The sessions, by the client's channel."""
        return self.session_table.sessions

    @property
    def channels(self) -> dict[int, Session]:
        """The sessions (``/api/connections``' ``channels``)."""
        return self.session_table.sessions

    @property
    def heartbeat(self) -> int:
        """The client's idle time-out in whole seconds (0: none)."""
        return round(self.peer_idle_timeout_ms / 1000)

    @property
    def frame_max(self) -> int:
        return self.peer_max_frame_size

    @property
    def is_open(self) -> bool:
        return self.state is S.OPEN

    @property
    def reading_paused(self) -> bool:
        return False  # publishers are held back by credit, not by an unread socket

    def set_state(self, new: State) -> None:
        if new is not S.CLOSED and new not in TRANSITIONS[self.state]:
            raise RuntimeError(f"AMQP 1.0 connection: illegal move {self.state} -> {new}")
        self.state = new

    # -- output --------------------------------------------------------------------------
    def write(self, data: bytes) -> None:
        if self.state is S.CLOSED:
            return
        self._out.append(data)
        self.signal_output()

    def signal_output(self) -> None:
        """Ask the shell for a flush (once until it takes the output), as when the HA
        primary serves again and its held dispositions may go out."""
        if not self._in_receive and not self._output_signalled and self.on_output is not None:
            self._output_signalled = True
            self.on_output()

    def send_frame(self, channel: int, performative: Any, kind: int = FRAME_AMQP) -> None:
        self.write(frame(channel, performative, kind=kind))

    def session_has_dispositions(self, session: Session) -> None:
        self.session_table.has_dispositions(session)
        self.signal_output()

    def data_to_send(self) -> bytes:
        """Everything to write now. An HA primary whose member lease lapsed holds it all
        (deliveries, dispositions: ``holds_output``, as for a 0-9-1 client) until it serves
        again and wakes the connection (:meth:`signal_output`); dispositions also wait for
        ``may_confirm``, as 0-9-1's confirms do."""
        self._output_signalled = False
        admission = self.ctx.admission
        if admission is not None and self.admitted and admission.holds_output(self):
            return b""
        table = self.session_table
        if table.dispositions_waiting and (admission is None or admission.may_confirm()):
            before = len(self._out)
            table.send_dispositions()
            if self.admitted and admission is not None and len(self._out) > before:
                admission.confirms_sent(self)
        if not self._out:
            return b""
        data = b"".join(self._out)
        self._out.clear()
        self.timeouts.wrote(self.ctx.clock())
        return data

    # -- input ---------------------------------------------------------------------------
    def receive_data(self, data: bytes) -> None:
        if self.state is S.CLOSED or self.should_close:
            return
        self._buf += data
        self.timeouts.read(self.ctx.clock())
        self.process()

    def parse_more(self) -> None:
        """Nothing waits for a later turn: a read is parsed whole (:attr:`unparsed`)."""

    def process(self, first: Callable[[], None] | None = None) -> None:
        self._in_receive = True
        try:
            if first is not None:
                first()
            self._parse()
        except Amqp10Error as error:
            self._buf.clear()
            self.connection_error(error)
        except Exception as exc:  # a broker bug: close this connection only, say why
            self._buf.clear()
            self.ctx.log.error("internal_error", connection=self.name, exception=repr(exc))
            self.connection_error(Amqp10Error(INTERNAL_ERROR, "internal error"))
        finally:
            self._in_receive = False

    def _parse(self) -> None:
        buf = self._buf
        pos = 0
        try:
            while not self.should_close:
                state = self.state
                if state is S.AWAIT_HEADER or state is S.AWAIT_AMQP_HEADER:
                    if len(buf) - pos < 8:
                        break
                    header = bytes(buf[pos : pos + 8])
                    pos += 8
                    self._sasl.header(header)
                    continue
                if state is S.AWAIT_LOGIN or state is S.CLOSED:
                    break
                if len(buf) - pos < 8:
                    break
                size, doff, kind, channel = FRAME_HEAD.unpack_from(buf, pos)
                if size > self.max_frame_size or size < 8 or doff < 2 or doff * 4 > size:
                    read_frame(buf, pos, self.max_frame_size)  # raises the framing error
                if len(buf) - pos < size:
                    break
                body = bytes(buf[pos + doff * 4 : pos + size])
                pos += size
                if state is S.OPEN and kind == FRAME_AMQP and body[:3] == TRANSFER_DESCRIPTOR:
                    # the hot path: a client's usual transfer, read by hand, on a session
                    fields = read_transfer(body)
                    if fields is not None and self.session_table.transfer(
                        channel, fields, body[fields[6] :]
                    ):
                        continue
                self._frame(kind, channel, body)
        finally:
            del buf[:pos]

    def _frame(self, kind: int, channel: int, body: bytes) -> None:
        state = self.state
        if state is S.AWAIT_SASL_INIT:
            self._sasl.frame(kind, body)
            return
        if kind != FRAME_AMQP:
            raise Amqp10Error(FRAMING_ERROR, f"frame of type {kind} after the SASL layer")
        if not body:
            return  # an empty frame: a heartbeat
        try:  # the usual flows, dispositions and transfers read by hand, others decoded
            found = read_flow_or_disposition(body) or decode_transfer(body)
            performative, at = codec.decode(body) if found is None else found
        except DecodeError as exc:
            raise Amqp10Error(DECODE_ERROR, str(exc)) from None
        if state is S.CLOSE_SENT:
            if isinstance(performative, Close):
                self.closed()
            return
        if state is S.AWAIT_OPEN:
            if not isinstance(performative, Open):
                raise Amqp10Error(
                    ILLEGAL_STATE, f"expected open, got {type(performative).__name__}"
                )
            self._open(performative)
            return
        if isinstance(performative, Close):
            self._client_close(performative)
            return
        if isinstance(performative, Begin):
            self.session_table.begin(channel, performative)
        else:
            self.session_table.frame(channel, performative, body[at:])

    # -- SASL (SaslLayer's port) --------------------------------------------------------
    def password_checked(self, matched: bool) -> None:
        """The shell ran :attr:`login_check`; go on with what came meanwhile."""
        check = self.login_check
        if check is None or self.state is not S.AWAIT_LOGIN:
            return
        self.login_check = None
        self.process(lambda: self._sasl.finish(check, matched))

    def logged_in(self, user: str) -> None:
        self.user = user

    def wait_for_password(self, check: PasswordCheck) -> None:
        self.login_check = check
        self.set_state(S.AWAIT_LOGIN)

    def login_skipped(self) -> None:
        self.refused_before_login = True

    def drop(self, reason: str) -> None:
        self.close_reason = reason
        self.should_close = True

    def refusal_without_login(self) -> AmqpError:
        """``open`` of a client whose login was skipped: the refusal as the admission
        words it now, before any virtual host or ACL check (a client not logged in learns
        nothing of those); if the broker began serving meanwhile, a refusal all the same
        (its password was never checked), ``amqp:connection:forced``: dial again."""
        ctx = self.ctx
        ctx.connections_refused_total += 1
        admission = ctx.admission
        refusal = None if admission is None else admission.refusal_before_login({})
        return refusal or RoutineRefusal(
            ReplyCode.NOT_ALLOWED,
            "HA broker began serving during this connection's handshake: connect again",
        )

    # -- open, begin, end, close ---------------------------------------------------------
    def _open(self, received: Open) -> None:
        ctx = self.ctx
        self.container_id = received.container_id
        self.peer_max_frame_size = min(int(received.max_frame_size), 0xFFFFFFFF)
        self.peer_idle_timeout_ms = int(received.idle_time_out or 0)
        self.channel_max = min(self.channel_max, int(received.channel_max))
        properties = received.properties or {}
        self.client_properties = {str(k): v for k, v in properties.items()}
        if self.peer_max_frame_size < MIN_MAX_FRAME_SIZE:
            raise Amqp10Error(
                FRAME_SIZE_TOO_SMALL,
                f"max-frame-size {self.peer_max_frame_size} is below {MIN_MAX_FRAME_SIZE}",
            )
        if self.refused_before_login:
            raise from_core(self.refusal_without_login(), Scope.CONNECTION)
        hostname = received.hostname or ""
        name = hostname[len(VHOST_PREFIX) :] if hostname.startswith(VHOST_PREFIX) else "/"
        try:
            found = open_vhost(ctx, self.user, self.name, name)
            if ctx.admission is not None:
                refusal = ctx.admission.admit(self)
                if refusal is not None:
                    ctx.connections_refused_total += 1
                    raise refusal
                self.admitted = True
            check_vhost_connections(ctx, self.client_properties, self.user, found)
        except AmqpError as error:
            raise from_core(error, Scope.CONNECTION) from None
        self.vhost = found
        self._send_open()
        self.set_state(S.OPEN)
        ctx.connections_opened_total += 1
        product = self.client_properties.get("product")
        ctx.log.info(
            "connection_opened",
            connection=self.name,
            peer=self.peer,
            user=self.user,
            vhost=found.name,
            client=f"AMQP 1.0 {product or received.container_id}",
            heartbeat=self.peer_idle_timeout_ms / 1000,
            frame_max=self.peer_max_frame_size,
        )

    def _send_open(self) -> None:
        settings = self.ctx.settings
        self._open_sent = True
        self.send_frame(
            0,
            Open(
                container_id=settings.node_name or "qpidd",
                max_frame_size=self.max_frame_size,
                channel_max=self.channel_max,
                idle_time_out=self.idle_timeout_ms or None,
                offered_capabilities=("ANONYMOUS-RELAY",),
                properties={"product": settings.product, "version": settings.version},
            ),
        )

    def _client_close(self, received: Close) -> None:
        error = received.error
        why = f"{error.condition} {error.description or ''}".strip() if error else "normal"
        self.close_reason = f"client closed: {why}"
        self.cleanup()
        self.send_frame(0, Close())
        self.set_state(S.CLOSE_SENT)
        self.closed()

    # -- errors and closing --------------------------------------------------------------
    def log_error(self, error: Amqp10Error, scope: str) -> None:
        self.ctx.protocol_errors_total += 1
        # A routine refusal (an HA backup sending a client on) is normal operation: info.
        log = self.ctx.log.info if error.routine else self.ctx.log.warning
        log(
            "protocol_error",
            connection=self.name,
            peer=self.peer,
            user=self.user,
            reply_code=None,
            reason=f"{error.condition}: {error.description}",
            scope=scope,
        )

    def connection_error(self, error: Amqp10Error) -> None:
        """Close the connection with ``error`` (an open of ours first if none was sent)."""
        self.log_error(error, "connection")
        if self.state in (S.CLOSE_SENT, S.CLOSED) or self.should_close:
            return
        if self.state in (S.AWAIT_HEADER, S.AWAIT_SASL_INIT, S.AWAIT_LOGIN, S.AWAIT_AMQP_HEADER):
            self.close_reason = f"{error.condition}: {error.description}"
            self.should_close = True
            return
        self.close_reason = f"{error.condition}: {error.description}"
        self.cleanup()
        if not self._open_sent:
            self._send_open()
        self.send_frame(0, Close(error=Error(error.condition, error.description, error.info)))
        self.set_state(S.CLOSE_SENT)
        self.timeouts.closing(self.ctx.clock())

    def drop_unsent(self) -> None:
        """Forget the output not written yet (an HA primary that stopped serving closes
        its clients: nothing it held may reach them)."""
        self._out.clear()

    def close(self, reply_code: ReplyCode, text: str) -> None:
        """Broker-initiated close (shutdown, a deleted vhost): close with
        ``amqp:connection:forced``."""
        if self.state is S.OPEN:
            self.close_reason = f"{int(reply_code)} {text}"
            self.cleanup()
            self.send_frame(0, Close(error=Error(CONNECTION_FORCED, text)))
            self.set_state(S.CLOSE_SENT)
            self.timeouts.closing(self.ctx.clock())
        elif self.state is not S.CLOSE_SENT:
            self.should_close = True

    def closed(self) -> None:
        self.state = S.CLOSED
        self.should_close = True

    def publishers_blocked(self, reason: str | None) -> None:
        """A resource alarm was raised (``reason``: no credit) or the last one cleared."""
        self.session_table.publishers_blocked(reason is not None)

    def set_writable(self, writable: bool) -> None:
        if writable == self.writable:
            return
        self.writable = writable
        if writable:
            self.session_table.writable_again()

    def tick(self) -> None:
        """Heartbeats and time-outs; call at least twice per idle time-out."""
        state, idle = self.state, self.idle_timeout_ms / 1000
        self.timeouts.tick(
            self.ctx.clock(),
            closing=state is S.CLOSE_SENT or state is S.CLOSED,
            handshaking=state is not S.OPEN,
            receive_timeout=idle,
            send_interval=self.peer_idle_timeout_ms / 2000,
            log=self.ctx.log,
            state=state.value,
        )

    def peer_silent(self) -> None:
        """The peer sent nothing for our idle time-out: close, resource-limit-exceeded."""
        idle = self.idle_timeout_ms / 1000
        self.ctx.log.warning("heartbeat_timeout", connection=self.name, heartbeat=idle)
        error = Amqp10Error(RESOURCE_LIMIT_EXCEEDED, "local-idle-timeout expired")
        self.connection_error(error)

    def send_heartbeat(self) -> None:
        """An empty frame is due (its time-outs), unless output waiting goes first."""
        if not self._out:
            self.write(EMPTY_FRAME)

    def cleanup(self) -> None:
        self.session_table.release()
        self.vhost.owner_closed(self)

    def connection_lost_steps(self, *, unread: int = 0, waited_s: float = 0.0) -> Steps[None]:
        """:meth:`connection_lost` in one slice (a 1.0 connection's links are few)."""
        self.connection_lost(unread=unread, waited_s=waited_s)
        yield from ()

    def connection_lost(self, *, unread: int = 0, waited_s: float = 0.0) -> None:
        """The socket is gone: release everything, log the close (a handshake abandoned
        with ``unread`` and ``waited_s``, as the 0-9-1 connection logs them)."""
        stopped_at = self.state
        handshake = stopped_at in HANDSHAKE
        self.cleanup()
        self.state = S.CLOSED
        # nothing it was given refers back to it any more (common.weakly): the shell's
        # callbacks dropped; its sessions, released, hold it weakly (cleanup)
        self.on_output = self.on_reading_changed = None
        self.ctx.connections_1_0.pop(self.id, None)
        if self.admitted and self.ctx.admission is not None:
            self.ctx.admission.released(self)
        if handshake and self.user is None and not self.should_close:
            self.ctx.log.info(
                "handshake_abandoned",
                connection=self.name,
                peer=self.peer,
                state=stopped_at.value,
                reason=self.close_reason or "socket closed",
                unread=unread,
                waited_s=round(waited_s, 3),
            )
        else:
            self.ctx.log.info(
                "connection_closed",
                connection=self.name,
                peer=self.peer,
                reason=self.close_reason or "socket closed",
                published=self.messages_published,
                delivered=self.messages_delivered,
            )
