"""One AMQP 0-9-1 channel: the exchange, queue, basic, confirm and tx classes.

A channel turns methods into calls on the virtual host, tracks the deliveries it made
(delivery tags, acknowledgements, prefetch credit), assembles published content, and runs
publisher confirms and transactions. A soft :class:`~broker.core.errors.AmqpError` closes
only this channel (channel.close with the reply code); a hard one propagates to the
connection.

:class:`Channel` owns two parts, each built with a small port of what it needs (the
channel itself, and the connection as a :class:`~broker.amqp.ports.Wire`):

- its :class:`~broker.amqp.channel_consume.Deliveries` (consumers, deliveries, basic.get,
  acknowledgements, prefetch, delivery tags; :mod:`broker.amqp.channel_consume`);
- its :class:`~broker.amqp.channel_publish.Publisher` (basic.publish, its content,
  routing, confirm and tx modes; :mod:`broker.amqp.channel_publish`).

The channel keeps its state, the method dispatch (``_HANDLERS``, to itself or a part), the
channel, exchange and queue classes, tx.commit (through the commit core both protocols use,
:class:`broker.core.transaction.Transaction`, which holds the publisher's publishes and
the deliveries' acknowledgements), the frames its connection keeps behind a held
basic.get, the :class:`~broker.amqp.stream_sink.StreamSink` an HA stream writes to, and the
release of everything it holds when it closes. It knows its connection only as a
:class:`~broker.amqp.ports.ChannelConnection`.

THREAD UNSAFE: one event loop owns the channel (and its connection).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pamqp import commands
from pamqp.base import Frame as Method

from broker.amqp.channel_consume import Deliveries, TxAcknowledgement
from broker.amqp.channel_publish import Publisher
from broker.amqp.context import after_replicated
from broker.amqp.ports import ChannelConnection
from broker.amqp.state import ChannelState
from broker.core.direct_reply import REPLY_TO
from broker.core.errors import AmqpError, ReplyCode, precondition_failed
from broker.core.queue import Queue

_Handler = Any
#: As a module constant for the hot paths (an enum's attribute is looked up at each use).
_OPEN = ChannelState.OPEN


class Channel:
    """See the module docstring."""

    def __init__(self, connection: ChannelConnection, number: int) -> None:
        self.connection = connection
        self.number = number
        self.vhost = connection.vhost
        self.state = ChannelState.OPEN
        self.flow_active = True
        self.last_queue = ""
        #: The frames received on this channel since its basic.get was held (replayed in
        #: order once it is answered); None: none held (the connection's hot path).
        self.held_frames: list[tuple[int, bytes]] | None = None
        ctx = connection.ctx
        self.deliveries = Deliveries(self, connection, self.vhost, connection, ctx.streams, ctx.log)
        self.publisher = Publisher(
            self,
            connection,
            self.vhost,
            connection.user,
            ctx.settings.max_body_size,
            ctx.between_publishes,
        )

    # -- state -------------------------------------------------------------------------
    @property
    def can_deliver(self) -> bool:
        return self.state is _OPEN and self.flow_active and self.connection.writable

    @property
    def is_open(self) -> bool:
        return self.state is ChannelState.OPEN

    @property
    def released_soon(self) -> bool:
        return self.connection.releasing

    def send(self, method: Method) -> None:
        self.connection.send_method(self.number, method)

    def capability(self, name: str) -> bool:
        return self.connection.capability(name)

    @property
    def reply_queue(self) -> Queue | None:
        return self.deliveries.reply_queue

    def confirms_settled(self) -> None:
        self.connection.confirms_settled(self)

    def confirms_deferred(self) -> None:
        """The connection's flush kept this channel's confirm replies (not sent while the
        HA primary may not confirm): the next settled confirm asks for a flush again."""
        self.publisher.confirms_deferred()

    # -- the frames kept behind a held basic.get (for the deliveries) ------------------
    def keep_frames(self) -> None:
        if self.held_frames is None:
            self.held_frames = []

    def held_get_answered(self) -> None:
        if self.held_frames:
            self.connection.replay_held_frames(self.number)
        else:
            self.held_frames = None

    @property
    def get_is_held(self) -> bool:
        return self.deliveries.held_get is not None

    def cancel_held_get(self) -> list[tuple[int, bytes]]:
        """Forget the held basic.get (the message stays on its queue); returns the frames
        deferred behind it."""
        self.deliveries.cancel_held_get()
        frames, self.held_frames = self.held_frames, None
        return frames or []

    # -- the stream's sink (broker.amqp.stream_sink.StreamSink) ------------------------
    @property
    def client_properties(self) -> dict[str, Any]:
        return self.connection.client_properties

    @property
    def connection_name(self) -> str:
        return self.connection.name

    @property
    def peer(self) -> str:
        return self.connection.peer

    @property
    def user(self) -> str | None:
        return self.connection.user

    @property
    def consumer_prefetch(self) -> int:
        return self.deliveries.consumer_prefetch

    def deliver_stream(self, body: bytes) -> int:
        return self.deliveries.deliver_stream(body)

    def request_pump(self, key: int, pump: Callable[[], None]) -> None:
        self.connection.request_pump(key, pump)

    def fail(self, text: str) -> None:
        self.connection.connection_error(AmqpError(ReplyCode.INTERNAL_ERROR, text))

    @property
    def close_reason(self) -> str | None:
        return self.connection.close_reason

    # -- publishing (the connection's frames for the publisher) ------------------------
    def publish_method(self, payload: bytes) -> None:
        """basic.publish (decoded by the lean codec); the content follows."""
        self.publisher.publish_method(payload)

    def content_header(self, payload: bytes) -> None:
        if self.state is _OPEN:  # else discarded: the channel is closing
            self.publisher.content_header(payload)

    def content_body(self, payload: bytes) -> None:
        if self.state is _OPEN:
            self.publisher.content_body(payload)

    def send_replicated(self, method: Method, queues: tuple[Queue, ...] = ()) -> None:
        """Reply to a configuration change once the backups have it (the context's
        barrier: an HA primary; with ``queues``, and every dequeue of them so far) and the
        store has it on disk (its store barrier); dropped if the channel closed meanwhile."""
        ctx = self.connection.ctx
        if ctx.barrier is None and ctx.store_barrier is None:
            self.send(method)
            return

        def reply() -> None:
            if (
                self.state is ChannelState.OPEN
                and self.connection.channels.get(self.number) is self
            ):
                self.send(method)

        self.after_replicated(reply, queues)

    def after_replicated(self, done: Callable[[], None], queues: tuple[Queue, ...] = ()) -> None:
        """Call ``done`` once the backups and the store have what is done so far (see
        :meth:`send_replicated`)."""
        ctx = self.connection.ctx
        after_replicated(ctx.barrier, ctx.store_barrier, done, queues)

    # -- methods -----------------------------------------------------------------------
    def method(self, method: Method) -> None:
        """Handle one method on this channel."""
        if self.state is ChannelState.CLOSING:
            if isinstance(method, commands.Channel.CloseOk):
                self._finish_close()
            elif isinstance(method, commands.Channel.Close):
                # Both sides closed at once: answer, and wait for the peer's close-ok of
                # ours (as RabbitMQ does); freed now, that close-ok met a closed channel: 504.
                self.send(commands.Channel.CloseOk())
            return
        if self.publisher.content is not None:
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
            self.deliveries.resume_deliveries()

    # -- exchange class ----------------------------------------------------------------
    def _exchange_declare(self, method: commands.Exchange.Declare) -> None:
        name = method.exchange or ""
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
            self.send_replicated(commands.Exchange.DeclareOk())

    def _exchange_delete(self, method: commands.Exchange.Delete) -> None:
        self.vhost.delete_exchange(method.exchange or "", if_unused=bool(method.if_unused))
        if not method.nowait:
            self.send_replicated(commands.Exchange.DeleteOk())

    def _exchange_bind(self, method: commands.Exchange.Bind) -> None:
        self.vhost.bind_exchange(
            method.destination or "",
            method.source or "",
            method.routing_key or "",
            dict(method.arguments or {}),
        )
        if not method.nowait:
            self.send_replicated(commands.Exchange.BindOk())

    def _exchange_unbind(self, method: commands.Exchange.Unbind) -> None:
        self.vhost.unbind_exchange(
            method.destination or "",
            method.source or "",
            method.routing_key or "",
            dict(method.arguments or {}),
        )
        if not method.nowait:
            self.send_replicated(commands.Exchange.UnbindOk())

    # -- queue class -------------------------------------------------------------------
    def queue_name(self, name: str | None) -> str:
        if name:
            return name
        if not self.last_queue:
            raise AmqpError(ReplyCode.NOT_FOUND, "no previously declared queue")
        return self.last_queue

    def _queue_declare(self, method: commands.Queue.Declare) -> None:
        name = method.queue or ""
        if method.passive and (name == REPLY_TO or name in self.vhost.replies.queues):
            # Direct reply-to's pseudo-queue, and reply names in use, exist (RabbitMQ).
            if not method.nowait:
                self.send(commands.Queue.DeclareOk(queue=name, message_count=0, consumer_count=0))
            return
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
            self.send_replicated(
                commands.Queue.DeclareOk(
                    queue=queue.name,
                    message_count=queue.message_count,
                    consumer_count=queue.consumer_count,
                )
            )

    def _queue_bind(self, method: commands.Queue.Bind) -> None:
        queue = self.queue_name(method.queue)
        routing_key = method.routing_key or ("" if method.queue else queue)
        self.vhost.bind(
            queue,
            method.exchange or "",
            routing_key,
            dict(method.arguments or {}),
            owner=self.connection,
        )
        if not method.nowait:
            self.send_replicated(commands.Queue.BindOk())

    def _queue_unbind(self, method: commands.Queue.Unbind) -> None:
        self.vhost.unbind(
            self.queue_name(method.queue),
            method.exchange or "",
            method.routing_key or "",
            dict(method.arguments or {}),
            owner=self.connection,
        )
        self.send_replicated(commands.Queue.UnbindOk())

    def _queue_purge(self, method: commands.Queue.Purge) -> None:
        name = self.queue_name(method.queue)
        count = self.vhost.purge_queue(name, owner=self.connection)
        if not method.nowait:  # a promise: the backups applied the purge (issue 10)
            queue = self.vhost.queues.get(name)
            queues = () if queue is None else (queue,)
            self.send_replicated(commands.Queue.PurgeOk(message_count=count), queues)

    def _queue_delete(self, method: commands.Queue.Delete) -> None:
        count = self.vhost.delete_queue(
            self.queue_name(method.queue),
            if_unused=bool(method.if_unused),
            if_empty=bool(method.if_empty),
            owner=self.connection,
        )
        if not method.nowait:
            self.send_replicated(commands.Queue.DeleteOk(message_count=count))

    # -- confirm and tx classes --------------------------------------------------------
    def send_confirm_replies(self) -> None:
        if self.state is _OPEN:
            self.publisher.send_confirm_replies()

    def _tx_commit(self, method: commands.Tx.Commit) -> None:
        """Commit through the core both protocols use
        (:meth:`broker.core.transaction.Transaction.commit`): commit-ok once every publish
        of the transaction is settled (routed, on disk for a durable message, held by every
        in-sync backup) and the backups and the store applied its acknowledgements'
        dequeues (they do not come back after a fail-over)."""
        tx = self.publisher.tx
        if tx is None:
            raise precondition_failed("channel is not transactional")

        def committed() -> None:
            if (
                self.state is ChannelState.OPEN
                and self.connection.channels.get(self.number) is self
            ):
                self.send(commands.Tx.CommitOk())

        tx.commit(
            self.vhost, self.connection.ctx.store_transaction, self.after_replicated, committed
        )

    # -- basic: acknowledgements (held in the transaction of a tx channel) ------------
    def _basic_ack(self, method: commands.Basic.Ack) -> None:
        deliveries, tx = self.deliveries, self.publisher.tx
        if tx is not None and deliveries.stream is None:
            deliveries.check_tag(int(method.delivery_tag or 0), bool(method.multiple))
            tx.settle(TxAcknowledgement(deliveries, method))
            return
        deliveries.basic_ack(method)

    def _basic_nack(self, method: commands.Basic.Nack) -> None:
        self._refuse(method, bool(method.multiple))

    def _basic_reject(self, method: commands.Basic.Reject) -> None:
        self._refuse(method, False)

    def _refuse(self, method: commands.Basic.Nack | commands.Basic.Reject, multiple: bool) -> None:
        """basic.nack or basic.reject: requeue or drop now, or at commit on a tx channel."""
        tx = self.publisher.tx
        if tx is not None:
            self.deliveries.check_tag(int(method.delivery_tag or 0), multiple)
            tx.settle(TxAcknowledgement(self.deliveries, method))
            return
        self.deliveries.refuse(method, multiple)

    # -- flow and cleanup --------------------------------------------------------------
    def release_resources(self) -> None:
        """Cancel consumers and a held basic.get, requeue unacknowledged deliveries, drop
        pending confirms."""
        if self.held_frames is not None:
            self.connection.held_frames_dropped(self.cancel_held_get())
        self.deliveries.release()
        self.publisher.release()


def _to_deliveries(handler: Callable[[Deliveries, Any], None]) -> _Handler:
    """A method the channel's deliveries handle."""

    def handle(channel: Channel, method: Any) -> None:
        handler(channel.deliveries, method)

    return handle


def _to_publisher(handler: Callable[[Publisher, Any], None]) -> _Handler:
    """A method the channel's publisher handles."""

    def handle(channel: Channel, method: Any) -> None:
        handler(channel.publisher, method)

    return handle


_HANDLERS: dict[type[Method], _Handler] = {
    commands.Channel.Open: Channel._channel_open,
    commands.Channel.Close: Channel._channel_close,
    commands.Channel.CloseOk: Channel._channel_close_ok,
    commands.Channel.Flow: Channel._channel_flow,
    commands.Exchange.Declare: Channel._exchange_declare,
    commands.Exchange.Delete: Channel._exchange_delete,
    commands.Exchange.Bind: Channel._exchange_bind,
    commands.Exchange.Unbind: Channel._exchange_unbind,
    commands.Queue.Declare: Channel._queue_declare,
    commands.Queue.Bind: Channel._queue_bind,
    commands.Queue.Unbind: Channel._queue_unbind,
    commands.Queue.Purge: Channel._queue_purge,
    commands.Queue.Delete: Channel._queue_delete,
    commands.Basic.Qos: _to_deliveries(Deliveries.basic_qos),
    commands.Basic.Consume: _to_deliveries(Deliveries.basic_consume),
    commands.Basic.Cancel: _to_deliveries(Deliveries.basic_cancel),
    commands.Basic.Get: _to_deliveries(Deliveries.basic_get),
    commands.Basic.Ack: Channel._basic_ack,
    commands.Basic.Nack: Channel._basic_nack,
    commands.Basic.Reject: Channel._basic_reject,
    commands.Basic.Recover: _to_deliveries(Deliveries.basic_recover),
    commands.Basic.RecoverAsync: _to_deliveries(Deliveries.basic_recover_async),
    commands.Confirm.Select: _to_publisher(Publisher.confirm_select),
    commands.Tx.Select: _to_publisher(Publisher.tx_select),
    commands.Tx.Commit: Channel._tx_commit,
    commands.Tx.Rollback: _to_publisher(Publisher.tx_rollback),
}

#: Valid AMQP 0-9-1 channel methods this broker does not implement (540).
_UNSUPPORTED: frozenset[type[Method]] = frozenset()
