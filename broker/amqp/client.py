"""A small asyncio AMQP 0-9-1 client: the HA link to the primary, and admin tools.

Contract:

- :func:`connect` opens a TCP connection, sends the protocol header and runs the handshake
  (start/start-ok with PLAIN, AMQPLAIN or ANONYMOUS, tune/tune-ok, open of vhost ``/``),
  all bounded by ``timeout``. A broker that answers the handshake with connection.close
  (530 NOT_ALLOWED from a backup that refuses clients, 403 ACCESS_REFUSED for a bad login)
  raises :class:`ConnectionRefusedByBroker`; a socket error, EOF, time-out or garbled
  handshake raises :class:`ConnectionFailed`. Both subclass :class:`ClientError`.
- :class:`AmqpClient` owns the socket. A reader task parses frames (a frame's size is
  checked against frame-max before its ``8 + size`` bytes are taken), assembles content
  (method, header and any number of body frames) and dispatches it per channel; a heartbeat
  task sends a heartbeat every ``heartbeat / 2`` seconds in which nothing else was sent and
  drops the connection when nothing was received for ``2 x heartbeat``. However the
  connection ends (broker close, EOF, heartbeat time-out, protocol error, a raising
  callback, :meth:`AmqpClient.close`), :meth:`AmqpClient.wait_closed` returns the reason, a
  :class:`ClientError`; pending calls fail with it.
- :class:`ClientChannel` does queue declaration, qos, consume (a callback per delivery,
  called synchronously on the loop, in the order of the wire), ack, publish (optionally in
  confirm mode), get and close. A channel.close from the broker fails the channel's pending
  calls with :class:`ChannelClosedByBroker`; a basic.cancel from the broker (queue deleted)
  calls the consumer's ``on_cancel``.
- Writes go straight to the ``StreamWriter``; async calls honour ``drain()``, the
  non-async :meth:`ClientChannel.ack` only writes. Content properties travel as raw bytes
  (property flags and list), never decoded here.
- An exception raised by a delivery or cancel callback closes the connection (541) with
  :class:`CallbackError`: the client never swallows a failure of its consumer.

THREAD UNSAFE: a client, its channels and its callbacks belong to the event loop that ran
:func:`connect` (asyncio's default loop or uvloop); use them from that loop only.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import struct
from collections import deque
from collections.abc import Callable
from types import TracebackType
from typing import Any, NamedTuple, TypeVar

from pamqp import commands, encode
from pamqp.base import Frame as Method

from broker.amqp import framing
from broker.core.errors import AmqpError, ReplyCode

__all__ = [
    "AmqpClient",
    "CallbackError",
    "ChannelClosedByBroker",
    "ChannelClosedByClient",
    "ClientChannel",
    "ClientError",
    "ConnectionClosedByBroker",
    "ConnectionClosedByClient",
    "ConnectionFailed",
    "ConnectionRefusedByBroker",
    "Delivery",
    "PublishNacked",
    "connect",
]

CLIENT_PRODUCT = "qpid-ha-py client"
CLIENT_VERSION = "0.1.0"
#: How long :meth:`AmqpClient.close` waits for connection.close-ok by default.
CLOSE_TIMEOUT = 2.0
#: StreamReader buffer limit and read size: large, so a busy link reads in big chunks.
_READ_LIMIT = 1 << 22
_READ_SIZE = 1 << 20

_FRAME_HEAD = struct.Struct(">BHI")
_U32 = struct.Struct(">I")
_QB = struct.Struct(">QB")
_ACK_FRAME = struct.Struct(">BHIIQBB")  # head, method id, tag, bits, frame end
_DELIVER = 0x003C003C
_ACK = 0x003C0050
_FRAME_END = framing.FRAME_END
_FRAME_METHOD = framing.FRAME_METHOD
_FRAME_HEADER = framing.FRAME_HEADER
_FRAME_BODY = framing.FRAME_BODY
_FRAME_HEARTBEAT = framing.FRAME_HEARTBEAT

# content kinds a channel may be assembling
_NONE, _DELIVERY, _GET, _RETURN = 0, 1, 2, 3


# -- errors ------------------------------------------------------------------------------
class ClientError(Exception):
    """Base of every error this client raises or reports."""


class ConnectionFailed(ClientError):
    """The socket failed or closed, the handshake timed out, or the peer broke protocol."""


class CallbackError(ClientError):
    """A consumer's callback raised; the connection was closed (541). ``__cause__`` tells."""


class _ReplyError(ClientError):
    """An error carrying an AMQP reply code and text."""

    def __init__(self, reply_code: int, reply_text: str) -> None:
        super().__init__(int(reply_code), reply_text)
        self.reply_code = int(reply_code)
        self.reply_text = reply_text

    def __str__(self) -> str:
        return f"{self.reply_code} {self.reply_text}"


class ConnectionRefusedByBroker(_ReplyError):
    """The broker answered the handshake with connection.close (403, 530, ...)."""


class ConnectionClosedByBroker(_ReplyError):
    """The broker closed an open connection (320 on shutdown, 541, ...)."""


class ConnectionClosedByClient(_ReplyError):
    """This client closed the connection (:meth:`AmqpClient.close`)."""


class ChannelClosedByBroker(_ReplyError):
    """The broker closed the channel (404 NOT_FOUND, 406 PRECONDITION_FAILED, ...)."""


class ChannelClosedByClient(_ReplyError):
    """This client closed the channel (:meth:`ClientChannel.close`)."""


class PublishNacked(ClientError):
    """The broker answered a publish in confirm mode with basic.nack."""


class _ProtocolError(Exception):
    """The broker broke the protocol: close the connection with this code."""

    def __init__(self, reply_code: int, reply_text: str) -> None:
        super().__init__(reply_code, reply_text)
        self.reply_code = reply_code
        self.reply_text = reply_text


class _Abort(Exception):
    """Stop parsing: the connection is being closed for ``reason``."""

    def __init__(self, reason: ClientError, reply_code: int, reply_text: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.reply_code = reply_code
        self.reply_text = reply_text


_E = TypeVar("_E", bound=BaseException)


def _fresh(error: _E) -> _E:
    """A copy of ``error`` to raise (one instance raised many times grows a traceback)."""
    duplicate = copy.copy(error)
    duplicate.__traceback__ = None
    return duplicate


# -- deliveries --------------------------------------------------------------------------
class Delivery(NamedTuple):
    """One message from basic.deliver (or basic.get-ok, with an empty consumer tag).

    Immutable; a ``NamedTuple`` because it is built for every delivery on the hot path.
    ``properties_raw`` is the content header's property flags and list, undecoded.
    """

    delivery_tag: int
    redelivered: bool
    exchange: str
    routing_key: str
    properties_raw: bytes
    body: bytes
    consumer_tag: str


DeliveryCallback = Callable[[Delivery], None]
CancelCallback = Callable[[str], None]


def _decode_deliver(payload: bytes) -> tuple[str, int, bool, str, str]:
    """basic.deliver arguments: (consumer tag, delivery tag, redelivered, exchange, key)."""
    length = payload[4]
    pos = 5 + length
    consumer_tag = payload[5:pos].decode()
    delivery_tag, bits = _QB.unpack_from(payload, pos)
    pos += 9
    length = payload[pos]
    start = pos + 1
    pos = start + length
    exchange = payload[start:pos].decode()
    length = payload[pos]
    start = pos + 1
    pos = start + length
    routing_key = payload[start:pos].decode()
    if pos != len(payload):
        raise _ProtocolError(ReplyCode.SYNTAX_ERROR, "malformed basic.deliver arguments")
    return consumer_tag, delivery_tag, bool(bits & 1), exchange, routing_key


def _text(value: Any) -> str:
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    return str(value if value is not None else "")


def _method_frame(method: Method, channel: int) -> bytes:
    return framing.marshal_method(method, channel)


# -- connection --------------------------------------------------------------------------
class AmqpClient:
    """An open AMQP 0-9-1 connection; build it with :func:`connect`."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        server_properties: dict[str, Any],
        frame_max: int,
        channel_max: int,
        heartbeat: int,
    ) -> None:
        self.server_properties = server_properties
        #: Negotiated limits.
        self.frame_max = frame_max
        self.channel_max = channel_max
        self.heartbeat = heartbeat
        self._reader = reader
        self._writer = writer
        self._loop = asyncio.get_running_loop()
        self._channels: dict[int, ClientChannel] = {}
        self._next_channel = 1
        self._reason: ClientError | None = None
        self._closed: asyncio.Future[ClientError] = self._loop.create_future()
        self._closing = False
        self._client_close: ConnectionClosedByClient | None = None
        self._sent = False
        self._last_recv = self._loop.time()
        self._reader_task = self._loop.create_task(self._read_loop())
        self._heartbeat_task: asyncio.Task[None] | None = None
        if heartbeat:
            self._heartbeat_task = self._loop.create_task(self._heartbeat_loop())

    # -- state ---------------------------------------------------------------------------
    @property
    def is_closed(self) -> bool:
        """True once the connection has ended (or :meth:`close` began)."""
        return self._reason is not None or self._closing

    @property
    def close_reason(self) -> ClientError | None:
        """Why the connection ended; None while it is open."""
        return self._reason

    async def wait_closed(self) -> ClientError:
        """Wait until the connection ends for any reason; return that reason.

        Cancelling the wait does not affect the connection.
        """
        return await asyncio.shield(self._closed)

    def _check_open(self) -> None:
        if self._reason is not None:
            raise _fresh(self._reason)
        if self._closing:
            raise ConnectionClosedByClient(ReplyCode.REPLY_SUCCESS, "connection is closing")

    # -- output --------------------------------------------------------------------------
    def _write(self, data: bytes) -> None:
        self._writer.write(data)
        self._sent = True

    async def _drain(self) -> None:
        try:
            await self._writer.drain()
        except (OSError, RuntimeError) as exc:
            if self._reason is None:
                self._fail(ConnectionFailed(f"connection lost: {exc or type(exc).__name__}"))
            assert self._reason is not None
            raise _fresh(self._reason) from exc

    # -- channels ------------------------------------------------------------------------
    async def open_channel(self) -> ClientChannel:
        """Open a new channel (numbers are handed out in turn, not reused at once)."""
        self._check_open()
        limit = self.channel_max
        if len(self._channels) >= limit:
            raise ClientError(f"all {limit} channels are in use")
        number = self._next_channel
        while number in self._channels:
            number = number % limit + 1
        self._next_channel = number % limit + 1
        channel = ClientChannel(self, number)
        self._channels[number] = channel
        await channel._call(_method_frame(commands.Channel.Open(), number), commands.Channel.OpenOk)
        return channel

    def _forget_channel(self, channel: ClientChannel) -> None:
        if self._channels.get(channel.number) is channel:
            del self._channels[channel.number]

    # -- closing -------------------------------------------------------------------------
    async def close(
        self, reply_code: int = ReplyCode.REPLY_SUCCESS, text: str = "", timeout: float = 0.0
    ) -> None:
        """Send connection.close, wait for close-ok (``timeout`` or 2 s), close the socket."""
        if self._reason is None and not self._closing:
            self._closing = True
            reason = ConnectionClosedByClient(int(reply_code), text or "closed by client")
            self._client_close = reason
            self._write(
                _method_frame(
                    commands.Connection.Close(
                        reply_code=int(reply_code), reply_text=text, class_id=0, method_id=0
                    ),
                    0,
                )
            )
            try:
                with contextlib.suppress(TimeoutError, ClientError):
                    async with asyncio.timeout(timeout or CLOSE_TIMEOUT):
                        await self._drain()
                        await asyncio.shield(self._closed)  # the reader sees close-ok or EOF
            finally:  # even when the caller cancels the close
                self._fail(reason)
        else:
            await self.wait_closed()
        tasks = [t for t in (self._reader_task, self._heartbeat_task) if t is not None]
        current = asyncio.current_task()
        await asyncio.gather(*(t for t in tasks if t is not current), return_exceptions=True)
        with contextlib.suppress(Exception):
            await self._writer.wait_closed()

    async def abort(self, text: str = "aborted by client") -> None:
        """Drop the connection at once: no connection.close, no waiting for the peer (which
        may be gone or cut off), the socket aborted; every waiter fails."""
        self._fail(ConnectionClosedByClient(int(ReplyCode.CONNECTION_FORCED), text))
        with contextlib.suppress(Exception):
            self._writer.transport.abort()
        tasks = [t for t in (self._reader_task, self._heartbeat_task) if t is not None]
        current = asyncio.current_task()
        await asyncio.gather(*(t for t in tasks if t is not current), return_exceptions=True)

    async def __aenter__(self) -> AmqpClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def _fail(self, reason: ClientError) -> None:
        """The connection is over: record why, fail every waiter, drop the socket."""
        if self._reason is not None:
            return
        self._reason = reason
        if not self._closed.done():
            self._closed.set_result(reason)
        for channel in list(self._channels.values()):
            channel._closed_by(reason)
        self._channels.clear()
        current = asyncio.current_task()
        for task in (self._reader_task, self._heartbeat_task):
            if task is not None and task is not current:
                task.cancel()
        self._writer.close()

    def _abort(self, reply_code: int, reply_text: str, reason: ClientError) -> None:
        """Close with an error: connection.close without waiting for close-ok."""
        if self._reason is not None:
            return
        with contextlib.suppress(Exception):
            self._write(
                _method_frame(
                    commands.Connection.Close(
                        reply_code=reply_code,
                        reply_text=reply_text[:255],
                        class_id=0,
                        method_id=0,
                    ),
                    0,
                )
            )
        self._fail(reason)

    # -- input ---------------------------------------------------------------------------
    async def _read_loop(self) -> None:
        reader = self._reader
        loop = self._loop
        buf = bytearray()
        try:
            while True:
                data = await reader.read(_READ_SIZE)
                if not data:
                    self._fail(
                        self._client_close
                        or ConnectionFailed("connection lost: the broker closed the socket")
                    )
                    return
                self._last_recv = loop.time()
                if buf:
                    buf += data
                    used = self._parse(buf)
                    del buf[:used]
                else:
                    used = self._parse(data)
                    if used < len(data):
                        buf = bytearray(data[used:])
                if self._reason is not None:
                    return
        except asyncio.CancelledError:
            raise
        except _Abort as abort:
            self._abort(abort.reply_code, abort.reply_text, abort.reason)
        except _ProtocolError as exc:
            self._abort(
                exc.reply_code,
                exc.reply_text,
                ConnectionFailed(f"protocol error {exc.reply_code}: {exc.reply_text}"),
            )
        except AmqpError as exc:
            self._abort(
                int(exc.reply_code),
                exc.reply_text,
                ConnectionFailed(f"protocol error {int(exc.reply_code)}: {exc.reply_text}"),
            )
        except (IndexError, struct.error, UnicodeDecodeError, ValueError) as exc:
            text = f"malformed frame: {exc}"
            self._abort(
                ReplyCode.SYNTAX_ERROR, text, ConnectionFailed(f"protocol error 502: {text}")
            )
        except OSError as exc:
            self._fail(ConnectionFailed(f"connection lost: {exc}"))
        except Exception as exc:  # a client bug: end the connection, say why
            reason = ConnectionFailed(f"client internal error: {exc!r}")
            reason.__cause__ = exc
            self._abort(ReplyCode.INTERNAL_ERROR, "client internal error", reason)

    def _parse(self, data: bytes | bytearray) -> int:
        """Handle every whole frame in ``data``; return the bytes used."""
        view = memoryview(data)
        try:
            pos = 0
            size_all = len(data)
            limit = self.frame_max
            channels = self._channels
            while size_all - pos >= 8:
                ftype, number, size = _FRAME_HEAD.unpack_from(data, pos)
                if size + 8 > limit:
                    raise _ProtocolError(
                        ReplyCode.FRAME_ERROR,
                        f"frame of {size + 8} bytes exceeds frame-max {limit}",
                    )
                end = pos + 7 + size
                if end >= size_all:
                    break
                if data[end] != _FRAME_END:
                    raise _ProtocolError(
                        ReplyCode.FRAME_ERROR, f"frame end octet is {data[end]:#04x}, not 0xce"
                    )
                payload = bytes(view[pos + 7 : end])
                pos = end + 1
                if number:
                    channel = channels.get(number)
                    if channel is not None:
                        channel._frame(ftype, payload)
                    # else: a late frame for a channel already closed; drop it
                else:
                    self._connection_frame(ftype, payload)
                    if self._reason is not None:
                        break
            return pos
        finally:
            view.release()

    def _connection_frame(self, ftype: int, payload: bytes) -> None:
        if ftype == _FRAME_HEARTBEAT:
            return
        if ftype != _FRAME_METHOD:
            raise _ProtocolError(ReplyCode.COMMAND_INVALID, f"frame type {ftype} on channel 0")
        method = framing.unmarshal_method(payload)
        if isinstance(method, commands.Connection.Close):
            self._write(_method_frame(commands.Connection.CloseOk(), 0))
            self._fail(
                ConnectionClosedByBroker(int(method.reply_code or 0), _text(method.reply_text))
            )
        elif isinstance(method, commands.Connection.CloseOk):
            if self._client_close is not None:
                self._fail(self._client_close)
        elif isinstance(method, commands.Connection.Blocked | commands.Connection.Unblocked):
            return
        else:
            raise _ProtocolError(
                ReplyCode.UNEXPECTED_FRAME, f"{method.name} not expected on an open connection"
            )

    async def _heartbeat_loop(self) -> None:
        interval = self.heartbeat / 2
        dead_after = 2 * self.heartbeat
        loop = self._loop
        while self._reason is None:
            await asyncio.sleep(interval)
            if loop.time() - self._last_recv > dead_after:
                self._fail(
                    ConnectionFailed(
                        f"missed heartbeats: nothing received for {dead_after} s"
                        f" (heartbeat {self.heartbeat} s)"
                    )
                )
                return
            if not self._sent:
                self._writer.write(framing.HEARTBEAT_FRAME)
            self._sent = False


# -- channel -----------------------------------------------------------------------------
_Reply = tuple[
    type[Method] | tuple[type[Method], ...],
    "asyncio.Future[Any]",
    Callable[[Method], None] | None,
]


class ClientChannel:
    """One channel of an :class:`AmqpClient`; build it with :meth:`AmqpClient.open_channel`."""

    def __init__(self, connection: AmqpClient, number: int) -> None:
        self.connection = connection
        self.number = number
        self._loop = connection._loop
        self._reason: ClientError | None = None
        self._closing = False
        self._closed: asyncio.Future[ClientError] = self._loop.create_future()
        self._pending: deque[_Reply] = deque()
        self._consumers: dict[str, tuple[DeliveryCallback, CancelCallback | None]] = {}
        # content being assembled
        self._c_kind = _NONE
        self._c_fields: tuple[str, int, bool, str, str] = ("", 0, False, "", "")
        self._c_props = b""
        self._c_size = -1
        self._c_got = 0
        self._c_parts: list[bytes] = []
        # publisher confirms
        self._confirming = False
        self._publish_seq = 0
        self._ack_floor = 0
        self._unconfirmed: dict[int, asyncio.Future[None]] = {}

    # -- state ---------------------------------------------------------------------------
    @property
    def is_closed(self) -> bool:
        return self._reason is not None

    @property
    def close_reason(self) -> ClientError | None:
        return self._reason

    async def wait_closed(self) -> ClientError:
        """Wait until the channel (or its connection) closes; return the reason."""
        return await asyncio.shield(self._closed)

    def _check_open(self) -> None:
        if self._reason is not None:
            raise _fresh(self._reason)
        if self._closing:
            raise ChannelClosedByClient(ReplyCode.REPLY_SUCCESS, "channel is closing")
        self.connection._check_open()

    def _closed_by(self, reason: ClientError) -> None:
        if self._reason is not None:
            return
        self._reason = reason
        if not self._closed.done():
            self._closed.set_result(reason)
        pending, self._pending = self._pending, deque()
        for _, future, _ in pending:
            if not future.done():
                future.set_exception(_fresh(reason))
        unconfirmed, self._unconfirmed = self._unconfirmed, {}
        for future in unconfirmed.values():
            if not future.done():
                future.set_exception(_fresh(reason))
        self._consumers.clear()
        self._c_parts = []
        self.connection._forget_channel(self)

    # -- calls ---------------------------------------------------------------------------
    async def _call(
        self,
        frame: bytes,
        expect: type[Method] | tuple[type[Method], ...],
        on_reply: Callable[[Method], None] | None = None,
    ) -> Any:
        """Send a synchronous method, wait for its reply (replies come in order)."""
        self._check_open()
        connection = self.connection
        connection._write(frame)
        future: asyncio.Future[Any] = self._loop.create_future()
        self._pending.append((expect, future, on_reply))
        await connection._drain()
        return await future

    async def qos(self, prefetch_count: int, prefetch_size: int = 0) -> None:
        """basic.qos for this channel's consumers (``prefetch_count`` 0: no limit)."""
        await self._call(
            _method_frame(
                commands.Basic.Qos(prefetch_size=prefetch_size, prefetch_count=prefetch_count),
                self.number,
            ),
            commands.Basic.QosOk,
        )

    async def declare_queue(
        self,
        name: str = "",
        *,
        passive: bool = False,
        durable: bool = False,
        exclusive: bool = False,
        auto_delete: bool = False,
        arguments: dict[str, Any] | None = None,
    ) -> tuple[str, int, int]:
        """queue.declare; return (name, message count, consumer count)."""
        reply: commands.Queue.DeclareOk = await self._call(
            _method_frame(
                commands.Queue.Declare(
                    queue=name,
                    passive=passive,
                    durable=durable,
                    exclusive=exclusive,
                    auto_delete=auto_delete,
                    arguments=arguments or {},
                ),
                self.number,
            ),
            commands.Queue.DeclareOk,
        )
        return _text(reply.queue), int(reply.message_count or 0), int(reply.consumer_count or 0)

    async def delete_queue(
        self, name: str, *, if_unused: bool = False, if_empty: bool = False
    ) -> int:
        """queue.delete; return the number of messages deleted."""
        reply: commands.Queue.DeleteOk = await self._call(
            _method_frame(
                commands.Queue.Delete(queue=name, if_unused=if_unused, if_empty=if_empty),
                self.number,
            ),
            commands.Queue.DeleteOk,
        )
        return int(reply.message_count or 0)

    async def bind_queue(
        self,
        queue: str,
        exchange: str,
        routing_key: str = "",
        arguments: dict[str, Any] | None = None,
    ) -> None:
        """queue.bind."""
        await self._call(
            _method_frame(
                commands.Queue.Bind(
                    queue=queue,
                    exchange=exchange,
                    routing_key=routing_key,
                    arguments=arguments or {},
                ),
                self.number,
            ),
            commands.Queue.BindOk,
        )

    async def consume(
        self,
        queue: str,
        callback: DeliveryCallback,
        *,
        arguments: dict[str, Any] | None = None,
        no_ack: bool = False,
        exclusive: bool = False,
        consumer_tag: str = "",
        on_cancel: CancelCallback | None = None,
    ) -> str:
        """basic.consume; return the consumer tag once consume-ok arrives.

        ``callback`` runs synchronously on the loop for each basic.deliver (it may call
        :meth:`ack`); ``on_cancel(tag)`` runs when the broker cancels the consumer (its
        queue was deleted). Deliveries right after consume-ok are not lost: the consumer
        is registered by the reader when consume-ok is parsed.
        """

        def register(reply: Method) -> None:
            assert isinstance(reply, commands.Basic.ConsumeOk)
            self._consumers[_text(reply.consumer_tag)] = (callback, on_cancel)

        reply: commands.Basic.ConsumeOk = await self._call(
            _method_frame(
                commands.Basic.Consume(
                    queue=queue,
                    consumer_tag=consumer_tag,
                    no_ack=no_ack,
                    exclusive=exclusive,
                    arguments=arguments or {},
                ),
                self.number,
            ),
            commands.Basic.ConsumeOk,
            register,
        )
        return _text(reply.consumer_tag)

    async def cancel(self, consumer_tag: str) -> None:
        """basic.cancel; deliveries already on the wire for the consumer are dropped."""
        self._consumers.pop(consumer_tag, None)
        await self._call(
            _method_frame(commands.Basic.Cancel(consumer_tag=consumer_tag), self.number),
            commands.Basic.CancelOk,
        )

    def ack(self, delivery_tag: int, multiple: bool = False) -> None:
        """basic.ack, written at once (no drain: call from a delivery callback freely)."""
        if self._reason is not None:
            raise _fresh(self._reason)
        connection = self.connection
        if connection._reason is not None:
            raise _fresh(connection._reason)
        connection._writer.write(
            _ACK_FRAME.pack(
                _FRAME_METHOD, self.number, 13, _ACK, delivery_tag, 1 if multiple else 0, _FRAME_END
            )
        )
        connection._sent = True

    def nack(self, delivery_tag: int, multiple: bool = False, requeue: bool = True) -> None:
        """basic.nack, written at once."""
        self._check_open()
        self.connection._write(
            _method_frame(
                commands.Basic.Nack(delivery_tag=delivery_tag, multiple=multiple, requeue=requeue),
                self.number,
            )
        )

    async def confirm_select(self) -> None:
        """Put the channel in confirm mode: :meth:`publish` then waits for the ack."""
        await self._call(
            _method_frame(commands.Confirm.Select(), self.number), commands.Confirm.SelectOk
        )
        self._confirming = True

    async def publish(
        self,
        exchange: str,
        routing_key: str,
        body: bytes,
        properties_raw: bytes = b"\x00\x00",
    ) -> None:
        """basic.publish with its content; in confirm mode, return after the broker's ack.

        :raises PublishNacked: in confirm mode, when the broker nacks the message.
        """
        self._check_open()
        connection = self.connection
        number = self.number
        connection._write(
            framing.marshal_publish(number, exchange, routing_key, False)
            + framing.content_frames(number, properties_raw, body, connection.frame_max)
        )
        if not self._confirming:
            await connection._drain()
            return
        self._publish_seq += 1
        future: asyncio.Future[None] = self._loop.create_future()
        self._unconfirmed[self._publish_seq] = future
        await connection._drain()
        await future

    async def get(self, queue: str, *, no_ack: bool = False) -> Delivery | None:
        """basic.get: one message, or None when the queue is empty."""
        result: Delivery | None = await self._call(
            _method_frame(commands.Basic.Get(queue=queue, no_ack=no_ack), self.number),
            (commands.Basic.GetOk, commands.Basic.GetEmpty),
        )
        return result

    async def close(self) -> None:
        """channel.close (200) and wait for close-ok; a closed channel is left alone."""
        if self._reason is not None:
            return
        if self._closing:
            await self.wait_closed()
            return
        self._check_open()
        self._closing = True
        with contextlib.suppress(ClientError):
            await self._call_closing()
        self._closed_by(ChannelClosedByClient(ReplyCode.REPLY_SUCCESS, "closed by client"))

    async def _call_closing(self) -> None:
        connection = self.connection
        connection._write(
            _method_frame(
                commands.Channel.Close(
                    reply_code=ReplyCode.REPLY_SUCCESS, reply_text="", class_id=0, method_id=0
                ),
                self.number,
            )
        )
        future: asyncio.Future[Any] = self._loop.create_future()
        self._pending.append((commands.Channel.CloseOk, future, None))
        await connection._drain()
        await future

    # -- input (called by the connection's reader) ----------------------------------------
    def _frame(self, ftype: int, payload: bytes) -> None:
        if ftype == _FRAME_BODY:
            if self._c_size < 0:
                raise _ProtocolError(ReplyCode.UNEXPECTED_FRAME, "content body without header")
            self._c_parts.append(payload)
            self._c_got += len(payload)
            if self._c_got >= self._c_size:
                self._content_complete()
            return
        if ftype == _FRAME_METHOD:
            if self._c_kind:
                raise _ProtocolError(
                    ReplyCode.UNEXPECTED_FRAME, "method frame in the middle of a content"
                )
            if _U32.unpack_from(payload)[0] == _DELIVER:
                self._c_fields = _decode_deliver(payload)
                self._c_kind = _DELIVERY
                return
            self._method(framing.unmarshal_method(payload))
            return
        if ftype == _FRAME_HEADER:
            if self._c_kind == _NONE or self._c_size >= 0:
                raise _ProtocolError(ReplyCode.UNEXPECTED_FRAME, "unexpected content header")
            size, self._c_props = framing.unmarshal_content_header(payload)
            self._c_size = size
            if size == 0:
                self._content_complete()
            return
        raise _ProtocolError(ReplyCode.FRAME_ERROR, f"frame type {ftype} on channel {self.number}")

    def _content_complete(self) -> None:
        parts = self._c_parts
        if self._c_got > self._c_size:
            raise _ProtocolError(ReplyCode.FRAME_ERROR, "content body longer than its header says")
        body = parts[0] if len(parts) == 1 else b"".join(parts)
        kind = self._c_kind
        consumer_tag, tag, redelivered, exchange, routing_key = self._c_fields
        props = self._c_props
        self._c_kind = _NONE
        self._c_size = -1
        self._c_got = 0
        self._c_parts = []
        delivery = Delivery(tag, redelivered, exchange, routing_key, props, body, consumer_tag)
        if kind == _DELIVERY:
            entry = self._consumers.get(consumer_tag)
            if entry is None or self._closing:
                return  # cancelled, or the channel is closing: the broker requeues it
            try:
                entry[0](delivery)
            except Exception as exc:
                self._callback_failed(exc, f"delivery callback of consumer {consumer_tag!r}")
        elif kind == _GET:
            self._reply(commands.Basic.GetOk, delivery)
        # _RETURN: publishes are never mandatory; a returned message is dropped

    def _callback_failed(self, exc: Exception, what: str) -> None:
        reason = CallbackError(f"{what} raised {exc!r}")
        reason.__cause__ = exc
        raise _Abort(reason, ReplyCode.INTERNAL_ERROR, f"client {what} failed")

    def _reply(self, method_type: type[Method], result: Any, method: Method | None = None) -> None:
        if not self._pending:
            raise _ProtocolError(
                ReplyCode.UNEXPECTED_FRAME,
                f"{method_type.name} on channel {self.number} answers nothing",
            )
        expect, future, on_reply = self._pending.popleft()
        expected = expect if isinstance(expect, tuple) else (expect,)
        if method_type not in expected:
            raise _ProtocolError(
                ReplyCode.UNEXPECTED_FRAME,
                f"{method_type.name} on channel {self.number}, expected "
                + " or ".join(e.name for e in expected),
            )
        if on_reply is not None and method is not None:
            on_reply(method)
        if not future.done():
            future.set_result(result)

    def _method(self, method: Method) -> None:
        if isinstance(method, commands.Basic.Ack | commands.Basic.Nack):
            self._confirm(method)
        elif isinstance(method, commands.Basic.GetOk):
            self._c_fields = (
                "",
                int(method.delivery_tag or 0),
                bool(method.redelivered),
                _text(method.exchange),
                _text(method.routing_key),
            )
            self._c_kind = _GET
        elif isinstance(method, commands.Basic.Return):
            self._c_fields = ("", 0, False, _text(method.exchange), _text(method.routing_key))
            self._c_kind = _RETURN
        elif isinstance(method, commands.Basic.Cancel):
            self._broker_cancel(method)
        elif isinstance(method, commands.Channel.Close):
            self.connection._write(_method_frame(commands.Channel.CloseOk(), self.number))
            self._closed_by(
                ChannelClosedByBroker(int(method.reply_code or 0), _text(method.reply_text))
            )
        elif isinstance(method, commands.Channel.CloseOk):
            self._reply(type(method), None, method)
            self._closed_by(ChannelClosedByClient(ReplyCode.REPLY_SUCCESS, "closed by client"))
        elif isinstance(method, commands.Channel.Flow):
            self.connection._write(
                _method_frame(commands.Channel.FlowOk(active=method.active), self.number)
            )
        elif isinstance(method, commands.Basic.GetEmpty):
            self._reply(type(method), None, method)
        else:
            self._reply(type(method), method, method)

    def _broker_cancel(self, method: commands.Basic.Cancel) -> None:
        tag = _text(method.consumer_tag)
        entry = self._consumers.pop(tag, None)
        if not method.nowait:
            self.connection._write(
                _method_frame(commands.Basic.CancelOk(consumer_tag=tag), self.number)
            )
        if entry is not None and entry[1] is not None:
            try:
                entry[1](tag)
            except Exception as exc:
                self._callback_failed(exc, f"cancel callback of consumer {tag!r}")

    def _confirm(self, method: commands.Basic.Ack | commands.Basic.Nack) -> None:
        tag = int(method.delivery_tag or 0)
        unconfirmed = self._unconfirmed
        nacked = isinstance(method, commands.Basic.Nack)
        if method.multiple:
            futures = [unconfirmed.pop(seq, None) for seq in range(self._ack_floor + 1, tag + 1)]
            self._ack_floor = max(self._ack_floor, tag)
        else:
            futures = [unconfirmed.pop(tag, None)]
        for future in futures:
            if future is None or future.done():
                continue
            if nacked:
                future.set_exception(PublishNacked(f"broker nacked publish {tag}"))
            else:
                future.set_result(None)


# -- handshake ---------------------------------------------------------------------------
def _sasl_response(mechanism: str, user: str | None, password: str | None) -> bytes:
    if mechanism == "ANONYMOUS":
        return b""
    if user is None or password is None:
        raise ValueError(f"{mechanism} needs a user and a password")
    if mechanism == "PLAIN":
        return b"\0" + user.encode() + b"\0" + password.encode()
    if mechanism == "AMQPLAIN":
        return encode.field_table({"LOGIN": user, "PASSWORD": password})[4:]
    raise ValueError(f"unsupported SASL mechanism {mechanism!r}: PLAIN, AMQPLAIN or ANONYMOUS")


def _start_ok_frame(properties: dict[str, Any], mechanism: str, response: bytes) -> bytes:
    # By hand: pamqp encodes a response only as UTF-8 text, AMQPLAIN's is binary.
    payload = b"".join(
        (
            b"\x00\x0a\x00\x0b",
            encode.field_table(properties),
            framing.short_str_bytes(mechanism),
            _U32.pack(len(response)),
            response,
            framing.short_str_bytes("en_US"),
        )
    )
    return _FRAME_HEAD.pack(_FRAME_METHOD, 0, len(payload)) + payload + framing.FRAME_END_BYTE


async def _read_method(reader: asyncio.StreamReader, limit: int) -> Method:
    """The next connection method of the handshake (heartbeats are skipped)."""
    while True:
        head = await reader.readexactly(7)
        if head[:4] == b"AMQP":
            rest = await reader.readexactly(1)
            raise ConnectionFailed(
                f"the broker does not speak AMQP 0-9-1: it answered {head + rest!r}"
            )
        ftype, channel, size = _FRAME_HEAD.unpack(head)
        if size + 8 > limit:
            raise ConnectionFailed(f"handshake frame of {size + 8} bytes exceeds {limit}")
        data = await reader.readexactly(size + 1)
        if data[-1] != _FRAME_END:
            raise ConnectionFailed("handshake frame without its end octet")
        if ftype == _FRAME_HEARTBEAT:
            continue
        if ftype != _FRAME_METHOD or channel != 0:
            raise ConnectionFailed(f"unexpected frame type {ftype} on channel {channel}")
        try:
            return framing.unmarshal_method(data[:-1])
        except AmqpError as exc:
            raise ConnectionFailed(f"bad handshake method: {exc.reply_text}") from exc


def _refused(writer: asyncio.StreamWriter, method: Method) -> ClientError:
    if isinstance(method, commands.Connection.Close):
        writer.write(_method_frame(commands.Connection.CloseOk(), 0))
        return ConnectionRefusedByBroker(int(method.reply_code or 0), _text(method.reply_text))
    return ConnectionFailed(f"unexpected {method.name} during the handshake")


def _negotiate(ours: int, theirs: int) -> int:
    """The smaller non-zero value (0 when both are 0)."""
    if ours and theirs:
        return min(ours, theirs)
    return ours or theirs


async def _handshake(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    properties: dict[str, Any],
    mechanism: str,
    response: bytes,
    frame_max: int,
    heartbeat: int,
) -> AmqpClient:
    limit = max(frame_max or 131072, framing.FRAME_MIN_SIZE)
    writer.write(framing.PROTOCOL_HEADER)
    start = await _read_method(reader, limit)
    if not isinstance(start, commands.Connection.Start):
        raise _refused(writer, start)
    offered = _text(start.mechanisms).split()
    if mechanism not in offered:
        raise ConnectionFailed(
            f"the broker offers {' '.join(offered) or 'no mechanism'}, not {mechanism}"
        )
    writer.write(_start_ok_frame(properties, mechanism, response))
    tune = await _read_method(reader, limit)
    if not isinstance(tune, commands.Connection.Tune):
        raise _refused(writer, tune)
    frame_max = _negotiate(frame_max, int(tune.frame_max or 0)) or 131072
    heartbeat = _negotiate(heartbeat, int(tune.heartbeat or 0))
    channel_max = int(tune.channel_max or 0) or 65535
    writer.write(
        _method_frame(
            commands.Connection.TuneOk(
                channel_max=channel_max, frame_max=frame_max, heartbeat=heartbeat
            ),
            0,
        )
        + _method_frame(commands.Connection.Open(virtual_host="/"), 0)
    )
    opened = await _read_method(reader, frame_max)
    if not isinstance(opened, commands.Connection.OpenOk):
        raise _refused(writer, opened)
    server_properties = dict(start.server_properties or {})
    return AmqpClient(
        reader,
        writer,
        server_properties=server_properties,
        frame_max=frame_max,
        channel_max=channel_max,
        heartbeat=heartbeat,
    )


async def connect(
    host: str,
    port: int,
    *,
    user: str | None,
    password: str | None,
    mechanism: str = "PLAIN",
    client_properties: dict[str, Any] | None = None,
    heartbeat: int = 0,
    frame_max: int = 131072,
    timeout: float = 10.0,
) -> AmqpClient:
    """Connect, authenticate and open vhost ``/``; everything within ``timeout`` seconds.

    ``frame_max`` and ``heartbeat`` are negotiated as the smaller non-zero value of ours
    and the broker's (so ``heartbeat=0`` takes the broker's). ``client_properties`` are
    merged over the defaults (product, version, platform, capabilities; a ``capabilities``
    table is merged too).

    :raises ConnectionRefusedByBroker: the broker closed the handshake (403, 530, ...).
    :raises ConnectionFailed: socket error, EOF, time-out, or a garbled handshake.
    :raises ValueError: bad arguments (unknown mechanism, missing credentials, frame_max).
    """
    if frame_max and frame_max < framing.FRAME_MIN_SIZE:
        raise ValueError(f"frame_max {frame_max} is below the minimum {framing.FRAME_MIN_SIZE}")
    if heartbeat < 0 or heartbeat > 0xFFFF:
        raise ValueError(f"heartbeat {heartbeat} outside 0..65535")
    response = _sasl_response(mechanism, user, password)
    capabilities: dict[str, Any] = {
        "consumer_cancel_notify": True,
        "publisher_confirms": True,
        "basic.nack": True,
        "authentication_failure_close": True,
    }
    properties: dict[str, Any] = {
        "product": CLIENT_PRODUCT,
        "version": CLIENT_VERSION,
        "platform": "Python",
        "capabilities": capabilities,
    }
    for key, value in (client_properties or {}).items():
        if key == "capabilities" and isinstance(value, dict):
            capabilities.update(value)
        else:
            properties[key] = value
    writer: asyncio.StreamWriter | None = None
    where = f"{host}:{port}"
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(host, port, limit=_READ_LIMIT)
            return await _handshake(
                reader, writer, properties, mechanism, response, frame_max, heartbeat
            )
    except ClientError:
        if writer is not None:
            writer.close()
        raise
    except TimeoutError:
        if writer is not None:
            writer.close()
        raise ConnectionFailed(f"{where}: no open connection within {timeout} s") from None
    except (OSError, EOFError) as exc:
        if writer is not None:
            writer.close()
        detail = "connection closed during the handshake" if isinstance(exc, EOFError) else exc
        raise ConnectionFailed(f"{where}: {detail}") from exc
