"""The client's connection: :class:`AmqpClient` owns the socket and its two tasks.

Contract:

- A reader task parses frames (a frame's size is checked against frame-max before its
  ``8 + size`` bytes are taken), hands channel frames to their
  :class:`~broker.amqp.client.channel.ClientChannel` (which assembles content and
  dispatches) and handles channel 0 itself; a heartbeat task sends a heartbeat every
  ``heartbeat / 2`` seconds in which nothing else was sent and drops the connection when
  nothing was received for ``2 x heartbeat``.
- However the connection ends (broker close, EOF, heartbeat time-out, protocol error, a
  raising callback, :meth:`AmqpClient.close`, :meth:`AmqpClient.abort`),
  :meth:`AmqpClient.wait_closed` returns the reason, a
  :class:`~broker.amqp.client.errors.ClientError`; every channel and pending call fails
  with it.
- Writes go straight to the ``StreamWriter``; :meth:`AmqpClient.drain` turns a failed
  drain into the connection's end.

Call direction: the connection creates channels and feeds them frames; a channel calls
back only through its port, :class:`~broker.amqp.client.channel.ChannelLink`: ``write``,
``drain``, ``check_open``, ``forget_channel``, ``close_reason`` and ``frame_max``.

THREAD UNSAFE: the event loop that ran :func:`~broker.amqp.client.handshake.connect` owns it.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from types import TracebackType
from typing import Any

from pamqp import commands

from broker.amqp import framing
from broker.amqp.client.channel import ClientChannel
from broker.amqp.client.errors import (
    ClientError,
    ConnectionClosedByBroker,
    ConnectionClosedByClient,
    ConnectionFailed,
    _Abort,
    _fresh,
    _ProtocolError,
)
from broker.amqp.client.wire import (
    _FRAME_END,
    _FRAME_HEAD,
    _FRAME_HEARTBEAT,
    _FRAME_METHOD,
    _method_frame,
    _text,
)
from broker.core.errors import AmqpError, ReplyCode

#: How long :meth:`AmqpClient.close` waits for connection.close-ok by default.
CLOSE_TIMEOUT = 2.0
#: Channels a lost connection closes a slice (:meth:`AmqpClient._close_channels`).
CHANNELS_CLOSED_A_TURN = 500
#: Seconds between two slices of a lost connection's channels, after the first.
CHANNELS_CLOSE_PAUSE = 0.02
#: StreamReader buffer limit and read size: large, so a busy link reads in big chunks.
_READ_LIMIT = 1 << 22
_READ_SIZE = 1 << 20


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

    @property
    def last_received(self) -> float:
        """When bytes last came from the broker (the event loop's clock)."""
        return self._last_recv

    def tcp_socket(self) -> Any:
        """The connection's socket (asyncio's wrapper; None once closed): for reading the
        kernel's view of it (``TCP_INFO``), never for I/O."""
        return self._writer.transport.get_extra_info("socket")

    def check_open(self) -> None:
        if self._reason is not None:
            raise _fresh(self._reason)
        if self._closing:
            raise ConnectionClosedByClient(ReplyCode.REPLY_SUCCESS, "connection is closing")

    # -- output --------------------------------------------------------------------------
    def write(self, data: bytes) -> None:
        self._writer.write(data)
        self._sent = True

    def send_heartbeat(self) -> None:
        """Write one heartbeat frame now (a probe the peer's host must acknowledge)."""
        if self._reason is None and not self._closing:
            self.write(framing.HEARTBEAT_FRAME)

    async def drain(self) -> None:
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
        self.check_open()
        limit = self.channel_max
        if len(self._channels) >= limit:
            raise ClientError(f"all {limit} channels are in use")
        number = self._next_channel
        while number in self._channels:
            number = number % limit + 1
        self._next_channel = number % limit + 1
        channel = ClientChannel(self, number)
        self._channels[number] = channel
        await channel._call(commands.Channel.Open(), commands.Channel.OpenOk)
        return channel

    def forget_channel(self, channel: ClientChannel) -> None:
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
            self.write(
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
                        await self.drain()
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
        channels = list(self._channels.values())
        self._channels.clear()
        self._close_channels(channels, reason, 0)
        current = asyncio.current_task()
        for task in (self._reader_task, self._heartbeat_task):
            if task is not None and task is not current:
                task.cancel()
        self._writer.close()

    def _close_channels(
        self, channels: list[ClientChannel], reason: ClientError, start: int
    ) -> None:
        """Each of ``channels`` closed with ``reason``, :data:`CHANNELS_CLOSED_A_TURN` a
        slice, the first ones now, the next after :data:`CHANNELS_CLOSE_PAUSE` each. A backup
        link of 10,000 queue channels closed in one step was 40-70 ms of CPU (issue 25), and
        on a backup whose primary just died that step came before its promotion could
        start; a slice a turn, they were half of the loop's CPU while the promotion ran
        (each slice frees its queues' consumers: 1-2 ms), the link's end competing with the
        work that needs the CPU then (10,000 channels now end over 0.4 s). The connection is
        over already: every call on a channel not closed yet fails at once
        (:meth:`check_open`), and a pending reply or confirm of one fails when its slice
        comes, with the same reason."""
        end = start + CHANNELS_CLOSED_A_TURN
        for channel in channels[start:end]:
            channel._closed_by(reason)
        if end < len(channels):
            self._loop.call_later(CHANNELS_CLOSE_PAUSE, self._close_channels, channels, reason, end)

    def _abort(self, reply_code: int, reply_text: str, reason: ClientError) -> None:
        """Close with an error: connection.close without waiting for close-ok."""
        if self._reason is not None:
            return
        with contextlib.suppress(Exception):
            self.write(
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
            self.write(_method_frame(commands.Connection.CloseOk(), 0))
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
                # found silent: look again once what waited unread has been read. After a
                # stall uvloop runs its timers (this sleep's) before it polls its sockets;
                # the first yield lets it poll (the read loop's turn is queued then), the
                # second lets that turn come first (the loop's ready callbacks run in order)
                await asyncio.sleep(0)
                await asyncio.sleep(0)
            if self._reason is None and loop.time() - self._last_recv > dead_after:
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
