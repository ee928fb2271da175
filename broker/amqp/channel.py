"""One AMQP 0-9-1 channel: the exchange, queue, basic, confirm and tx classes.

A channel turns methods into calls on the virtual host, tracks the deliveries it made
(delivery tags, acknowledgements, prefetch credit), assembles published content, and runs
publisher confirms and transactions. A soft :class:`~broker.core.errors.AmqpError` closes
only this channel (channel.close with the reply code); a hard one propagates to the
connection.

THREAD UNSAFE: one event loop owns the channel (and its connection).
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pamqp import commands
from pamqp.base import Frame as Method

from broker.amqp import framing
from broker.amqp.context import Stream, StreamHooks
from broker.amqp.state import ChannelState
from broker.core import properties
from broker.core.confirms import PublisherConfirms
from broker.core.errors import AmqpError, ReplyCode, precondition_failed
from broker.core.exchange import Exchange
from broker.core.message import Entry, Message
from broker.core.queue import Queue

if TYPE_CHECKING:
    from broker.amqp.connection import Connection

#: basic.consume of a queue name with this prefix asks for an HA stream (primary only).
HA_STREAM_PREFIX = "qpid.ha-"

_NAME_OK = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:@#,/+ ")


def _check_name(kind: str, name: str, class_id: int, method_id: int) -> None:
    if any(c not in _NAME_OK for c in name):
        raise AmqpError(
            ReplyCode.PRECONDITION_FAILED,
            f"invalid {kind} name {name!r}: use letters, digits and -_.:@#,/+ or space",
            class_id,
            method_id,
        )


class ChannelConsumer:
    """A basic.consume subscription; the queue calls it (see ``broker.core.queue``)."""

    __slots__ = (
        "channel",
        "exclusive",
        "no_ack",
        "prefetch",
        "queue",
        "tag",
        "tag_bytes",
        "unacked",
    )

    def __init__(
        self,
        channel: Channel,
        tag: str,
        queue: Queue,
        no_ack: bool,
        exclusive: bool,
        prefetch: int,
    ) -> None:
        self.channel = channel
        self.tag = tag
        self.tag_bytes = framing.short_str_bytes(tag)
        self.queue = queue
        self.no_ack = no_ack
        self.exclusive = exclusive
        self.prefetch = prefetch
        self.unacked = 0

    def can_deliver(self) -> bool:
        channel = self.channel
        if not channel.can_deliver:
            return False
        if self.no_ack:
            return True
        if self.prefetch and self.unacked >= self.prefetch:
            return False
        limit = channel.prefetch_global
        return not (limit and len(channel.unacked) >= limit)

    def deliver(self, queue: Queue, entry: Entry) -> None:
        self.channel.deliver(self, queue, entry)

    def queue_deleted(self, queue: Queue) -> None:
        self.channel.consumer_cancelled_by_broker(self)


@dataclass(slots=True)
class Delivery:
    """An unacknowledged delivery."""

    queue: Queue
    entry: Entry
    consumer: ChannelConsumer | None


@dataclass(slots=True)
class PendingContent:
    """A basic.publish waiting for its content header and body frames."""

    exchange: Exchange
    routing_key: str
    mandatory: bool
    body_size: int = -1
    properties_raw: bytes = b""
    chunks: list[bytes] = field(default_factory=list)
    received: int = 0


@dataclass(slots=True)
class Transaction:
    """Publishes and acknowledgements of a tx channel, applied at commit."""

    publishes: list[tuple[Exchange, Message, bool]] = field(default_factory=list)
    acks: list[commands.Basic.Ack | commands.Basic.Nack | commands.Basic.Reject] = field(
        default_factory=list
    )


def _make_tag(prefix: str) -> str:
    return prefix + base64.urlsafe_b64encode(secrets.token_bytes(16)).decode()[:22]


class Channel:
    """See the module docstring."""

    def __init__(self, connection: Connection, number: int) -> None:
        self.connection = connection
        self.number = number
        self.vhost = connection.vhost
        self.state = ChannelState.OPEN
        self.consumers: dict[str, ChannelConsumer] = {}
        self.unacked: dict[int, Delivery] = {}
        self._next_tag = 1
        self.prefetch_global = 0
        self.consumer_prefetch = 0
        self.flow_active = True
        self.confirms: PublisherConfirms | None = None
        self.tx: Transaction | None = None
        self._content: PendingContent | None = None
        self.last_queue = ""
        self.stream: Stream | None = None

    # -- state -------------------------------------------------------------------------
    @property
    def can_deliver(self) -> bool:
        return self.state is ChannelState.OPEN and self.flow_active and self.connection.writable

    def send(self, method: Method) -> None:
        self.connection.send_method(self.number, method)

    # -- methods -----------------------------------------------------------------------
    def method(self, method: Method) -> None:
        """Handle one method on this channel."""
        if self.state is ChannelState.CLOSING:
            if isinstance(method, commands.Channel.CloseOk):
                self._finish_close()
            elif isinstance(method, commands.Channel.Close):
                self.send(commands.Channel.CloseOk())
                self._finish_close()
            return
        if self._content is not None:
            raise AmqpError(
                ReplyCode.UNEXPECTED_FRAME,
                f"expected content header for basic.publish, got {method.name}",
                method.index >> 16,
                method.index & 0xFFFF,
            )
        handler = _HANDLERS.get(type(method))
        if handler is None:
            raise AmqpError(
                ReplyCode.NOT_IMPLEMENTED
                if type(method) in _UNSUPPORTED
                else ReplyCode.COMMAND_INVALID,
                f"{method.name} is not supported on a channel",
                method.index >> 16,
                method.index & 0xFFFF,
            )
        try:
            handler(self, method)
        except AmqpError as error:
            if not error.class_id:
                error.class_id, error.method_id = method.index >> 16, method.index & 0xFFFF
            if error.closes_connection:
                raise
            self.channel_error(error)

    def channel_error(self, error: AmqpError) -> None:
        """Close this channel with a soft error; the connection carries on."""
        conn = self.connection
        conn.ctx.log.info(
            "channel_error",
            connection=conn.name,
            channel=self.number,
            reply_code=int(error.reply_code),
            reply_text=error.reply_text,
        )
        self.release_resources()
        self.state = ChannelState.CLOSING
        self.send(
            commands.Channel.Close(
                reply_code=int(error.reply_code),
                reply_text=error.wire_text(),
                class_id=error.class_id,
                method_id=error.method_id,
            )
        )

    def _finish_close(self) -> None:
        self.release_resources()
        self.state = ChannelState.CLOSED
        self.connection.channel_closed(self)

    # -- channel class -----------------------------------------------------------------
    def _channel_open(self, method: commands.Channel.Open) -> None:
        raise AmqpError(ReplyCode.CHANNEL_ERROR, f"channel {self.number} is already open")

    def _channel_close(self, method: commands.Channel.Close) -> None:
        self.release_resources()
        self.send(commands.Channel.CloseOk())
        self.state = ChannelState.CLOSED
        self.connection.channel_closed(self)

    def _channel_close_ok(self, method: commands.Channel.CloseOk) -> None:
        raise AmqpError(ReplyCode.CHANNEL_ERROR, "channel.close-ok without channel.close")

    def _channel_flow(self, method: commands.Channel.Flow) -> None:
        self.flow_active = bool(method.active)
        self.send(commands.Channel.FlowOk(active=self.flow_active))
        if self.flow_active:
            self.resume_deliveries()

    # -- exchange class ----------------------------------------------------------------
    def _exchange_declare(self, method: commands.Exchange.Declare) -> None:
        name = method.exchange or ""
        _check_name("exchange", name, 40, 10)
        self.vhost.declare_exchange(
            name,
            method.exchange_type or "direct",
            passive=bool(method.passive),
            durable=bool(method.durable),
            auto_delete=bool(method.auto_delete),
            internal=bool(method.internal),
            arguments=dict(method.arguments or {}),
        )
        if not method.nowait:
            self.send(commands.Exchange.DeclareOk())

    def _exchange_delete(self, method: commands.Exchange.Delete) -> None:
        self.vhost.delete_exchange(method.exchange or "", if_unused=bool(method.if_unused))
        if not method.nowait:
            self.send(commands.Exchange.DeleteOk())

    # -- queue class -------------------------------------------------------------------
    def _queue_name(self, name: str | None) -> str:
        if name:
            return name
        if not self.last_queue:
            raise AmqpError(ReplyCode.NOT_FOUND, "no previously declared queue")
        return self.last_queue

    def _queue_declare(self, method: commands.Queue.Declare) -> None:
        name = method.queue or ""
        _check_name("queue", name, 50, 10)
        queue = self.vhost.declare_queue(
            name,
            passive=bool(method.passive),
            durable=bool(method.durable),
            exclusive=bool(method.exclusive),
            auto_delete=bool(method.auto_delete),
            arguments=dict(method.arguments or {}),
            owner=self.connection,
        )
        self.last_queue = queue.name
        if not method.nowait:
            self.send(
                commands.Queue.DeclareOk(
                    queue=queue.name,
                    message_count=queue.message_count,
                    consumer_count=queue.consumer_count,
                )
            )

    def _queue_bind(self, method: commands.Queue.Bind) -> None:
        queue = self._queue_name(method.queue)
        routing_key = method.routing_key or ("" if method.queue else queue)
        self.vhost.bind(
            queue,
            method.exchange or "",
            routing_key,
            dict(method.arguments or {}),
            owner=self.connection,
        )
        if not method.nowait:
            self.send(commands.Queue.BindOk())

    def _queue_unbind(self, method: commands.Queue.Unbind) -> None:
        self.vhost.unbind(
            self._queue_name(method.queue),
            method.exchange or "",
            method.routing_key or "",
            dict(method.arguments or {}),
            owner=self.connection,
        )
        self.send(commands.Queue.UnbindOk())

    def _queue_purge(self, method: commands.Queue.Purge) -> None:
        count = self.vhost.purge_queue(self._queue_name(method.queue), owner=self.connection)
        if not method.nowait:
            self.send(commands.Queue.PurgeOk(message_count=count))

    def _queue_delete(self, method: commands.Queue.Delete) -> None:
        count = self.vhost.delete_queue(
            self._queue_name(method.queue),
            if_unused=bool(method.if_unused),
            if_empty=bool(method.if_empty),
            owner=self.connection,
        )
        if not method.nowait:
            self.send(commands.Queue.DeleteOk(message_count=count))

    # -- basic: consuming --------------------------------------------------------------
    def _basic_qos(self, method: commands.Basic.Qos) -> None:
        if method.prefetch_size:
            raise AmqpError(ReplyCode.NOT_IMPLEMENTED, f"prefetch_size!=0 ({method.prefetch_size})")
        count = int(method.prefetch_count or 0)
        if method.global_:
            self.prefetch_global = count
        else:
            self.consumer_prefetch = count
        self.send(commands.Basic.QosOk())
        self.resume_deliveries()

    def _basic_consume(self, method: commands.Basic.Consume) -> None:
        hooks = self.connection.ctx.streams
        name = method.queue or ""
        if hooks is not None and name.startswith(HA_STREAM_PREFIX):
            self._stream_consume(hooks, name, method)
            return
        queue = self.vhost.queue(self._queue_name(method.queue), owner=self.connection)
        tag = method.consumer_tag or _make_tag("amq.ctag-")
        if tag in self.consumers:
            raise AmqpError(ReplyCode.NOT_ALLOWED, f"attempt to reuse consumer tag '{tag}'")
        if queue.has_exclusive_consumer() or (method.exclusive and queue.consumer_count):
            raise AmqpError(
                ReplyCode.ACCESS_REFUSED,
                f"queue '{queue.name}' in vhost '{self.vhost.name}' in exclusive use",
            )
        consumer = ChannelConsumer(
            self,
            tag,
            queue,
            no_ack=bool(method.no_ack),
            exclusive=bool(method.exclusive),
            prefetch=self.consumer_prefetch,
        )
        self.consumers[tag] = consumer
        if not method.nowait:
            self.send(commands.Basic.ConsumeOk(consumer_tag=tag))
        queue.add_consumer(consumer)

    def _stream_consume(
        self, hooks: StreamHooks, name: str, method: commands.Basic.Consume
    ) -> None:
        if self.stream is not None or self.consumers:
            raise AmqpError(
                ReplyCode.NOT_ALLOWED, "an HA stream needs a channel of its own", 60, 20
            )
        tag = method.consumer_tag or _make_tag("amq.ctag-")
        self.stream = hooks.subscribe(self, name, tag, dict(method.arguments or {}))
        if not method.nowait:
            self.send(commands.Basic.ConsumeOk(consumer_tag=tag))

    def take_delivery_tag(self) -> int:
        """The next delivery tag of this channel (for a stream's deliveries)."""
        tag = self._next_tag
        self._next_tag = tag + 1
        return tag

    def _basic_cancel(self, method: commands.Basic.Cancel) -> None:
        tag = method.consumer_tag or ""
        consumer = self.consumers.pop(tag, None)
        if consumer is not None:
            self._remove_consumer(consumer)
        if not method.nowait:
            self.send(commands.Basic.CancelOk(consumer_tag=tag))

    def _remove_consumer(self, consumer: ChannelConsumer) -> None:
        queue = consumer.queue
        queue.remove_consumer(consumer)
        self.vhost.consumer_cancelled(queue)

    def consumer_cancelled_by_broker(self, consumer: ChannelConsumer) -> None:
        """The consumer's queue was deleted: tell the client if it understands."""
        if self.consumers.pop(consumer.tag, None) is None:
            return
        if self.state is ChannelState.OPEN and self.connection.capability("consumer_cancel_notify"):
            self.send(commands.Basic.Cancel(consumer_tag=consumer.tag, nowait=True))

    def deliver(self, consumer: ChannelConsumer, queue: Queue, entry: Entry) -> None:
        """Send basic.deliver with the content; book it until acknowledged."""
        message = entry.message
        route = message.encoded_route
        if route is None:
            route = framing.encoded_route(message.exchange, message.routing_key)
            message.encoded_route = route
        tag = self._next_tag
        self._next_tag = tag + 1
        conn = self.connection
        conn.write(
            framing.deliver_method(
                self.number, consumer.tag_bytes, tag, entry.delivery_count > 0, route
            )
            + framing.content_frames(
                self.number, message.properties_raw, message.body, conn.frame_max
            )
        )
        conn.messages_delivered += 1
        if consumer.no_ack:
            queue.delivered(entry, True)
        else:
            queue.delivered(entry, False)
            self.unacked[tag] = Delivery(queue, entry, consumer)
            consumer.unacked += 1

    def _basic_get(self, method: commands.Basic.Get) -> None:
        queue = self.vhost.queue(self._queue_name(method.queue), owner=self.connection)
        entry = queue.get()
        if entry is None:
            self.send(commands.Basic.GetEmpty())
            return
        message = entry.message
        tag = self._next_tag
        self._next_tag = tag + 1
        conn = self.connection
        conn.write(
            framing.marshal_method(
                commands.Basic.GetOk(
                    delivery_tag=tag,
                    redelivered=entry.delivery_count > 0,
                    exchange=message.exchange,
                    routing_key=message.routing_key,
                    message_count=queue.message_count,
                ),
                self.number,
            )
            + framing.content_frames(
                self.number, message.properties_raw, message.body, conn.frame_max
            )
        )
        conn.messages_delivered += 1
        no_ack = bool(method.no_ack)
        queue.delivered(entry, no_ack)
        if not no_ack:
            self.unacked[tag] = Delivery(queue, entry, None)

    # -- basic: acknowledgements -------------------------------------------------------
    def _take_deliveries(self, tag: int, multiple: bool) -> list[Delivery]:
        if multiple:
            if tag >= self._next_tag:
                raise precondition_failed(f"unknown delivery tag {tag}")
            if tag == 0:
                taken = list(self.unacked.values())
                self.unacked.clear()
                return taken
            keys = []
            for key in self.unacked:
                if key > tag:
                    break
                keys.append(key)
            return [self.unacked.pop(key) for key in keys]
        delivery = self.unacked.pop(tag, None)
        if delivery is None:
            raise precondition_failed(f"unknown delivery tag {tag}")
        return [delivery]

    def _settle(self, deliveries: Iterable[Delivery], ack: bool, requeue: bool) -> None:
        touched: set[Queue] = set()
        requeues: dict[Queue, list[Entry]] = {}
        for delivery in deliveries:
            consumer = delivery.consumer
            if consumer is not None:
                consumer.unacked -= 1
                touched.add(consumer.queue)
            queue = delivery.queue
            if ack:
                queue.settle(delivery.entry)
            elif requeue:
                requeues.setdefault(queue, []).append(delivery.entry)
            else:
                queue.reject(delivery.entry, False)
        for queue, entries in requeues.items():
            queue.requeue(entries)
        if self.prefetch_global:
            touched.update(c.queue for c in self.consumers.values())
        for queue in touched:
            if not queue.deleted:
                queue.dispatch()

    def _basic_ack(self, method: commands.Basic.Ack) -> None:
        if self.stream is not None:
            self.stream.acknowledged(int(method.delivery_tag or 0), bool(method.multiple))
            return
        if self.tx is not None:
            self._check_tag(int(method.delivery_tag or 0), bool(method.multiple))
            self.tx.acks.append(method)
            return
        self._settle(
            self._take_deliveries(int(method.delivery_tag or 0), bool(method.multiple)),
            ack=True,
            requeue=False,
        )

    def _basic_nack(self, method: commands.Basic.Nack) -> None:
        if self.tx is not None:
            self._check_tag(int(method.delivery_tag or 0), bool(method.multiple))
            self.tx.acks.append(method)
            return
        self._settle(
            self._take_deliveries(int(method.delivery_tag or 0), bool(method.multiple)),
            ack=False,
            requeue=bool(method.requeue),
        )

    def _basic_reject(self, method: commands.Basic.Reject) -> None:
        if self.tx is not None:
            self._check_tag(int(method.delivery_tag or 0), False)
            self.tx.acks.append(method)
            return
        self._settle(
            self._take_deliveries(int(method.delivery_tag or 0), False),
            ack=False,
            requeue=bool(method.requeue),
        )

    def _check_tag(self, tag: int, multiple: bool) -> None:
        if multiple:
            if tag >= self._next_tag:
                raise precondition_failed(f"unknown delivery tag {tag}")
        elif tag not in self.unacked:
            raise precondition_failed(f"unknown delivery tag {tag}")

    def _basic_recover(self, method: commands.Basic.Recover) -> None:
        self._recover(bool(method.requeue))
        self.send(commands.Basic.RecoverOk())

    def _basic_recover_async(self, method: commands.Basic.RecoverAsync) -> None:
        self._recover(bool(method.requeue))

    def _recover(self, requeue: bool) -> None:
        if not requeue:
            # As RabbitMQ: redelivering to the original consumer is not supported.
            raise AmqpError(ReplyCode.NOT_IMPLEMENTED, "requeue=false")
        deliveries = list(self.unacked.values())
        self.unacked.clear()
        self._settle(deliveries, ack=False, requeue=True)

    # -- basic: publishing -------------------------------------------------------------
    def publish_method(self, payload: bytes) -> None:
        """basic.publish (decoded by the lean codec); the content follows."""
        if self._content is not None:
            raise AmqpError(
                ReplyCode.UNEXPECTED_FRAME,
                "expected content header for basic.publish, got Basic.Publish",
                60,
                40,
            )
        exchange_name, routing_key, mandatory, immediate = framing.unmarshal_publish(payload)
        if immediate:
            raise AmqpError(ReplyCode.NOT_IMPLEMENTED, "immediate=true", 60, 40)
        try:
            exchange = self.vhost.check_publish(exchange_name)
        except AmqpError as error:
            error.class_id, error.method_id = 60, 40
            self.channel_error(error)
            return
        self._content = PendingContent(exchange, routing_key, mandatory)

    def content_header(self, payload: bytes) -> None:
        if self.state is not ChannelState.OPEN:
            return  # discarded: the channel is closing
        pending = self._content
        if pending is None or pending.body_size >= 0:
            raise AmqpError(ReplyCode.UNEXPECTED_FRAME, "content header without basic.publish")
        body_size, raw = framing.unmarshal_content_header(payload)
        pending.body_size = body_size
        pending.properties_raw = raw
        limit = self.connection.ctx.settings.max_body_size
        if body_size > limit:
            self._content = None
            self.channel_error(
                precondition_failed(f"message size {body_size} is larger than max size {limit}")
            )
            return
        if body_size == 0:
            self._complete_publish(pending, b"")

    def content_body(self, payload: bytes) -> None:
        if self.state is not ChannelState.OPEN:
            return
        pending = self._content
        if pending is None or pending.body_size < 0:
            raise AmqpError(ReplyCode.UNEXPECTED_FRAME, "content body without content header")
        pending.received += len(payload)
        if pending.received > pending.body_size:
            raise AmqpError(
                ReplyCode.FRAME_ERROR,
                f"content body of {pending.received} bytes exceeds the declared"
                f" {pending.body_size}",
            )
        if pending.received == pending.body_size:
            if pending.chunks:
                pending.chunks.append(payload)
                body = b"".join(pending.chunks)
            else:
                body = payload
            self._complete_publish(pending, body)
        else:
            pending.chunks.append(payload)

    def _complete_publish(self, pending: PendingContent, body: bytes) -> None:
        self._content = None
        try:
            scanned = properties.scan(pending.properties_raw)
        except ValueError as exc:
            raise AmqpError(ReplyCode.SYNTAX_ERROR, f"malformed content header: {exc}") from exc
        try:
            message = Message(
                pending.exchange.name,
                pending.routing_key,
                pending.properties_raw,
                body,
                scanned=scanned,
            )
        except ValueError as exc:
            self.channel_error(AmqpError(ReplyCode.PRECONDITION_FAILED, str(exc), 60, 40))
            return
        self.connection.messages_published += 1
        if self.tx is not None:
            self.tx.publishes.append((pending.exchange, message, pending.mandatory))
            return
        self._publish(pending.exchange, message, pending.mandatory)

    def _publish(self, exchange: Exchange, message: Message, mandatory: bool) -> None:
        confirms = self.confirms
        handle = confirms.publish() if confirms is not None else None
        message.confirm = handle
        if exchange.name not in self.vhost.exchanges:
            # Deleted while a transaction held the publish.
            result_routed, rejected = False, 0
        else:
            result = self.vhost.publish(exchange, message)
            result_routed, rejected = result.routed, result.rejected
        if not result_routed and mandatory:
            conn = self.connection
            conn.write(
                framing.marshal_method(
                    commands.Basic.Return(
                        reply_code=int(ReplyCode.NO_ROUTE),
                        reply_text="NO_ROUTE",
                        exchange=message.exchange,
                        routing_key=message.routing_key,
                    ),
                    self.number,
                )
                + framing.content_frames(
                    self.number, message.properties_raw, message.body, conn.frame_max
                )
            )
        if handle is not None:
            handle.release(ok=rejected == 0)

    # -- confirm and tx classes --------------------------------------------------------
    def _confirm_select(self, method: commands.Confirm.Select) -> None:
        if self.tx is not None:
            raise precondition_failed("cannot switch from tx to confirm mode")
        if self.confirms is None:
            self.confirms = PublisherConfirms(
                on_settled=lambda: self.connection.confirms_settled(self)
            )
        if not method.nowait:
            self.send(commands.Confirm.SelectOk())

    def send_confirm_replies(self) -> None:
        confirms = self.confirms
        if confirms is None or self.state is not ChannelState.OPEN:
            return
        for reply in confirms.take_replies():
            method: Method
            if reply.ack:
                method = commands.Basic.Ack(
                    delivery_tag=reply.delivery_tag, multiple=reply.multiple
                )
            else:
                method = commands.Basic.Nack(
                    delivery_tag=reply.delivery_tag, multiple=reply.multiple, requeue=False
                )
            self.send(method)

    def _tx_select(self, method: commands.Tx.Select) -> None:
        if self.confirms is not None:
            raise precondition_failed("cannot switch from confirm to tx mode")
        if self.tx is None:
            self.tx = Transaction()
        self.send(commands.Tx.SelectOk())

    def _tx_commit(self, method: commands.Tx.Commit) -> None:
        tx = self.tx
        if tx is None:
            raise precondition_failed("channel is not transactional")
        self.tx = Transaction()
        for exchange, message, mandatory in tx.publishes:
            self._publish(exchange, message, mandatory)
        for ack in tx.acks:
            tag = int(ack.delivery_tag or 0)
            if isinstance(ack, commands.Basic.Ack):
                self._settle(self._take_deliveries(tag, bool(ack.multiple)), True, False)
            elif isinstance(ack, commands.Basic.Nack):
                self._settle(
                    self._take_deliveries(tag, bool(ack.multiple)), False, bool(ack.requeue)
                )
            elif isinstance(ack, commands.Basic.Reject):
                self._settle(self._take_deliveries(tag, False), False, bool(ack.requeue))
        self.send(commands.Tx.CommitOk())

    def _tx_rollback(self, method: commands.Tx.Rollback) -> None:
        if self.tx is None:
            raise precondition_failed("channel is not transactional")
        self.tx = Transaction()
        self.send(commands.Tx.RollbackOk())

    # -- flow and cleanup --------------------------------------------------------------
    def resume_deliveries(self) -> None:
        """Credit or writability came back: let the queues deliver again."""
        for queue in {c.queue for c in self.consumers.values()}:
            if not queue.deleted:
                queue.dispatch()

    def release_resources(self) -> None:
        """Cancel consumers, requeue unacknowledged deliveries, drop pending confirms."""
        consumers = list(self.consumers.values())
        self.consumers.clear()
        for consumer in consumers:
            self._remove_consumer(consumer)
        if self.unacked:
            deliveries = list(self.unacked.values())
            self.unacked.clear()
            requeues: dict[Queue, list[Entry]] = {}
            for delivery in deliveries:
                requeues.setdefault(delivery.queue, []).append(delivery.entry)
            for queue, entries in requeues.items():
                queue.requeue(entries)
        if self.confirms is not None:
            self.confirms.close()
        if self.stream is not None:
            self.stream.close()
            self.stream = None
        self._content = None
        self.tx = None


_Handler = Any
_HANDLERS: dict[type[Method], _Handler] = {
    commands.Channel.Open: Channel._channel_open,
    commands.Channel.Close: Channel._channel_close,
    commands.Channel.CloseOk: Channel._channel_close_ok,
    commands.Channel.Flow: Channel._channel_flow,
    commands.Exchange.Declare: Channel._exchange_declare,
    commands.Exchange.Delete: Channel._exchange_delete,
    commands.Queue.Declare: Channel._queue_declare,
    commands.Queue.Bind: Channel._queue_bind,
    commands.Queue.Unbind: Channel._queue_unbind,
    commands.Queue.Purge: Channel._queue_purge,
    commands.Queue.Delete: Channel._queue_delete,
    commands.Basic.Qos: Channel._basic_qos,
    commands.Basic.Consume: Channel._basic_consume,
    commands.Basic.Cancel: Channel._basic_cancel,
    commands.Basic.Get: Channel._basic_get,
    commands.Basic.Ack: Channel._basic_ack,
    commands.Basic.Nack: Channel._basic_nack,
    commands.Basic.Reject: Channel._basic_reject,
    commands.Basic.Recover: Channel._basic_recover,
    commands.Basic.RecoverAsync: Channel._basic_recover_async,
    commands.Confirm.Select: Channel._confirm_select,
    commands.Tx.Select: Channel._tx_select,
    commands.Tx.Commit: Channel._tx_commit,
    commands.Tx.Rollback: Channel._tx_rollback,
}

#: Valid AMQP 0-9-1 channel methods this broker does not implement (540).
_UNSUPPORTED: frozenset[type[Method]] = frozenset(
    {commands.Exchange.Bind, commands.Exchange.Unbind}
)
