"""Publishing on a channel: basic.publish, its content, and routing into the vhost.

Contract: :class:`Publisher` (owned by a :class:`~broker.amqp.channel.Channel`, one per
channel) assembles a basic.publish from its method, content-header and body frames (the
connection calls :meth:`~Publisher.content_header` and :meth:`~Publisher.content_body`
straight from its hot path, on an open channel only), builds the
:class:`~broker.core.message.Message`, holds it in the
:class:`~broker.core.transaction.Transaction` of a tx channel (the commit core both
protocols use) or routes it at once, returns it (basic.return 312) when mandatory and
unrouted, and takes a publisher-confirm handle for it in confirm mode (confirm.select;
the replies go out through :meth:`~Publisher.send_confirm_replies` at the connection's
flush). A message
larger than ``max_body_size`` or with bad properties closes the channel (406); a frame out
of order is a connection error (505, 501).

It is built with two ports and nothing else of the channel or the connection: a
:class:`PublisherHost` (its channel: send a method, a soft error, the reply-to queue, that
confirms settled) and a :class:`~broker.amqp.ports.Wire` (write bytes, frame size).

THREAD UNSAFE: the channel's event loop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from pamqp import commands
from pamqp.base import Frame as Method

from broker.amqp import framing
from broker.amqp.ports import Wire
from broker.core import properties
from broker.core.confirms import PublisherConfirms
from broker.core.errors import AmqpError, ReplyCode, precondition_failed
from broker.core.exchange import Exchange
from broker.core.message import Message
from broker.core.queue import Queue
from broker.core.transaction import Transaction
from broker.core.vhost import VirtualHost
from common.weakly import weakly


class PublisherHost(Protocol):
    """What a :class:`Publisher` needs of its channel."""

    #: The channel's number (the frames' channel field).
    number: int

    @property
    def reply_queue(self) -> Queue | None:
        """The queue of the channel's direct reply-to consumer, if it has one."""
        ...

    def send(self, method: Method) -> None: ...

    def channel_error(self, error: AmqpError) -> None:
        """Close the channel with a soft error (the connection carries on)."""
        ...

    def confirms_settled(self) -> None:
        """Confirm replies are ready: send them at the connection's next flush."""
        ...


@dataclass(slots=True)
class PendingContent:
    """A basic.publish waiting for its content header and body frames."""

    exchange: Exchange
    routing_key: str
    mandatory: bool
    body_size: int = -1
    properties_raw: bytes = b""
    #: The body frames so far, when the body takes more than one (made at the second).
    chunks: list[bytes] | None = None
    received: int = 0


def _publish_in_content() -> AmqpError:
    """A basic.publish where its channel expected the last one's content."""
    return AmqpError(
        ReplyCode.UNEXPECTED_FRAME,
        "expected content header for basic.publish, got Basic.Publish",
        60,
        40,
    )


class Publisher:
    """basic.publish, its content, confirms and transactions; see the module docstring."""

    def __init__(
        self,
        host: PublisherHost,
        wire: Wire,
        vhost: VirtualHost,
        user: str | None,
        max_body_size: int,
        between_publishes: Callable[[], None] | None,
    ) -> None:
        self.host = host
        self._wire = wire
        self.number = host.number
        self.vhost = vhost
        #: The connection's authenticated user (a message's ``user_id`` must be it).
        self._user = user
        self._max_body_size = max_body_size
        #: Called after each publish is routed (the store's ``Journal.between_publishes``).
        self._between_publishes = between_publishes
        self.confirms: PublisherConfirms | None = None
        #: The host told of settled confirms since its connection last took them: it is
        #: told once until then, not at each publish (as a 1.0 receiver's dispositions).
        self._confirms_due = False
        self.tx: Transaction | None = None
        #: A basic.publish waiting for its content.
        self.content: PendingContent | None = None

    def channel_error(self, error: AmqpError) -> None:
        self.host.channel_error(error)

    def publish_method(self, payload: bytes) -> None:
        """basic.publish (decoded by the lean codec); the content follows."""
        target = self._target(payload)
        if target is not None:
            self.content = PendingContent(*target)

    def publish_whole(self, method: bytes, header: bytes, body: bytes) -> bool:
        """basic.publish with its content header and its one body frame, read together:
        True when it took all three as :meth:`publish_method`, :meth:`content_header` and
        :meth:`content_body` would have; False when it took the method only (or refused
        it), the header and body then following one at a time as any others."""
        target = self._target(method)
        if target is None:
            return False
        body_size, raw = framing.unmarshal_content_header(header)
        if body_size != len(body) or not body or body_size > self._max_body_size:
            self.content = PendingContent(*target)
            return False
        exchange, routing_key, mandatory = target
        self._complete(exchange, routing_key, mandatory, raw, body)
        return True

    def publish_decoded(
        self, arguments: tuple[str, str, bool, bool], raw: bytes, body: bytes
    ) -> bool:
        """:meth:`publish_whole` of a publish whose frames broker/amqp/_wire.c's
        ``scan_publish`` checked and split: its arguments decoded before, its content
        header a basic one of ``len(body)`` bytes (not none), the raw properties after it."""
        if self.content is not None:
            raise _publish_in_content()
        target = self._target_of(arguments)
        if target is None:
            return False
        if len(body) > self._max_body_size:
            self.content = PendingContent(*target)
            return False
        exchange, routing_key, mandatory = target
        self._complete(exchange, routing_key, mandatory, raw, body)
        return True

    def _target(self, method: bytes) -> tuple[Exchange, str, bool] | None:
        """A basic.publish's exchange, routing key and mandatory flag; None when the
        channel refused it (closed with a soft error)."""
        if self.content is not None:
            raise _publish_in_content()
        return self._target_of(framing.unmarshal_publish(method))

    def _target_of(
        self, arguments: tuple[str, str, bool, bool]
    ) -> tuple[Exchange, str, bool] | None:
        """:meth:`_target` of its decoded arguments."""
        exchange_name, routing_key, mandatory, immediate = arguments
        if immediate:
            raise AmqpError(ReplyCode.NOT_IMPLEMENTED, "immediate=true", 60, 40)
        try:
            return self.vhost.check_publish(exchange_name), routing_key, mandatory
        except AmqpError as error:
            error.class_id, error.method_id = 60, 40
            self.channel_error(error)
            return None

    def content_header(self, payload: bytes) -> None:
        """A content header on the open channel (its channel discards one while closing)."""
        pending = self.content
        if pending is None or pending.body_size >= 0:
            raise AmqpError(ReplyCode.UNEXPECTED_FRAME, "content header without basic.publish")
        body_size, raw = framing.unmarshal_content_header(payload)
        pending.body_size = body_size
        pending.properties_raw = raw
        limit = self._max_body_size
        if body_size > limit:
            self.content = None
            self.channel_error(
                precondition_failed(f"message size {body_size} is larger than max size {limit}")
            )
            return
        if body_size == 0:
            self._complete_publish(pending, b"")

    def content_body(self, payload: bytes) -> None:
        """A content body frame on the open channel (as :meth:`content_header`)."""
        pending = self.content
        if pending is None or pending.body_size < 0:
            raise AmqpError(ReplyCode.UNEXPECTED_FRAME, "content body without content header")
        pending.received += len(payload)
        if pending.received > pending.body_size:
            raise AmqpError(
                ReplyCode.FRAME_ERROR,
                f"content body of {pending.received} bytes exceeds the declared"
                f" {pending.body_size}",
            )
        chunks = pending.chunks
        if pending.received == pending.body_size:
            if chunks is None:
                body = payload
            else:
                chunks.append(payload)
                body = b"".join(chunks)
            self._complete_publish(pending, body)
        elif chunks is None:
            pending.chunks = [payload]
        else:
            chunks.append(payload)

    def _complete_publish(self, pending: PendingContent, body: bytes) -> None:
        self.content = None
        self._complete(
            pending.exchange, pending.routing_key, pending.mandatory, pending.properties_raw, body
        )

    def _complete(
        self, exchange: Exchange, routing_key: str, mandatory: bool, raw: bytes, body: bytes
    ) -> None:
        try:
            raw, scanned = properties.scan_shared(raw)
        except ValueError as exc:
            raise AmqpError(ReplyCode.SYNTAX_ERROR, f"malformed content header: {exc}") from exc
        if scanned.user_id is not None and scanned.user_id != self._user:
            self.channel_error(
                AmqpError(
                    ReplyCode.PRECONDITION_FAILED,
                    f"user_id property set to '{scanned.user_id}' but authenticated user was"
                    f" '{self._user}'",
                    60,
                    40,
                )
            )
            return
        if scanned.direct_reply_to:
            replaced = self._direct_reply_to(raw)
            if replaced is None:
                return
            raw = replaced
            scanned = properties.scan(raw)
        try:
            message = Message(exchange.name, routing_key, raw, body, scanned=scanned)
        except ValueError as exc:
            self.channel_error(AmqpError(ReplyCode.PRECONDITION_FAILED, str(exc), 60, 40))
            return
        self._wire.messages_published += 1
        if self.tx is not None:
            returned = (lambda: self.send_return(message)) if mandatory else None
            self.tx.publish(exchange, message, returned)
            return
        self.publish(exchange, message, mandatory)
        between = self._between_publishes
        if between is not None:
            between()  # the store: a long read's records start going to disk

    def _direct_reply_to(self, raw: bytes) -> bytes | None:
        """A request whose reply_to is ``amq.rabbitmq.reply-to``: the properties with this
        channel's reply name instead; None (the channel closed, 406) when it has no reply
        consumer."""
        reply_queue = self.host.reply_queue
        if reply_queue is None:
            error = precondition_failed("fast reply consumer does not exist")
            error.class_id, error.method_id = 60, 40
            self.channel_error(error)
            return None
        props = properties.decode(raw)
        props.reply_to = reply_queue.name
        return properties.encode(props)

    def publish(self, exchange: Exchange, message: Message, mandatory: bool) -> None:
        """Route one message; its confirm (in confirm mode) settles once routing and every
        holder (the store, HA guards) are done."""
        confirms = self.confirms
        handle = confirms.publish(message) if confirms is not None else None
        if exchange.name not in self.vhost.exchanges:  # deleted since basic.publish
            routed, rejected = False, 0
        else:
            result = self.vhost.publish(exchange, message)
            routed, rejected = result.queues > 0, result.rejected
        if not routed and mandatory:
            self.send_return(message)
        if handle is not None:
            handle.release(rejected == 0)  # ok: no queue refused it

    def send_return(self, message: Message) -> None:
        """basic.return (312 NO_ROUTE) of a mandatory message that routed nowhere."""
        conn = self._wire
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

    # -- confirm and tx classes --------------------------------------------------------
    def confirm_select(self, method: commands.Confirm.Select) -> None:
        if self.tx is not None:
            raise precondition_failed("cannot switch from tx to confirm mode")
        if self.confirms is None:
            self.confirms = PublisherConfirms(on_settled=self._confirms_settled)
        if not method.nowait:
            self.host.send(commands.Confirm.SelectOk())

    def _confirms_settled(self) -> None:
        if not self._confirms_due:  # once until the connection takes them
            self._confirms_due = True
            self.host.confirms_settled()

    def confirms_deferred(self) -> None:
        """Its connection kept the replies for a later flush: the next settled confirm
        tells the host again (a flush then tries again)."""
        self._confirms_due = False

    def send_confirm_replies(self) -> None:
        """Send the confirm replies settled so far (basic.ack or basic.nack, ``multiple``
        where they run on); the connection calls it at its flush, the channel open."""
        self._confirms_due = False
        confirms = self.confirms
        if confirms is None:
            return
        write, number, confirm_frame = self._wire.write, self.number, framing.confirm_frame
        for reply in confirms.take_replies():  # basic.ack, or basic.nack (requeue unset)
            write(confirm_frame(number, reply.delivery_tag, reply.multiple, reply.ack))

    def tx_select(self, method: commands.Tx.Select) -> None:
        if self.confirms is not None:
            raise precondition_failed("cannot switch from confirm to tx mode")
        if self.tx is None:
            self.tx = Transaction()
        self.host.send(commands.Tx.SelectOk())

    def tx_rollback(self, method: commands.Tx.Rollback) -> None:
        if self.tx is None:
            raise precondition_failed("channel is not transactional")
        self.tx.rollback()
        self.host.send(commands.Tx.RollbackOk())

    def release(self) -> None:
        """The channel closes: drop pending confirms, the content and the transaction."""
        if self.confirms is not None:
            self.confirms.close()
        self.content = None
        self.tx = None
        # Only its channel calls it from now on: held weakly (no reference cycle:
        # common.weakly).
        self.host = weakly(self.host)
