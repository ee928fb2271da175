"""A link on which the broker sends and the client receives: :class:`SenderLink`, a
consumer of its queue.

Contract: made by a :class:`~broker.amqp10.session.Session` for an attach whose role is
receiver, with its source resolved to a queue; it subscribes to the queue as a
:class:`~broker.core.queue_contracts.Consumer` and takes deliveries while it has credit
(the client's ``flow``: ``link-credit`` from the client's ``delivery-count``), the session's
outgoing window is open and the transport takes more. Each delivery is one transfer (cut
into frames by the session) carrying the message in 1.0 form
(:func:`broker.amqp10.mapping.delivery_sections`; ``header.delivery-count`` the earlier deliveries).
``drain``: with nothing left to send, the delivery-count advances by the credit left and a
flow says so.

Settlement: with ``snd-settle-mode`` settled the transfer goes pre-settled and the queue
forgets the message at once (0-9-1's no-ack); otherwise it stays unacknowledged until the
client's disposition: ``accepted`` acknowledges, ``released`` and ``modified`` requeue
(``modified`` with ``undeliverable-here`` dead-letters, as ``rejected`` does), and a
detach, end or close requeues what is left.

THREAD UNSAFE: the connection's event loop.
"""

from __future__ import annotations

from typing import Any

from broker.amqp10.mapping import delivery_sections
from broker.amqp10.performatives import (
    SENDER,
    SND_SETTLED,
    SND_UNSETTLED,
    Accepted,
    Attach,
    Disposition,
    Flow,
    Modified,
    Rejected,
    Released,
    Source,
)
from broker.amqp10.ports import LinkSession
from broker.amqp10.sections import AmqpMessage, Data
from broker.core.message import Entry
from broker.core.queue import Queue

_SEQUENCE = 1 << 32


class SenderLink:
    """See the module docstring."""

    exclusive = False
    priority = 0

    def __init__(self, session: LinkSession, attach: Attach, queue: Queue) -> None:
        self.session = session
        self.name = attach.name
        self.handle = int(attach.handle)
        self.attach = attach
        self.queue = queue
        self.tag = f"amqp10:{session.connection_name}:{attach.name}"
        self.presettled = attach.snd_settle_mode == SND_SETTLED
        self.delivery_count = 0
        self.credit = 0
        self.drain = False
        self.detached = False
        #: Unsettled deliveries of this link by delivery id.
        self.unsettled: dict[int, Entry] = {}
        #: Deliveries whose outcome a transaction holds (:class:`Retirement`), by id.
        self.retiring: dict[int, Entry] = {}

    def attach_reply(self) -> Attach:
        """Our attach: the sending end (unsettled unless the client asked for settled)."""
        a = self.attach
        source = a.source if isinstance(a.source, Source) else None
        return Attach(
            name=a.name,
            handle=a.handle,
            role=SENDER,
            snd_settle_mode=SND_SETTLED if self.presettled else SND_UNSETTLED,
            rcv_settle_mode=a.rcv_settle_mode,
            source=source,
            target=a.target,
            initial_delivery_count=0,
        )

    # -- the queue's consumer --------------------------------------------------------------
    def can_deliver(self) -> bool:
        return self.credit > 0 and not self.detached and self.session.can_send()

    def deliver(self, queue: Queue, entry: Entry) -> None:
        session = self.session
        earlier = entry.delivery_count
        queue.delivered(entry, self.presettled)
        message = entry.message
        body = message.body
        try:
            sections = delivery_sections(message.properties_raw, len(body), earlier)
        except Exception as exc:  # a bug in the mapping must not fail the queue's dispatch
            session.ctx.log.error(
                "internal_error", connection=session.connection_name,
                exception=f"mapping to AMQP 1.0: {type(exc).__name__}: {exc}",
            )  # fmt: skip
            sections, body = AmqpMessage(body=[Data(body)]).encode(), b""
        self.credit -= 1
        self.delivery_count = (self.delivery_count + 1) % _SEQUENCE
        delivery_id = session.send_delivery(self, self.presettled, sections, body)
        if not self.presettled:
            self.unsettled[delivery_id] = entry

    def queue_deleted(self, queue: Queue) -> None:
        """The queue was deleted under the link: the session detaches it."""
        self.detached = True
        self.unsettled.clear()
        self.session.link_lost(self, "amqp:resource-deleted", f"queue '{queue.name}' was deleted")

    # -- credit ----------------------------------------------------------------------------
    def peer_flow(self, flow: Flow) -> None:
        """The receiver's flow: its credit (from its delivery-count), drain, echo."""
        if flow.link_credit is not None:
            theirs = self.delivery_count if flow.delivery_count is None else flow.delivery_count
            self.credit = max(0, (int(theirs) + int(flow.link_credit) - self.delivery_count))
        self.drain = bool(flow.drain)
        self.queue.credit_returned(self)
        self.queue.dispatch()
        if self.drain and self.credit > 0 and not self.detached:
            self.delivery_count = (self.delivery_count + self.credit) % _SEQUENCE
            self.credit = 0
            self.session.send(self._flow(drained=True))
        elif flow.echo:
            self.session.send(self._flow())

    def _flow(self, drained: bool = False) -> Flow:
        return Flow(
            handle=self.handle,
            delivery_count=self.delivery_count,
            link_credit=self.credit,
            available=self.queue.message_count,
            drain=drained,
        )

    # -- settlement ------------------------------------------------------------------------
    def settle(self, delivery_id: int, state: Any) -> None:
        """The client's outcome for one of this link's unsettled deliveries."""
        entry = self.unsettled.pop(delivery_id, None)
        if entry is None:
            return
        if not self.apply_outcome(entry, state):  # a non-terminal state (received): not settled yet
            self.unsettled[delivery_id] = entry

    def accept(self, delivery_id: int) -> None:
        """:meth:`settle` with ``accepted`` (or no state, settled): the message goes."""
        entry = self.unsettled.pop(delivery_id, None)
        if entry is not None:
            self.queue.settle(entry)

    def retire(self, delivery_id: int, outcome: Any, settled: bool) -> Retirement | None:
        """The client's outcome for an unsettled delivery inside a transaction: held by
        it (the :class:`Retirement` returned) until commit; None for a delivery this link
        does not hold unsettled."""
        entry = self.unsettled.pop(delivery_id, None)
        if entry is None:
            return None
        self.retiring[delivery_id] = entry
        return Retirement(self, delivery_id, outcome, settled)

    def apply_outcome(self, entry: Entry, state: Any) -> bool:
        """Apply an outcome to a delivery; False for a state that is not one."""
        queue = self.queue
        if isinstance(state, Accepted) or state is None:
            queue.settle(entry)
        elif isinstance(state, Rejected) or (
            isinstance(state, Modified) and state.undeliverable_here
        ):
            queue.reject(entry, requeue=False)
        elif isinstance(state, Released | Modified):
            queue.requeue((entry,))
        else:
            return False
        return True

    def detach(self) -> list[int]:
        """The link is gone: leave the queue and requeue what the client did not settle;
        returns the delivery ids that were unsettled."""
        self.detached = True
        queue = self.queue
        if queue.remove_consumer(self):
            self.session.vhost.consumer_cancelled(queue)
        left = list(self.unsettled)
        back = [*self.unsettled.values(), *self.retiring.values()]
        self.unsettled.clear()
        self.retiring.clear()  # their transaction finds them gone
        if back:
            queue.requeue(back)
        return left


class Retirement:
    """A delivery's outcome a transaction holds until commit (a
    :class:`~broker.core.transaction.TxSettlement`). At commit the outcome is applied and,
    if the client did not settle the delivery, a settled disposition with the outcome says
    so; at rollback the delivery is live again (unsettled), or, if the client had settled
    it, released back to its queue (the source's default outcome). A link detached
    meanwhile requeued it: then neither does anything."""

    __slots__ = ("delivery_id", "link", "outcome", "settled")

    def __init__(self, link: SenderLink, delivery_id: int, outcome: Any, settled: bool) -> None:
        self.link = link
        self.delivery_id = delivery_id
        self.outcome = outcome
        self.settled = settled

    def apply(self) -> list[Queue]:
        link = self.link
        entry = link.retiring.pop(self.delivery_id, None)
        if entry is None:
            return []
        link.apply_outcome(entry, self.outcome)
        if not self.settled:
            link.session.send(
                Disposition(role=SENDER, first=self.delivery_id, settled=True, state=self.outcome)
            )
        return [link.queue]

    def rolled_back(self) -> None:
        link = self.link
        entry = link.retiring.pop(self.delivery_id, None)
        if entry is None:
            return
        if self.settled:
            link.queue.requeue((entry,))
        else:
            link.unsettled[self.delivery_id] = entry
            link.session.sent_unsettled(self.delivery_id, link, link.queue, entry)
