"""One AMQP 0-9-1 connection, without I/O: bytes in, bytes out.

The asyncio shell (:mod:`broker.amqp.protocol`) feeds what it reads to
:meth:`Connection.receive_data` and writes what :meth:`Connection.data_to_send` returns; it
calls :meth:`Connection.tick` now and then for heartbeats and time-outs, and
:meth:`Connection.connection_lost` when the socket goes. Output that appears outside
``receive_data`` (a delivery caused by another connection's publish, a confirm released
later) is signalled through the ``on_output`` callback so the shell can flush.

The connection runs the handshake (start/start-ok, tune/tune-ok, open/open-ok: the
connection class, :mod:`broker.amqp.connection_methods`; what is offered and negotiated in
:mod:`broker.amqp.handshake`), checks framing (sizes, end octets, content sequence), and
passes publishes and content straight to their :class:`~broker.amqp.channel.Channel`, every
other frame to its :class:`~broker.amqp.frame_dispatch.FrameDispatch`; the frames of one read
past :data:`READ_SLICE` of methods wait for a later turn of the loop
(:attr:`~Connection.unparsed`, :meth:`~Connection.parse_more`), in order, the socket not
read meanwhile. While a channel's basic.get is held (its queue's delivery gate is
closed), the frames that follow on that channel are kept and replayed once it is
answered, with a bound on what is kept
(:mod:`broker.amqp.held_frames`: past it the connection is not read, ``reading_paused`` as
for a resource alarm; the shell follows it through ``on_reading_changed``; both reasons
are weighed in one place, the connection's
:class:`~broker.amqp.flow_control.FlowControl`). An admission policy that also
:class:`~broker.amqp.handshake.AdvertisesKnownHosts` (the HA role) names the hosts clients
should use in connection.open-ok's ``known-hosts``. A login whose password
needs the slow hash waits in ``AWAIT_LOGIN`` with :attr:`Connection.login_check` set: the
shell runs it off the event loop and calls :meth:`Connection.password_checked`; bytes read
meanwhile wait in the buffer. A hard :class:`~broker.core.errors.AmqpError` sends
connection.close with its reply code; the broker and every other connection carry on.
A close releases the channels a slice a turn of the loop (``ctx.turns``): a lost socket's
(:meth:`Connection.connection_lost_steps`, run by the shell) and a clean one's, the
client's connection.close, ours or an error's (:meth:`Connection.release_then`: its
close-ok or connection.close after the last slice, nothing read or sent meanwhile).

THREAD UNSAFE: one event loop owns the connection.
"""

from __future__ import annotations

import itertools
import struct
import time
from collections.abc import Callable
from typing import Any

from pamqp import commands
from pamqp.base import Frame as Method

from broker.amqp import framing
from broker.amqp.channel import Channel
from broker.amqp.connection_methods import ConnectionMethods
from broker.amqp.context import BrokerContext
from broker.amqp.flow_control import FlowControl
from broker.amqp.frame_dispatch import PUBLISH_ID, FrameDispatch
from broker.amqp.handshake import close_method
from broker.amqp.held_frames import HeldFrames
from broker.amqp.state import ChannelState, ConnectionState, check_transition
from broker.amqp.timeouts import ConnectionTimeouts
from broker.core.errors import AmqpError, ReplyCode, RoutineRefusal
from broker.security.sasl import PasswordCheck
from common.slices import SLICE, Steps, run_in_turns, run_steps
from common.weakly import weakly

S = ConnectionState
_ids = itertools.count(1)
_FRAME_HEAD = struct.Struct(">BHI")
_CHANNEL_OPEN = ChannelState.OPEN
#: The states the hot paths test, as module constants (an enum's attribute is looked up
#: through its class at each use).
_OPEN = S.OPEN
_CLOSED = S.CLOSED
_FRAME_METHOD = framing.FRAME_METHOD
_FRAME_HEADER = framing.FRAME_HEADER
_FRAME_BODY = framing.FRAME_BODY
_FRAME_END = framing.FRAME_END
_now = time.monotonic
#: Seconds of frames off the publish path (methods: consume, declare, ack...) one read
#: handles before the rest waits for the next turn of the loop: a backup's 1,700
#: basic.consume in one read were one step of 110-480 ms. Publish, content header and body
#: frames are not timed (the hot path); a read of them is bounded by its size.
READ_SLICE = 0.02


#: The states before connection.open-ok: a client gone then abandoned its handshake.
_HANDSHAKE = frozenset(
    {S.AWAIT_HEADER, S.AWAIT_START_OK, S.AWAIT_LOGIN, S.AWAIT_TUNE_OK, S.AWAIT_OPEN}
)


class Connection:
    """See the module docstring; it owns its :class:`ConnectionMethods` (the connection
    class), its :class:`HeldFrames`, its :class:`FrameDispatch` and its
    :class:`~broker.amqp.timeouts.ConnectionTimeouts`, each built with the connection as a
    small port (or with plain values)."""

    #: The management API's ``protocol`` of a connection (RabbitMQ's words).
    protocol = "AMQP 0-9-1"

    def __init__(
        self,
        ctx: BrokerContext,
        peer: str,
        on_output: Callable[[], None] | None = None,
        peer_host: str | None = None,
        tls_identity: str | None = None,
        encrypted: bool = False,
    ) -> None:
        self.ctx = ctx
        self.encrypted = encrypted  # over TLS (--require-encryption refuses the others)
        self.id = next(_ids)
        self.peer = peer
        self.peer_host = peer_host  # the peer's IP address; None: not on the network
        self.tls_identity = tls_identity  # the verified client certificate's common name
        self.name = f"{peer} #{self.id}"
        self.vhost = ctx.vhost
        self.on_output = on_output
        #: Offered the bytes read when the protocol header is not 0-9-1's: True when
        #: another protocol's connection takes the socket (AMQP 1.0: the shell's).
        self.on_other_header: Callable[[bytes], bool] | None = None
        self.state = S.AWAIT_HEADER
        self.channels: dict[int, Channel] = {}
        self.client_properties: dict[str, Any] = {}
        self.user: str | None = None
        #: start-ok's password hash to check: the shell runs it off the loop and calls
        #: :meth:`password_checked` (the connection waits in AWAIT_LOGIN meanwhile).
        self.login_check: PasswordCheck | None = None
        settings = ctx.settings
        self.frame_max = settings.frame_max
        self.channel_max = settings.channel_max
        self.heartbeat = 0
        self.writable = True
        self.should_close = False
        self.close_reason: str | None = None
        #: The owned parts that only the connection calls hold it weakly (no reference
        #: cycle: :mod:`common.weakly`); its connection class (which has it admitted) and
        #: its frames' dispatch (every method frame: a weak proxy's reads cost 40 ns more
        #: each) until its end (:meth:`ended`).
        me = weakly(self)
        #: The handshake's and the close's time-outs, the client's silence, our heartbeats.
        self.timeouts = ConnectionTimeouts(settings, ctx.clock(), me)
        #: What was read and not parsed yet: the read itself when nothing was left before it
        #: (most reads: parsed where it lies, no copy), else the rest joined with it.
        self._buf = b""
        self._out: list[bytes] = []
        self._heartbeat_due = False  # one goes out alone while output is held (HA lease)
        self._in_receive = False
        self._output_signalled = False
        self._confirm_channels: set[Channel] = set()
        self._pumps: dict[int, Callable[[], None]] = {}
        self._cleaned_up = False
        #: A clean close releases the channels, a slice a turn of the loop
        #: (:meth:`release_then`): its consumers take nothing, nothing is read, what is
        #: written is dropped.
        self.releasing = False
        #: The release under way (None: none), and the output written before it began,
        #: sent with the close-ok (or connection.close) after it.
        self._release: Steps[None] | None = None
        self._kept_out: list[bytes] = []
        #: Frames of the last read wait in the buffer for a later turn of the loop (the
        #: read's :data:`READ_SLICE` was spent): the shell reads nothing more and calls
        #: :meth:`parse_more` next turn.
        self.unparsed = False
        #: The admission policy admitted it (it is told when the connection goes).
        self.admitted = False
        self.messages_published = 0
        #: Bytes read from and written to the socket (RabbitMQ's recv_oct, send_oct): counted
        #: by the asyncio shell at each read and write, made rates by the console's sampler.
        self.recv_oct = 0
        self.send_oct = 0
        self.messages_delivered = 0
        self.methods = ConnectionMethods(self, ctx)
        self._held = HeldFrames(me, self.channels, self.name, ctx.log)
        self._dispatch = FrameDispatch(self, ctx, self.methods, self._held)
        #: Whether it is read (resource alarms, held frames): the shell follows it.
        self.flow = FlowControl(me, self._held, ctx.publish_alarm)
        self._on_reading_changed: Callable[[], None] | None = None
        #: ``reading_paused`` as the shell was last told (its two sources: the flow's
        #: reasons, a release: :meth:`_reading_changed`).
        self._paused_told = False
        self.flow.on_reading_changed = self._reading_changed
        ctx.connections[self.id] = self

    # -- properties --------------------------------------------------------------------
    @property
    def is_open(self) -> bool:
        return self.state is S.OPEN

    def capability(self, name: str) -> bool:
        """A flag from the client's ``capabilities`` table."""
        caps = self.client_properties.get("capabilities")
        return isinstance(caps, dict) and bool(caps.get(name))

    @property
    def held_bytes(self) -> int:
        """Bytes of the frames kept behind held basic.gets (see :mod:`.held_frames`)."""
        return self._held.held_bytes

    def set_state(self, new: ConnectionState) -> None:
        check_transition(self.state, new)
        self.state = new

    # -- output ------------------------------------------------------------------------
    def write(self, data: bytes) -> None:
        if self.state is _CLOSED:
            # Nothing follows close-ok: after a client's connection.close the socket stays
            # open (until the client closes it, or close_timeout), and a reply a barrier
            # releases meanwhile, or a confirm settled before the close, is dropped.
            return
        self._out.append(data)
        # signal_output, inline: one call less a delivery
        if not self._in_receive and not self._output_signalled and self.on_output is not None:
            self._output_signalled = True
            self.on_output()

    def signal_output(self) -> None:
        if not self._in_receive and not self._output_signalled and self.on_output is not None:
            self._output_signalled = True
            self.on_output()

    def send_method(self, channel: int, method: Method) -> None:
        self.write(framing.marshal_method(method, channel))

    def confirms_settled(self, channel: Channel) -> None:
        """A channel has confirm replies to send (called by its PublisherConfirms)."""
        self._confirm_channels.add(channel)
        self.signal_output()

    def request_pump(self, key: int, pump: Callable[[], None]) -> None:
        """Run ``pump`` (once, however often asked) before the next flush.

        Producers of output that batch (the HA replication streams) ask for a pump when
        there is new work and write everything pending when it runs.
        """
        self._pumps[key] = pump
        self.signal_output()

    def data_to_send(self) -> bytes:
        """Everything to write now (confirm replies included). The admission policy's
        answers are queries that change nothing (whether a lapsed member lease holds this
        connection's output; ``may_confirm``, the confirm path's gate after its holds:
        ``CONFIRM_PATH`` in broker/core/queue_contracts.py); what to do about a lease that
        ran out (fence) or lapsed is decided by the HA broker, not here."""
        self._output_signalled = False
        if self.releasing:
            return b""  # sent after the release, with the close (nothing written meanwhile)
        admission = self.ctx.admission
        if admission is not None and self.admitted and admission.holds_output(self):
            # an HA primary not serving: woken when it serves again; heartbeats still go
            if not self._heartbeat_due:
                return b""
            self._heartbeat_due = False
            self.timeouts.wrote(self.ctx.clock())
            return framing.HEARTBEAT_FRAME
        self._heartbeat_due = False
        if self._pumps:
            self._run_pumps()
        if self._confirm_channels:
            if self.ctx.admission is None or self.ctx.admission.may_confirm():
                channels = self._confirm_channels
                self._confirm_channels = set()
                before = len(self._out)
                for channel in channels:
                    channel.send_confirm_replies()
                if self.admitted and self.ctx.admission is not None and len(self._out) > before:
                    self.ctx.admission.confirms_sent(self)
            else:  # kept for a later flush, which each channel's next settled confirm asks for
                for channel in self._confirm_channels:
                    channel.confirms_deferred()
        if not self._out:
            return b""
        data = b"".join(self._out)
        self._out.clear()
        self.timeouts.wrote(self.ctx.clock())
        return data

    def _run_pumps(self) -> None:
        """The pumps asked for, in order, for :data:`READ_SLICE` at most: the rest run at a
        later flush, a turn of the loop later (a backup's 10,000 queue streams all made
        ready by one read were one long step)."""
        pumps = list(self._pumps.items())
        self._pumps.clear()
        deadline = _now() + READ_SLICE
        for i, (_key, pump) in enumerate(pumps, 1):
            pump()
            if i < len(pumps) and _now() >= deadline:
                # the rest first, then those asked for again meanwhile
                self._pumps = dict(pumps[i:]) | self._pumps
                self.signal_output()
                return

    # -- input -------------------------------------------------------------------------
    def receive_data(self, data: bytes) -> None:
        """Process bytes read from the peer."""
        if self.state is S.CLOSED or self.should_close:
            return
        self._buf = self._buf + data if self._buf else bytes(data)
        self.timeouts.read(self.ctx.clock())
        if not self.releasing:  # else kept for the close's state (reading paused)
            self.process()

    def password_checked(self, matched: bool) -> None:
        """The shell ran :attr:`login_check` (``matched``: the password is right): log in
        or refuse, then go on with what the client sent meanwhile."""
        check = self.login_check
        if check is None or self.state is not S.AWAIT_LOGIN:
            return  # closed meanwhile
        self.login_check = None
        methods = self.methods
        self.process(lambda: methods.logged_in(methods.finish_login(check, matched)))

    def process(self, first: Callable[[], None] | None = None) -> None:
        """``first`` (if any), then parse the buffer; errors close this connection only."""
        self._in_receive = True
        try:
            if first is not None:
                first()
            self._parse()
            if self.state is S.OPEN and self.flow.blocked_by is not None:
                self.flow.after_read()
        except AmqpError as error:
            self._buf = b""
            self.connection_error(error)
        except Exception as exc:  # a broker bug: close this connection only, say why
            self._buf = b""
            self.ctx.log.error("internal_error", connection=self.name, exception=repr(exc))
            self.connection_error(AmqpError(ReplyCode.INTERNAL_ERROR, "internal error"))
        finally:
            self._in_receive = False

    def parse_more(self) -> None:
        """Go on with the frames a read left for a later turn of the loop (:attr:`unparsed`)."""
        if self.state is S.CLOSED or self.should_close or self.releasing:
            self.unparsed = False
            return
        self.process()

    def _parse(self) -> None:
        buf = self._buf
        pos = 0
        self.unparsed = False
        if self.state is S.AWAIT_LOGIN:
            return  # keep what comes until the login is decided
        if self.state is S.AWAIT_HEADER:
            if len(buf) < 8:
                if not framing.PROTOCOL_HEADER.startswith(bytes(buf[:4])[: len(buf)]):
                    self.methods.bad_protocol_header(bytes(buf))
                return
            header = bytes(buf[:8])
            if header != framing.PROTOCOL_HEADER:
                other = self.on_other_header
                if other is not None and other(bytes(buf)):
                    self._buf = b""  # another protocol's connection took the socket
                    self.ctx.connections.pop(self.id, None)
                    return
                self.methods.bad_protocol_header(header)
                return
            pos = 8
            self.methods.send_start()
        limit = self.frame_max
        max_payload = limit - framing.FRAME_OVERHEAD
        channels = self.channels
        end_of_data = len(buf)
        if end_of_data - pos < 7:  # not even a frame's head
            self._buf = buf[pos:]
            return
        data = buf  # each frame's payload one slice of it
        unpack = _FRAME_HEAD.unpack_from
        publish_here = self.ctx.acl is None  # with an ACL: publishes checked in FrameDispatch
        deadline = 0.0  # set at the first frame off the publish path
        # A whole publish (method, content header, one body frame) split natively, in one
        # call; else (not built, not a publish, not whole, arguments not decoded before)
        # the frames one at a time, as below.
        scan = framing.scan_publish if publish_here else None
        decoded = framing.DECODED_PUBLISHES
        while end_of_data - pos >= 7:
            if scan is not None and self.state is _OPEN:
                whole = scan(data, pos, max_payload, decoded)
                if whole is not None:
                    channel, method_end, whole_end, arguments, raw, body = whole
                    ch = channels.get(channel)
                    if ch is not None and ch.state is _CHANNEL_OPEN and ch.held_frames is None:
                        # all three taken, or the method only (refused, or the body over
                        # the limit: the header then closes the channel, as below)
                        took = ch.publisher.publish_decoded(arguments, raw, body)
                        pos = whole_end if took else method_end
                        continue
            ftype, channel, size = unpack(data, pos)
            if size > max_payload:
                raise AmqpError(
                    ReplyCode.FRAME_ERROR,
                    f"frame of {size + framing.FRAME_OVERHEAD} bytes exceeds frame-max {limit}",
                )
            end = pos + 7 + size
            if end >= end_of_data:
                break
            if data[end] != _FRAME_END:
                raise AmqpError(
                    ReplyCode.FRAME_ERROR, f"frame end octet is {data[end]:#04x}, expected 0xce"
                )
            payload = data[pos + 7 : end]
            pos = end + 1
            if channel and self.state is _OPEN:
                # Hot path: publish, content header and body on an open channel.
                ch = channels.get(channel)
                if ch is not None and ch.state is _CHANNEL_OPEN and ch.held_frames is None:
                    if ftype == _FRAME_BODY:
                        ch.publisher.content_body(payload)
                        continue
                    if ftype == _FRAME_HEADER:
                        ch.publisher.content_header(payload)
                        continue
                    if ftype == _FRAME_METHOD and publish_here and payload.startswith(PUBLISH_ID):
                        # Its content header and a one-frame body right behind it, whole in
                        # this read: the publish taken in one step (inline: a function call
                        # a frame is 2 % of a message). Else the frames one at a time.
                        if end_of_data - pos >= 15:
                            kind, number, size = unpack(data, pos)
                            head_end = pos + 7 + size
                            if (
                                kind == _FRAME_HEADER
                                and number == channel
                                and size <= max_payload
                                and head_end + 8 < end_of_data
                                and data[head_end] == _FRAME_END
                            ):
                                kind, number, size = unpack(data, head_end + 1)
                                body_end = head_end + 8 + size
                                if (
                                    kind == _FRAME_BODY
                                    and number == channel
                                    and size <= max_payload
                                    and body_end < end_of_data
                                    and data[body_end] == _FRAME_END
                                ):
                                    if ch.publisher.publish_whole(
                                        payload,
                                        data[pos + 7 : head_end],
                                        data[head_end + 8 : body_end],
                                    ):
                                        pos = body_end + 1
                                    continue
                        ch.publisher.publish_method(payload)
                        continue
            if not deadline:
                deadline = _now() + READ_SLICE
            self.frame(ftype, channel, payload)
            if self.should_close or self.state is _CLOSED or self.releasing:
                pos = end_of_data
                break
            if self.login_check is not None:
                break  # AWAIT_LOGIN: the rest waits for the password check
            if _now() >= deadline:
                self.unparsed = end_of_data - pos >= 7  # the rest in a later turn, in order
                break
        self._buf = data[pos:] if pos else data

    def frame(self, ftype: int, channel: int, payload: bytes) -> None:
        """Handle one frame off the publish path (its :class:`FrameDispatch`)."""
        self._dispatch.frame(ftype, channel, payload)

    # -- channels ----------------------------------------------------------------------
    def open_channel(self, number: int) -> None:
        """Make channel ``number`` (its channel.open came) and answer open-ok."""
        if len(self.channels) >= self.channel_max:  # a count, as RabbitMQ: any number 1..65535
            raise AmqpError(
                ReplyCode.NOT_ALLOWED,
                f"number of channels opened ({len(self.channels)}) has reached the"
                f" negotiated channel_max ({self.channel_max})",
                20,
                10,
            )
        channel = Channel(self, number)
        self.channels[number] = channel
        self.send_method(number, commands.Channel.OpenOk())

    def channel_closed(self, channel: Channel) -> None:
        """The channel's close handshake finished: its number may be reused."""
        if self.channels.get(channel.number) is channel:
            del self.channels[channel.number]
        self._confirm_channels.discard(channel)

    # -- the frames kept behind held basic.gets (HeldFrames and its port) --------------
    def held_frames_dropped(self, frames: list[tuple[int, bytes]]) -> None:
        """A channel closed or released while its get was held: its kept frames are gone."""
        self._held.dropped(frames)

    def replay_held_frames(self, number: int) -> None:
        """A held basic.get was answered: replay what its channel kept, before the next
        flush."""
        self._held.replay(number)

    @property
    def replaying(self) -> bool:
        return self.state is S.OPEN and not self.should_close and not self.releasing

    def pumps_requested(self) -> None:
        if self._pumps:
            self.signal_output()

    # -- reading (its FlowControl) -----------------------------------------------------
    @property
    def reading_paused(self) -> bool:
        """Not to be read (the shell pauses the socket); see :mod:`.flow_control`; nor
        while a clean close releases the channels (:meth:`release_then`)."""
        return self.flow.reading_paused or self.releasing

    @property
    def blocked_by(self) -> str | None:
        """A resource alarm's reason while publishers are blocked."""
        return self.flow.blocked_by

    @property
    def on_reading_changed(self) -> Callable[[], None] | None:
        """Called when ``reading_paused`` changes (the shell pauses or resumes reading)."""
        return self._on_reading_changed

    @on_reading_changed.setter
    def on_reading_changed(self, callback: Callable[[], None] | None) -> None:
        self._on_reading_changed = callback

    def publishers_blocked(self, reason: str | None) -> None:
        """A resource alarm was raised (``reason``) or the last one cleared (None)."""
        self.flow.publishers_blocked(reason)

    def reading_changed(self) -> None:
        self.flow.reading_changed()

    def reading_resumed(self) -> None:
        self.timeouts.read(self.ctx.clock())  # the client's heartbeats were not read meanwhile

    def set_writable(self, writable: bool) -> None:
        """The transport's write buffer crossed a water mark."""
        if writable == self.writable or self._cleaned_up:  # closing: nothing to resume
            return
        self.writable = writable
        if writable:
            for channel in list(self.channels.values()):
                channel.deliveries.resume_deliveries()

    # -- errors and closing ------------------------------------------------------------
    def connection_error(self, error: AmqpError) -> None:
        """Close the whole connection with the error's reply code."""
        ctx = self.ctx
        ctx.protocol_errors_total += 1
        # A routine refusal (an HA backup sending a client on) is normal operation: info.
        log = ctx.log.info if isinstance(error, RoutineRefusal) else ctx.log.warning
        log(
            "protocol_error",
            connection=self.name,
            peer=self.peer,
            user=self.user,
            reply_code=int(error.reply_code),
            reply_text=error.reply_text,
            scope="connection",
        )
        if self.state in (S.CLOSING, S.CLOSED):
            return
        if self.state is S.AWAIT_HEADER:
            self.should_close = True
            return
        if self.releasing:
            return  # a close under way
        self.close_reason = f"{int(error.reply_code)} {error.reply_text}"
        close = close_method(
            int(error.reply_code), error.wire_text(), error.class_id, error.method_id
        )
        self.release_then(lambda: self._close_sent(close))

    def _close_sent(self, close: Method) -> None:
        """Our connection.close, after the release: wait for close-ok (what the client
        sent meanwhile is handled as in CLOSING: a crossing close answered)."""
        if self.state is S.CLOSED:
            return
        self.send_method(0, close)
        self.set_state(S.CLOSING)
        self.timeouts.closing(self.ctx.clock())
        if self._buf and not self._in_receive:  # read during a release in turns
            self.process()

    def drop_unsent(self) -> None:
        """Forget the output not written yet: an HA primary that stopped serving holds it
        (deliveries, get-oks, confirms) and, closing the connection, must not send it; the
        deliveries go back to their queues with the channels at the close."""
        self._out.clear()
        self._kept_out.clear()

    def close(self, reply_code: ReplyCode, text: str) -> None:
        """Broker-initiated close (shutdown, fencing): connection.close then wait."""
        if self.releasing:
            return  # a close under way
        if self.state is S.OPEN:
            self.close_reason = f"{int(reply_code)} {text}"
            close = close_method(int(reply_code), f"{reply_code.name} - {text}")
            self.release_then(lambda: self._close_sent(close))
        elif self.state is not S.CLOSING:  # mid-handshake, or closed by the client already
            self.should_close = True

    def closed(self) -> None:
        if self.state is not S.CLOSED:
            self.set_state(S.CLOSED)
        self.should_close = True

    def closed_by_client(self) -> None:
        """The client's connection.close came: release the channels (:meth:`release_then`),
        then answer close-ok; the frames that follow the close are never handled."""
        self.release_then(self._close_ok_sent)

    def _close_ok_sent(self) -> None:
        """close-ok, after the release: as RabbitMQ, leave the socket for the client to
        close after it reads close-ok (a client that sees EOF first may take the close for
        a failure), and drop it ourselves after ``close_timeout``."""
        if self.state is S.CLOSED:
            return  # the socket went meanwhile
        self.send_method(0, commands.Connection.CloseOk())
        self.set_state(S.CLOSED)
        self.timeouts.closing(self.ctx.clock())

    def tick(self) -> None:
        """Heartbeats and time-outs; call at least twice per heartbeat interval."""
        state, heartbeat = self.state, self.heartbeat
        self.timeouts.tick(
            self.ctx.clock(),
            closing=state is S.CLOSING or state is S.CLOSED,
            handshaking=state is not S.OPEN,
            receive_timeout=2 * heartbeat,
            send_interval=heartbeat / 2,
            reading_paused=self.reading_paused,
            log=self.ctx.log,
            state=state.value,
        )

    def peer_silent(self) -> None:
        """The client sent nothing for two heartbeat intervals: drop the socket."""
        heartbeat = self.heartbeat
        self.close_reason = f"missed heartbeats from client, timeout: {heartbeat}s"
        self.ctx.log.warning("heartbeat_timeout", connection=self.name, heartbeat=heartbeat)
        self.should_close = True

    def send_heartbeat(self) -> None:
        """A heartbeat is due (its time-outs): one now, or after the output waiting."""
        if not self._out:
            self.write(framing.HEARTBEAT_FRAME)
        else:  # output waiting: flushed soon, or held (then it alone)
            self._heartbeat_due = True
            self.signal_output()

    def release_then(self, done: Callable[[], None], size: int = SLICE) -> None:
        """A clean close (the client's connection.close, ours, a connection error): release
        the channels and what the connection owns (:meth:`_cleanup_steps`), ``size`` a
        slice, a slice a turn of the loop (``ctx.turns``; all at once without one), then
        ``done`` (close-ok, or our connection.close), as the lost socket's
        :meth:`connection_lost_steps` does: a backup's replication link has a channel a
        queue stream, 10,000 released at once were one step of 119 ms on a loaded primary.

        Until the last slice (:attr:`releasing`): the connection's consumers take nothing
        (``writable`` False: one flag of the connection that each consumer's
        ``can_deliver`` reads), so the queues keep their messages for the other
        consumers; the socket is not read (what was read stays in the buffer: after a
        client's close it is never handled, after ours it is as in CLOSING); what is
        written (a heartbeat, a reply released by the store or the backups) is dropped,
        never sent after the client's close; what was written before the release goes out
        with ``done``'s. A held basic.get answered meanwhile is booked unacknowledged
        (whatever its no-ack), so its channel's slice requeues it with the rest."""
        if self._cleaned_up:  # released already
            done()
            return
        self.releasing = True
        self.writable = False
        self._kept_out, self._out = self._out, []

        def steps() -> Steps[None]:
            yield from self._cleanup_steps(size)
            self._out, self._kept_out = self._kept_out, []
            self.releasing = False
            self._release = None
            done()
            if not self.flow.reading_paused:
                self.reading_resumed()
            self._reading_changed()
            self.signal_output()

        self._release = release = steps()
        turns = self.ctx.turns
        run_in_turns(release, None if turns is None else turns.later)
        if self.releasing:  # the rest in later turns: the socket not read meanwhile
            self._reading_changed()

    def _reading_changed(self) -> None:
        """The flow's reasons or a release changed: the shell is told if
        ``reading_paused`` did."""
        paused = self.reading_paused
        if paused != self._paused_told:
            self._paused_told = paused
            if self._on_reading_changed is not None:
                self._on_reading_changed()

    def _cleanup_steps(self, size: int = SLICE) -> Steps[None]:
        """Release the channels and what the connection owns, once, ``size`` channels a
        slice. While a clean close's release is under way (:meth:`release_then`): that
        release to its end (its close-ok or connection.close included), a slice at each
        step here as at each of its own turns."""
        if self._cleaned_up:
            release = self._release
            if release is not None:
                yield from release
            return
        self._cleaned_up = True
        channels = list(self.channels.values())
        for start in range(0, len(channels), size):
            if start:
                yield
            for channel in channels[start : start + size]:
                channel.release_resources()
        self.vhost.owner_closed(self)

    def connection_lost(self) -> None:
        """The socket is gone: release everything, log the close."""
        run_steps(self.connection_lost_steps())

    def _abandoned(self, unread: int, waited_s: float) -> dict[str, float | int]:
        """Where the time of a handshake abandoned went, for its log line: the socket's
        wait to be made (``waited_s``), the connection's life since (``lived_s``), the
        seconds since its last read and its last write (connection.start, at
        ``await-start-ok``), and what was read but not handled: kept by the shell for a
        later turn of the loop (``unread``) or by the connection (``buffered``)."""
        now = self.ctx.clock()
        timeouts = self.timeouts
        return {
            "waited_s": round(waited_s, 3),
            "lived_s": round(now - timeouts.created, 3),
            "read_s_ago": round(now - timeouts.last_read, 3),
            "wrote_s_ago": round(now - timeouts.last_write, 3),
            "unread": unread,
            "buffered": len(self._buf),
        }

    def connection_lost_steps(
        self, size: int = SLICE, *, unread: int = 0, waited_s: float = 0.0
    ) -> Steps[None]:
        """:meth:`connection_lost` in slices (:mod:`common.slices`): the channels are
        released ``size`` a slice, then the connection is closed and logged. Until the
        last slice it is listed as before; what it writes meanwhile goes nowhere (the
        socket is gone), and what its channels' consumers are sent meanwhile is requeued
        with the rest at their channel's slice. Lost while a clean close's release runs
        (:meth:`release_then`): that release goes on to its end, then the connection is
        closed and logged, once.

        ``unread``, ``waited_s``: what the shell knows of a handshake abandoned (bytes it
        read and had not handed over yet; the seconds its socket waited between its accept
        and this connection's making), logged with it (:meth:`_abandoned`)."""
        was_open = self.state in (S.OPEN, S.CLOSING) or self.close_reason is not None
        handshake = self.state  # where a client that hung up mid-handshake stopped
        yield from self._cleanup_steps(size)
        self.channels.clear()
        if self.state is not S.CLOSED:
            self.state = S.CLOSED
        self.ctx.connections.pop(self.id, None)
        if self.admitted and self.ctx.admission is not None:
            self.ctx.admission.released(self)
        if handshake in _HANDSHAKE and self.user is None and not self.should_close:
            # The client hung up (or reset) before logging in; a bare TCP probe at debug.
            log = self.ctx.log.debug if handshake is S.AWAIT_HEADER else self.ctx.log.info
            log(
                "handshake_abandoned",
                connection=self.name,
                peer=self.peer,
                state=handshake.value,
                reason=self.close_reason or "socket closed",
                **self._abandoned(unread, waited_s),
            )
        elif was_open or self.user is not None:
            self.ctx.log.info(
                "connection_closed",
                connection=self.name,
                peer=self.peer,
                reason=self.close_reason or "socket closed",
                published=self.messages_published,
                delivered=self.messages_delivered,
            )
        self.ended()

    def ended(self) -> None:
        """The connection's last step (its socket gone and everything released, or its
        socket handed to another protocol's connection): nothing it owns or was given
        refers back to it any more, so reference counting frees it and its parts at once
        (:mod:`common.weakly`): the shell's callbacks are dropped, its connection class
        and its frames' dispatch hold it weakly, and the channels and pumps still listed
        are forgotten. What calls it later (a confirm settled, a pump asked for) finds it
        closed, as before."""
        self.on_output = None
        self.on_other_header = None
        self._on_reading_changed = None
        self.flow.on_reading_changed = None
        self.methods.host = weakly(self.methods.host)
        self._dispatch.connection_ended()
        self._confirm_channels.clear()
        self._pumps.clear()
