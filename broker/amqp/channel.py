"""One AMQP 0-9-1 channel: the exchange, queue, basic, confirm and tx classes.

A channel turns methods into calls on the virtual host, tracks the deliveries it made
(delivery tags, acknowledgements, prefetch credit), assembles published content, and runs
publisher confirms and transactions. A soft :class:`~broker.core.errors.AmqpError` closes
only this channel (channel.close with the reply code); a hard one propagates to the
connection.

:class:`Channel` is one object written in three modules, one concept each:

- here: its state, method dispatch (``_HANDLERS``), the channel, exchange and queue
  classes, confirm and tx modes, and the release of everything it holds when it closes;
- :mod:`broker.amqp.channel_consume`: consumers, deliveries, basic.get, acknowledgements,
  and the :class:`~broker.amqp.stream_sink.StreamSink` an HA stream writes to;
- :mod:`broker.amqp.channel_publish`: basic.publish, its content, routing.

THREAD UNSAFE: one event loop owns the channel (and its connection).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

from pamqp import commands
from pamqp.base import Frame as Method

from broker.amqp.channel_consume import ChannelConsumer, ChannelGet, ConsumeMethods, Delivery
from broker.amqp.channel_publish import PendingContent, PublishMethods, Transaction
from broker.amqp.context import Stream, after_replicated
from broker.amqp.state import ChannelState
from broker.core.confirms import PublisherConfirms
from broker.core.direct_reply import REPLY_TO
from broker.core.errors import AmqpError, ReplyCode, precondition_failed
from broker.core.message import Entry, TxMark
from broker.core.queue import Queue

if TYPE_CHECKING:
    from broker.amqp.connection import Connection


class Channel(ConsumeMethods, PublishMethods):
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
        self.reply_queue: Queue | None = None
        self._stream_tag = b""
        self._stream_route = b""
        self.held_get: ChannelGet | None = None
        self.held_frames: list[tuple[int, bytes]] | None = None

    # -- state -------------------------------------------------------------------------
    @property
    def can_deliver(self) -> bool:
        return self.state is ChannelState.OPEN and self.flow_active and self.connection.writable

    def send(self, method: Method) -> None:
        self.connection.send_method(self.number, method)

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
                # The two closes crossed: answer the peer's and wait for its close-ok to
                # ours (frames it sent before that are still for this channel), as RabbitMQ.
                self.send(commands.Channel.CloseOk())
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
    def _queue_name(self, name: str | None) -> str:
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
            self.send_replicated(commands.Queue.BindOk())

    def _queue_unbind(self, method: commands.Queue.Unbind) -> None:
        self.vhost.unbind(
            self._queue_name(method.queue),
            method.exchange or "",
            method.routing_key or "",
            dict(method.arguments or {}),
            owner=self.connection,
        )
        self.send_replicated(commands.Queue.UnbindOk())

    def _queue_purge(self, method: commands.Queue.Purge) -> None:
        name = self._queue_name(method.queue)
        count = self.vhost.purge_queue(name, owner=self.connection)
        if not method.nowait:  # a promise: the backups applied the purge (issue 10)
            queue = self.vhost.queues.get(name)
            queues = () if queue is None else (queue,)
            self.send_replicated(commands.Queue.PurgeOk(message_count=count), queues)

    def _queue_delete(self, method: commands.Queue.Delete) -> None:
        count = self.vhost.delete_queue(
            self._queue_name(method.queue),
            if_unused=bool(method.if_unused),
            if_empty=bool(method.if_empty),
            owner=self.connection,
        )
        if not method.nowait:
            self.send_replicated(commands.Queue.DeleteOk(message_count=count))

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
        # commit-ok once every publish of the transaction is settled: routed and, on an HA
        # primary, held by every guarded backup (the queue guards hold these confirms).
        done = False

        def settled() -> None:
            nonlocal done
            if armed and not done and commit.outstanding == 0 and acks_replicated:
                done = True
                if (
                    self.state is ChannelState.OPEN
                    and self.connection.channels.get(self.number) is self
                ):
                    self.send(commands.Tx.CommitOk())

        armed = False
        # Acknowledgements: commit-ok once the backups applied their dequeues, and the store
        # wrote them (a promise: the messages do not come back after a fail-over).
        acks_replicated = not tx.acks
        commit = PublisherConfirms(on_settled=settled)
        if tx.publishes:
            # One mark for the transaction's messages: an HA backup applies them all or
            # none (docs/ha-design.md, "Transactions").
            mark = TxMark()
            for _, message, _ in tx.publishes:
                message.tx = mark
        stored = self.connection.ctx.store_transaction
        with nullcontext() if stored is None else stored():  # on disk all or none
            for exchange, message, mandatory in tx.publishes:
                self._publish(exchange, message, mandatory, commit)
            acked: dict[int, Queue] = {}  # the queues the acknowledgements settle on
            for ack in tx.acks:
                tag = int(ack.delivery_tag or 0)
                if isinstance(ack, commands.Basic.Ack | commands.Basic.Nack):
                    deliveries = self._take_deliveries(tag, bool(ack.multiple))
                else:
                    deliveries = self._take_deliveries(tag, False)
                acked.update((id(d.queue), d.queue) for d in deliveries)
                if isinstance(ack, commands.Basic.Ack):
                    self._settle(deliveries, True, False)
                elif isinstance(ack, commands.Basic.Nack | commands.Basic.Reject):
                    self._settle(deliveries, False, bool(ack.requeue))
        if tx.acks:

            def acks_done() -> None:
                nonlocal acks_replicated
                acks_replicated = True
                settled()

            self.after_replicated(acks_done, tuple(acked.values()))
        armed = True
        settled()

    def _tx_rollback(self, method: commands.Tx.Rollback) -> None:
        if self.tx is None:
            raise precondition_failed("channel is not transactional")
        self.tx = Transaction()
        self.send(commands.Tx.RollbackOk())

    # -- flow and cleanup --------------------------------------------------------------
    def release_resources(self) -> None:
        """Cancel consumers and a held basic.get, requeue unacknowledged deliveries, drop
        pending confirms."""
        if self.held_frames is not None:
            self.connection.held_frames_dropped(self.cancel_held_get())
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
    commands.Exchange.Bind: Channel._exchange_bind,
    commands.Exchange.Unbind: Channel._exchange_unbind,
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
_UNSUPPORTED: frozenset[type[Method]] = frozenset()
