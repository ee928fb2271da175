"""A channel's deliveries: consumers, deliveries, basic.get, acknowledgements.

Contract: :class:`Deliveries` (owned by a :class:`~broker.amqp.channel.Channel`, one per
channel) serves basic.qos, basic.consume (a :class:`ChannelConsumer` the queue calls, or an
HA stream when the broker's :class:`~broker.amqp.context.StreamHooks` serve the name),
basic.cancel, basic.get, basic.ack/nack/reject and basic.recover. It numbers deliveries
(one delivery-tag sequence per channel, streams included), books every unacknowledged one
as a :class:`Delivery` until it is settled, and counts prefetch credit per consumer and per
channel. Settling re-dispatches the queues that may deliver again. An unknown delivery tag
closes the channel (406). (Acks on a tx channel wait for commit: the channel keeps them in
its publisher's transaction and settles them here at commit.)

It is built with two ports and nothing else of the channel or the connection: a
:class:`DeliveriesHost` (its channel: send a method, may it deliver, the frames kept behind
a held basic.get, the channel as a :class:`~broker.amqp.stream_sink.StreamSink`) and a
:class:`~broker.amqp.ports.Wire` (write bytes, frame size).

Call direction: queues call :class:`ChannelConsumer`; the consumer calls its
:class:`Deliveries`; the deliveries call their ports.

THREAD UNSAFE: the channel's event loop.
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from pamqp import commands
from pamqp.base import Frame as Method

from broker.amqp import framing
from broker.amqp.context import Logger, Stream, StreamHooks
from broker.amqp.ports import Wire
from broker.amqp.stream_sink import StreamSink
from broker.core import properties
from broker.core.direct_reply import REPLY_TO
from broker.core.errors import AmqpError, ReplyCode, precondition_failed
from broker.core.message import Entry
from broker.core.queue import Queue
from broker.core.vhost import VirtualHost
from common.weakly import weakly


class DeliveriesHost(StreamSink, Protocol):
    """What :class:`Deliveries` need of their channel (which also is the
    :class:`~broker.amqp.stream_sink.StreamSink` an HA stream writes to)."""

    #: The channel's number (the frames' channel field).
    number: int

    @property
    def is_open(self) -> bool:
        """Not closing or closed (a broker-side basic.cancel goes out only then)."""
        ...

    @property
    def released_soon(self) -> bool:
        """Its connection closes: the channel is released at a later turn of the loop and
        nothing it writes meanwhile is sent."""
        ...

    def send(self, method: Method) -> None: ...

    def queue_name(self, name: str | None) -> str:
        """``name``, or the channel's last declared queue when empty (404 without one)."""
        ...

    def capability(self, name: str) -> bool:
        """A flag from the client's ``capabilities`` table."""
        ...

    def keep_frames(self) -> None:
        """A basic.get is held: keep the frames that follow on the channel."""
        ...

    def held_get_answered(self) -> None:
        """The held basic.get was answered: replay the frames kept behind it."""
        ...

    def after_replicated(self, done: Callable[[], None], queues: tuple[Queue, ...] = ()) -> None:
        """Call ``done`` once the store and the backups hold what is done so far."""
        ...


class ChannelConsumer:
    """A basic.consume subscription; the queue calls it (see ``broker.core.queue``)."""

    __slots__ = (
        "channel",
        "exclusive",
        "no_ack",
        "prefetch",
        "priority",
        "queue",
        "tag",
        "tag_bytes",
        "unacked",
    )

    def __init__(
        self,
        channel: Deliveries,
        tag: str,
        queue: Queue,
        no_ack: bool,
        exclusive: bool,
        prefetch: int,
        priority: int = 0,
    ) -> None:
        self.channel = channel
        self.tag = tag
        self.tag_bytes = framing.short_str_bytes(tag)
        self.queue = queue
        self.no_ack = no_ack
        self.exclusive = exclusive
        self.prefetch = prefetch
        #: RabbitMQ's consumer priority (``x-priority``): higher ones are served first.
        self.priority = priority
        self.unacked = 0

    def can_deliver(self) -> bool:
        channel = self.channel
        if not channel.host.can_deliver:
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


class ChannelGet:
    """A basic.get its queue holds (:class:`~broker.core.queue_contracts.HeldGet`): the delivery
    gate held back the head. The channel defers the frames that follow until it is
    answered, so get-ok comes in order with the channel's other replies."""

    __slots__ = ("channel", "no_ack", "queue")

    def __init__(self, channel: Deliveries, queue: Queue, no_ack: bool) -> None:
        self.channel = channel
        self.queue = queue
        self.no_ack = no_ack

    def answer(self, queue: Queue, entry: Entry | None) -> None:
        self.channel.held_get_answered(self, entry)


@dataclass(slots=True)
class Delivery:
    """An unacknowledged delivery."""

    queue: Queue
    entry: Entry
    consumer: ChannelConsumer | None


class TxAcknowledgement:
    """basic.ack, basic.nack or basic.reject on a tx channel: held by its transaction
    (:class:`~broker.core.transaction.Transaction`, a
    :class:`~broker.core.transaction.TxSettlement`) and applied at commit."""

    __slots__ = ("deliveries", "method")

    def __init__(
        self,
        deliveries: Deliveries,
        method: commands.Basic.Ack | commands.Basic.Nack | commands.Basic.Reject,
    ) -> None:
        self.deliveries = deliveries
        self.method = method

    def apply(self) -> list[Queue]:
        deliveries, ack = self.deliveries, self.method
        tag = int(ack.delivery_tag or 0)
        if isinstance(ack, commands.Basic.Ack | commands.Basic.Nack):
            taken = deliveries.take_deliveries(tag, bool(ack.multiple))
        else:
            taken = deliveries.take_deliveries(tag, False)
        queues = {id(d.queue): d.queue for d in taken}
        if isinstance(ack, commands.Basic.Ack):
            deliveries.settle(taken, True, False)
        else:
            deliveries.settle(taken, False, bool(ack.requeue))
        return list(queues.values())

    def rolled_back(self) -> None:
        """tx.rollback: the deliveries stay unacknowledged (0-9-1: not redelivered)."""


def _make_tag(prefix: str) -> str:
    return prefix + base64.urlsafe_b64encode(secrets.token_bytes(16)).decode()[:22]


class Deliveries:
    """Consumers, deliveries and acknowledgements of one channel; see the module docstring."""

    def __init__(
        self,
        host: DeliveriesHost,
        wire: Wire,
        vhost: VirtualHost,
        owner: object,
        streams: StreamHooks | None,
        log: Logger,
    ) -> None:
        self.host = host
        self._wire = wire
        self.number = host.number
        self.vhost = vhost
        #: Who owns the exclusive queues this channel declares (its connection).
        self._owner = owner
        self._streams = streams
        self._log = log
        self.consumers: dict[str, ChannelConsumer] = {}
        self.unacked: dict[int, Delivery] = {}
        self._next_tag = 1
        self.prefetch_global = 0
        self.consumer_prefetch = 0
        self.stream: Stream | None = None
        #: The queue of this channel's direct reply-to consumer, if it has one.
        self.reply_queue: Queue | None = None
        self._stream_tag = b""
        self._stream_route = b""
        #: A basic.get the queue holds (the channel keeps the frames received since, and
        #: replays them in order once it is answered).
        self.held_get: ChannelGet | None = None

    def send(self, method: Method) -> None:
        self.host.send(method)

    # -- basic: consuming --------------------------------------------------------------
    def basic_qos(self, method: commands.Basic.Qos) -> None:
        if method.prefetch_size:
            raise AmqpError(ReplyCode.NOT_IMPLEMENTED, f"prefetch_size!=0 ({method.prefetch_size})")
        count = int(method.prefetch_count or 0)
        if method.global_:
            self.prefetch_global = count
        else:
            self.consumer_prefetch = count
        self.send(commands.Basic.QosOk())
        self.resume_deliveries()

    def basic_consume(self, method: commands.Basic.Consume) -> None:
        hooks = self._streams
        name = method.queue or ""
        if hooks is not None and hooks.serves(name):
            self._stream_consume(hooks, name, method)
            return
        if name == REPLY_TO:
            self._reply_consume(method)
            return
        queue = self.vhost.queue(self.host.queue_name(method.queue), owner=self._owner)
        tag = method.consumer_tag or _make_tag("amq.ctag-")
        if tag in self.consumers:
            raise AmqpError(ReplyCode.NOT_ALLOWED, f"attempt to reuse consumer tag '{tag}'")
        if queue.has_exclusive_consumer() or (method.exclusive and queue.consumer_count):
            raise AmqpError(
                ReplyCode.ACCESS_REFUSED,
                f"queue '{queue.name}' in vhost '{self.vhost.name}' in exclusive use",
            )
        priority = (method.arguments or {}).get("x-priority", 0)
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise precondition_failed(
                f"invalid arg 'x-priority' for queue '{queue.name}' in vhost"
                f" '{self.vhost.name}': {priority!r} (expected an integer)"
            )
        consumer = ChannelConsumer(
            self,
            tag,
            queue,
            no_ack=bool(method.no_ack),
            exclusive=bool(method.exclusive),
            prefetch=self.consumer_prefetch,
            priority=priority,
        )
        self.consumers[tag] = consumer
        if not method.nowait:
            self.send(commands.Basic.ConsumeOk(consumer_tag=tag))
        queue.add_consumer(consumer)

    def _reply_consume(self, method: commands.Basic.Consume) -> None:
        """basic.consume of ``amq.rabbitmq.reply-to``: this channel's reply consumer."""
        if not method.no_ack:
            raise precondition_failed("reply consumer cannot acknowledge")
        if self.reply_queue is not None:
            raise precondition_failed("reply consumer already set")
        tag = method.consumer_tag or _make_tag("amq.ctag-")
        if tag in self.consumers:
            raise AmqpError(ReplyCode.NOT_ALLOWED, f"attempt to reuse consumer tag '{tag}'")
        queue = self.vhost.replies.open(self._owner)
        consumer = ChannelConsumer(self, tag, queue, no_ack=True, exclusive=True, prefetch=0)
        self.consumers[tag] = consumer
        self.reply_queue = queue
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
        self._stream_tag = framing.short_str_bytes(tag)
        self._stream_route = framing.encoded_route("", name)
        self.stream = hooks.subscribe(self.host, name, dict(method.arguments or {}))
        if not method.nowait:
            self.send(commands.Basic.ConsumeOk(consumer_tag=tag))

    # -- the stream's deliveries (for the channel as a StreamSink) -----------------------
    def deliver_stream(self, body: bytes) -> int:
        tag = self._next_tag
        self._next_tag = tag + 1
        number = self.number
        wire = self._wire
        wire.write(
            framing.deliver_frames(
                number,
                self._stream_tag,
                tag,
                False,
                self._stream_route,
                properties.EMPTY,
                body,
                wire.frame_max,
            )
        )
        return tag

    def basic_cancel(self, method: commands.Basic.Cancel) -> None:
        tag = method.consumer_tag or ""
        consumer = self.consumers.pop(tag, None)
        if consumer is not None:
            self.remove_consumer(consumer)
        if not method.nowait:
            self.send(commands.Basic.CancelOk(consumer_tag=tag))

    def remove_consumer(self, consumer: ChannelConsumer) -> None:
        queue = consumer.queue
        if queue is self.reply_queue:
            self.reply_queue = None
        queue.remove_consumer(consumer)
        self.vhost.consumer_cancelled(queue)

    def consumer_cancelled_by_broker(self, consumer: ChannelConsumer) -> None:
        """The consumer's queue was deleted: tell the client if it understands, once the
        store and the backups hold the deletion, as the deleter's delete-ok (RabbitMQ sends
        the two together: amqplib's suite closes the channel on the cancel and drops what
        comes after; and a client told so finds the queue gone after a failover too)."""
        if self.consumers.pop(consumer.tag, None) is None:
            return
        if not self.host.capability("consumer_cancel_notify"):
            return
        cancel = commands.Basic.Cancel(consumer_tag=consumer.tag, nowait=True)
        host = self.host  # the channel itself: kept by the wait, which may outlive it

        def notify() -> None:
            if host.is_open:  # a channel closed meanwhile is not reopened
                host.send(cancel)

        host.after_replicated(notify)

    def deliver(self, consumer: ChannelConsumer, queue: Queue, entry: Entry) -> None:
        """Send basic.deliver with the content; book it until acknowledged."""
        message = entry.message
        route = message.encoded_route
        if route is None:
            route = framing.encoded_route(message.exchange, message.routing_key)
            message.encoded_route = route
        tag = self._next_tag
        self._next_tag = tag + 1
        conn = self._wire
        conn.write(
            framing.deliver_frames(
                self.number,
                consumer.tag_bytes,
                tag,
                entry.delivery_count > 0,
                route,
                message.properties_raw,
                message.body,
                conn.frame_max,
            )
        )
        conn.messages_delivered += 1
        if consumer.no_ack:
            queue.delivered(entry, True)
        else:
            queue.delivered(entry, False)
            self.unacked[tag] = Delivery(queue, entry, consumer)
            consumer.unacked += 1

    def basic_get(self, method: commands.Basic.Get) -> None:
        queue = self.vhost.queue(self.host.queue_name(method.queue), owner=self._owner)
        no_ack = bool(method.no_ack)
        entry = queue.get()
        if entry is not None:
            self._get_ok(queue, entry, no_ack)
            return
        held = ChannelGet(self, queue, no_ack)
        if queue.hold_get(held):  # ready messages the delivery gate holds back: wait
            self.held_get = held
            self._log.info(
                "basic_get_held",
                connection=self.host.connection_name,
                channel=self.number,
                queue=queue.name,
                messages=queue.message_count,
            )
            self.host.keep_frames()
            return
        self.send(commands.Basic.GetEmpty())

    def held_get_answered(self, held: ChannelGet, entry: Entry | None) -> None:
        """The queue answers a held basic.get; then the frames deferred behind it."""
        if self.held_get is not held:
            return
        self.held_get = None
        if entry is None:
            self.send(commands.Basic.GetEmpty())
        else:
            # its connection closing, the get-ok is never sent: booked unacknowledged
            # whatever its no-ack, so the channel's release requeues it
            self._get_ok(held.queue, entry, held.no_ack and not self.host.released_soon)
        self.host.held_get_answered()

    def cancel_held_get(self) -> None:
        """Forget the held basic.get (the message stays on its queue)."""
        held = self.held_get
        if held is not None:
            held.queue.cancel_get(held)
            self.held_get = None

    def _get_ok(self, queue: Queue, entry: Entry, no_ack: bool) -> None:
        message = entry.message
        tag = self._next_tag
        self._next_tag = tag + 1
        conn = self._wire
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
        queue.delivered(entry, no_ack)
        if not no_ack:
            self.unacked[tag] = Delivery(queue, entry, None)

    # -- basic: acknowledgements -------------------------------------------------------
    def take_deliveries(self, tag: int, multiple: bool) -> list[Delivery]:
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

    def settle(self, deliveries: Iterable[Delivery], ack: bool, requeue: bool) -> None:
        touched: set[Queue] = set()
        credited: dict[int, ChannelConsumer] = {}
        requeues: dict[Queue, list[Entry]] = {}
        acked: dict[Queue, list[Entry]] = {}  # settled a queue at a time (Queue.settle_all)
        for delivery in deliveries:
            consumer = delivery.consumer
            if consumer is not None:
                consumer.unacked -= 1
                credited[id(consumer)] = consumer
            queue = delivery.queue
            if ack:
                run = acked.get(queue)
                if run is None:
                    acked[queue] = run = []
                run.append(delivery.entry)
            elif requeue:
                requeues.setdefault(queue, []).append(delivery.entry)
            else:
                queue.reject(delivery.entry, False)
        for queue, entries in acked.items():
            queue.settle_all(entries)
        if self.prefetch_global:  # the channel's count fell: each of its consumers
            credited.update((id(c), c) for c in self.consumers.values())
        # Credit back before the requeues, which dispatch: as the consumers' counts are.
        for consumer in credited.values():
            consumer.queue.credit_returned(consumer)
            touched.add(consumer.queue)
        for queue, entries in requeues.items():
            queue.requeue(entries)
        for queue in touched:
            if not queue.deleted:
                queue.dispatch()

    def basic_ack(self, method: commands.Basic.Ack) -> None:
        if self.stream is not None:
            self.stream.acknowledged(int(method.delivery_tag or 0), bool(method.multiple))
            return
        self.settle(
            self.take_deliveries(int(method.delivery_tag or 0), bool(method.multiple)),
            ack=True,
            requeue=False,
        )

    def refuse(self, method: commands.Basic.Nack | commands.Basic.Reject, multiple: bool) -> None:
        """basic.nack or basic.reject: requeue or drop now."""
        tag = int(method.delivery_tag or 0)
        self.settle(self.take_deliveries(tag, multiple), ack=False, requeue=bool(method.requeue))

    def check_tag(self, tag: int, multiple: bool) -> None:
        if multiple:
            if tag >= self._next_tag:
                raise precondition_failed(f"unknown delivery tag {tag}")
        elif tag not in self.unacked:
            raise precondition_failed(f"unknown delivery tag {tag}")

    def basic_recover(self, method: commands.Basic.Recover) -> None:
        self._recover(bool(method.requeue))
        self.send(commands.Basic.RecoverOk())

    def basic_recover_async(self, method: commands.Basic.RecoverAsync) -> None:
        self._recover(bool(method.requeue))

    def _recover(self, requeue: bool) -> None:
        if not requeue:
            # As RabbitMQ: redelivering to the original consumer is not supported.
            raise AmqpError(ReplyCode.NOT_IMPLEMENTED, "requeue=false")
        deliveries = list(self.unacked.values())
        self.unacked.clear()
        self.settle(deliveries, ack=False, requeue=True)

    def release(self) -> None:
        """The channel closes: cancel its consumers and its held basic.get, requeue its
        unacknowledged deliveries, end its stream."""
        self.cancel_held_get()
        consumers = list(self.consumers.values())
        self.consumers.clear()
        for consumer in consumers:
            self.remove_consumer(consumer)
        if self.unacked:
            deliveries = list(self.unacked.values())
            self.unacked.clear()
            requeues: dict[Queue, list[Entry]] = {}
            for delivery in deliveries:
                requeues.setdefault(delivery.queue, []).append(delivery.entry)
            for queue, entries in requeues.items():
                queue.requeue(entries)
        if self.stream is not None:
            self.stream.close()
            self.stream = None
        # Nothing of it is given out any more: it holds its channel weakly from now on (no
        # reference cycle: common.weakly).
        self.host = weakly(self.host)

    def resume_deliveries(self) -> None:
        """Credit or writability came back: let the queues deliver again."""
        queues: dict[int, Queue] = {}
        for consumer in self.consumers.values():
            queue = consumer.queue
            queue.credit_returned(consumer)
            queues[id(queue)] = queue
        for queue in queues.values():
            if not queue.deleted:
                queue.dispatch()
