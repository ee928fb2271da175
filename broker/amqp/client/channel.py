"""One channel of the client: :class:`ClientChannel`.

Contract:

- Queue declaration, qos, consume (a callback per delivery, called synchronously on the
  loop, in the order of the wire), ack, nack, publish (optionally in confirm mode), get
  and close. Synchronous methods are answered in order: each call queues the reply type it
  expects and the reader resolves them first in, first out.
- The channel assembles content (method, header and any number of body frames) from the
  frames its connection hands it. A channel.close from the broker fails the channel's
  pending calls with :class:`~broker.amqp.client.errors.ChannelClosedByBroker`; a
  basic.cancel from the broker (queue deleted) calls the consumer's ``on_cancel``.
- Async calls honour ``drain()``; the non-async :meth:`ClientChannel.ack` and
  :meth:`ClientChannel.nack` only write. Content properties travel as raw bytes.
- An exception raised by a delivery or cancel callback closes the connection (541) with
  :class:`~broker.amqp.client.errors.CallbackError`.

THREAD UNSAFE: the event loop of its :class:`~broker.amqp.client.connection.AmqpClient`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from pamqp import commands
from pamqp.base import Frame as Method

from broker.amqp import framing
from broker.amqp.client.errors import (
    CallbackError,
    ChannelClosedByBroker,
    ChannelClosedByClient,
    ClientError,
    PublishNacked,
    _Abort,
    _fresh,
    _ProtocolError,
)
from broker.amqp.client.wire import (
    _ACK,
    _ACK_FRAME,
    _DELIVER,
    _FRAME_BODY,
    _FRAME_END,
    _FRAME_HEADER,
    _FRAME_METHOD,
    _U32,
    CancelCallback,
    Delivery,
    DeliveryCallback,
    _decode_deliver,
    _method_frame,
    _text,
)
from broker.core.errors import ReplyCode

# content kinds a channel may be assembling
_NONE, _DELIVERY, _GET, _RETURN = 0, 1, 2, 3

_Reply = tuple[
    type[Method] | tuple[type[Method], ...],
    "asyncio.Future[Any]",
    Callable[[Method], None] | None,
]


class ChannelLink(Protocol):
    """What a channel needs of its connection (the port; :class:`AmqpClient` implements it)."""

    #: The negotiated frame-max: content is cut into frames of at most this size.
    frame_max: int

    @property
    def close_reason(self) -> ClientError | None:
        """Why the connection ended; None while it is open."""
        ...

    def check_open(self) -> None:
        """Raise the connection's end (or that it is closing) if it is not open."""
        ...

    def write(self, data: bytes) -> None:
        """Write frames now (no flow control: :meth:`drain` waits for it)."""
        ...

    async def drain(self) -> None:
        """Wait until the socket takes more; a failed drain ends the connection."""
        ...

    def forget_channel(self, channel: ClientChannel) -> None:
        """The channel is closed: its number may be used again."""
        ...


class ClientChannel:
    """One channel of an :class:`AmqpClient`; build it with :meth:`AmqpClient.open_channel`."""

    def __init__(self, connection: ChannelLink, number: int) -> None:
        self.connection = connection
        self.number = number
        self._loop = asyncio.get_running_loop()
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
        self.connection.check_open()

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
        self.connection.forget_channel(self)

    # -- calls ---------------------------------------------------------------------------
    async def _call(
        self,
        method: Method,
        expect: type[Method] | tuple[type[Method], ...],
        on_reply: Callable[[Method], None] | None = None,
    ) -> Any:
        """Send a synchronous method, wait for its reply (replies come in order)."""
        frame = _method_frame(method, self.number)
        self._check_open()
        return await self._request(frame, expect, on_reply)

    async def _request(
        self,
        frame: bytes,
        expect: type[Method] | tuple[type[Method], ...],
        on_reply: Callable[[Method], None] | None = None,
    ) -> Any:
        connection = self.connection
        connection.write(frame)
        future: asyncio.Future[Any] = self._loop.create_future()
        self._pending.append((expect, future, on_reply))
        await connection.drain()
        return await future

    def _send(self, method: Method) -> None:
        """Write an asynchronous method (no reply awaited, no drain)."""
        self.connection.write(_method_frame(method, self.number))

    async def qos(self, prefetch_count: int, prefetch_size: int = 0) -> None:
        """basic.qos for this channel's consumers (``prefetch_count`` 0: no limit)."""
        await self._call(
            commands.Basic.Qos(prefetch_size=prefetch_size, prefetch_count=prefetch_count),
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
            commands.Queue.Declare(
                queue=name,
                passive=passive,
                durable=durable,
                exclusive=exclusive,
                auto_delete=auto_delete,
                arguments=arguments or {},
            ),
            commands.Queue.DeclareOk,
        )
        return _text(reply.queue), int(reply.message_count or 0), int(reply.consumer_count or 0)

    async def delete_queue(
        self, name: str, *, if_unused: bool = False, if_empty: bool = False
    ) -> int:
        """queue.delete; return the number of messages deleted."""
        reply: commands.Queue.DeleteOk = await self._call(
            commands.Queue.Delete(queue=name, if_unused=if_unused, if_empty=if_empty),
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
            commands.Queue.Bind(
                queue=queue,
                exchange=exchange,
                routing_key=routing_key,
                arguments=arguments or {},
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
            commands.Basic.Consume(
                queue=queue,
                consumer_tag=consumer_tag,
                no_ack=no_ack,
                exclusive=exclusive,
                arguments=arguments or {},
            ),
            commands.Basic.ConsumeOk,
            register,
        )
        return _text(reply.consumer_tag)

    async def cancel(self, consumer_tag: str) -> None:
        """basic.cancel; deliveries already on the wire for the consumer are dropped."""
        self._consumers.pop(consumer_tag, None)
        await self._call(
            commands.Basic.Cancel(consumer_tag=consumer_tag),
            commands.Basic.CancelOk,
        )

    def ack(self, delivery_tag: int, multiple: bool = False) -> None:
        """basic.ack, written at once (no drain: call from a delivery callback freely); once
        this channel sent channel.close, nothing (the broker may have forgotten the channel
        by the time it arrives: 504 on the whole connection, an HA backup's link)."""
        if self._reason is not None:
            raise _fresh(self._reason)
        if self._closing:
            raise ChannelClosedByClient(ReplyCode.REPLY_SUCCESS, "channel is closing")
        connection = self.connection
        if connection.close_reason is not None:
            raise _fresh(connection.close_reason)
        connection.write(
            _ACK_FRAME.pack(
                _FRAME_METHOD, self.number, 13, _ACK, delivery_tag, 1 if multiple else 0, _FRAME_END
            )
        )

    def nack(self, delivery_tag: int, multiple: bool = False, requeue: bool = True) -> None:
        """basic.nack, written at once."""
        self._check_open()
        self._send(
            commands.Basic.Nack(delivery_tag=delivery_tag, multiple=multiple, requeue=requeue)
        )

    async def confirm_select(self) -> None:
        """Put the channel in confirm mode: :meth:`publish` then waits for the ack."""
        await self._call(commands.Confirm.Select(), commands.Confirm.SelectOk)
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
        connection.write(
            framing.marshal_publish(number, exchange, routing_key, False)
            + framing.content_frames(number, properties_raw, body, connection.frame_max)
        )
        if not self._confirming:
            await connection.drain()
            return
        self._publish_seq += 1
        future: asyncio.Future[None] = self._loop.create_future()
        self._unconfirmed[self._publish_seq] = future
        await connection.drain()
        await future

    async def get(self, queue: str, *, no_ack: bool = False) -> Delivery | None:
        """basic.get: one message, or None when the queue is empty."""
        result: Delivery | None = await self._call(
            commands.Basic.Get(queue=queue, no_ack=no_ack),
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
        close = commands.Channel.Close(
            reply_code=ReplyCode.REPLY_SUCCESS, reply_text="", class_id=0, method_id=0
        )
        await self._request(_method_frame(close, self.number), commands.Channel.CloseOk)

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
            self._send(commands.Channel.CloseOk())
            self._closed_by(
                ChannelClosedByBroker(int(method.reply_code or 0), _text(method.reply_text))
            )
        elif isinstance(method, commands.Channel.CloseOk):
            self._reply(type(method), None, method)
            self._closed_by(ChannelClosedByClient(ReplyCode.REPLY_SUCCESS, "closed by client"))
        elif isinstance(method, commands.Channel.Flow):
            self._send(commands.Channel.FlowOk(active=method.active))
        elif isinstance(method, commands.Basic.GetEmpty):
            self._reply(type(method), None, method)
        else:
            self._reply(type(method), method, method)

    def _broker_cancel(self, method: commands.Basic.Cancel) -> None:
        tag = _text(method.consumer_tag)
        entry = self._consumers.pop(tag, None)
        if not method.nowait:
            self._send(commands.Basic.CancelOk(consumer_tag=tag))
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
