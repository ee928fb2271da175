"""One AMQP 1.0 session (part 2, section 2.5): its windows, its links, its deliveries.

Contract: made by a :class:`~broker.amqp10.connection.Connection` for a client's
``begin`` (with a :class:`SessionConnection` port: what it needs of the connection). It
answers ``begin``, makes the link an attach's terminus names
(:func:`broker.amqp10.termini.make_link`: a :class:`~broker.amqp10.receiver.ReceiverLink`
where the client publishes, a :class:`~broker.amqp10.sender.SenderLink` where it consumes, a
:class:`~broker.amqp10.coordinator.CoordinatorLink` to the transaction coordinator), and
routes ``flow``, ``transfer``, ``disposition`` and ``detach`` to them. It owns the
:class:`~broker.amqp10.coordinator.Transactions` declared on it: a disposition with a
``transactional-state`` is held by its transaction until commit. A refused attach is
answered with an attach without the terminus and a detach with the error
(``amqp:not-found``...).

Windows: the session's incoming window (:data:`WINDOW` transfer frames) is refreshed by a
session flow when half is used; a transfer beyond it ends the session
(``amqp:session:window-violation``). The client's incoming window bounds the transfer
frames the links send. A frame for a handle never attached ends the session
(``amqp:session:unattached-handle``: a transfer before attach); frames for a link the
broker detached with an error are dropped until the client's detach.

THREAD UNSAFE: the connection's event loop.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

from broker.amqp.context import BrokerContext
from broker.amqp10.coordinator import CoordinatorLink, OpenTransaction, Transactions
from broker.amqp10.errors import (
    HANDLE_IN_USE,
    ILLEGAL_STATE,
    UNATTACHED_HANDLE,
    UNAUTHORIZED_ACCESS,
    WINDOW_VIOLATION,
    Amqp10Error,
    Scope,
    from_core,
)
from broker.amqp10.framing import delivery_frame, delivery_tag, transfer_frames
from broker.amqp10.performatives import (
    RECEIVER,
    SENDER,
    Accepted,
    Attach,
    Begin,
    Detach,
    Disposition,
    Error,
    Flow,
    Received,
    TransactionalState,
    Transfer,
)
from broker.amqp10.receiver import ReceiverLink
from broker.amqp10.sender import SenderLink
from broker.amqp10.termini import Link, make_link
from broker.core.errors import AmqpError
from broker.core.message import Entry
from broker.core.queue import Queue
from broker.core.vhost import VirtualHost
from common.weakly import weakly

#: The session's incoming window, in transfer frames.
WINDOW = 65536
#: The outgoing window it announces (transfers are bounded by the peer's window).
OUTGOING_WINDOW = 0x7FFFFFFF
_SERIAL = 1 << 32


class SessionConnection(Protocol):
    """What a session needs of its connection."""

    ctx: BrokerContext
    vhost: VirtualHost
    #: The transport takes more output (under its write-buffer mark).
    writable: bool
    #: The largest frame the client takes (its open's max-frame-size).
    peer_max_frame_size: int
    messages_published: int
    messages_delivered: int

    @property
    def name(self) -> str: ...

    @property
    def user(self) -> str | None: ...

    def write(self, data: bytes) -> None: ...

    def send_frame(self, channel: int, performative: Any) -> None: ...

    def session_has_dispositions(self, session: Session) -> None: ...


class Session:
    """See the module docstring."""

    def __init__(self, connection: SessionConnection, channel: int, begin: Begin) -> None:
        self.connection = connection
        self.ctx = connection.ctx
        self.channel = channel
        self.remote_channel: int = 0
        self.next_incoming_id = int(begin.next_outgoing_id)
        self.incoming_window = WINDOW
        self.next_outgoing_id = 0
        self.remote_incoming_window = int(begin.incoming_window)
        self._next_delivery_id = 0
        self.links: dict[int, Link] = {}
        #: Handles the broker detached with an error, until the client's detach.
        self._detaching: set[int] = set()
        #: Unsettled deliveries sent, by delivery id: their link.
        self._outgoing: dict[int, SenderLink] = {}
        self._confirm_links: set[ReceiverLink | CoordinatorLink] = set()
        #: The transactions declared on this session (its coordinator).
        #: Called only by this session and its control links: holds it weakly (no
        #: reference cycle: common.weakly).
        self.transactions = Transactions(weakly(self))
        self.ended = False

    # -- the port its links use ------------------------------------------------------------
    @property
    def vhost(self) -> VirtualHost:
        return self.connection.vhost

    @property
    def user(self) -> str | None:
        return self.connection.user

    @property
    def connection_name(self) -> str:
        return self.connection.name

    @property
    def owner(self) -> object:
        return self.connection

    def send(self, performative: Any) -> None:
        if isinstance(performative, Flow):
            performative = dataclasses.replace(
                performative,
                next_incoming_id=self.next_incoming_id,
                incoming_window=self.incoming_window,
                next_outgoing_id=self.next_outgoing_id,
                outgoing_window=OUTGOING_WINDOW,
            )
        self.connection.send_frame(self.channel, performative)

    def can_send(self) -> bool:
        return self.remote_incoming_window > 0 and self.connection.writable and not self.ended

    def send_transfer(self, transfer: Transfer, payload: bytes) -> None:
        data, frames = transfer_frames(
            self.channel, transfer, payload, self.connection.peer_max_frame_size
        )
        self.connection.write(data)
        self.next_outgoing_id = (self.next_outgoing_id + frames) % _SERIAL
        self.remote_incoming_window -= frames

    def send_delivery(self, link: Any, settled: bool, sections: bytes, body: bytes) -> int:
        """One of the broker's deliveries on ``link``: the next delivery id (its tag: the
        id's 4 bytes), message format 0, the message's ``sections`` and ``body`` bytes,
        framed by hand in one frame (:func:`~broker.amqp10.framing.delivery_frame`) or, past
        the peer's max-frame-size, in as many as it needs; counted, and kept unsettled
        (its disposition will name the id) unless ``settled``. Returns the delivery id."""
        delivery_id = self._next_delivery_id
        self._next_delivery_id = (delivery_id + 1) % _SERIAL
        connection = self.connection
        handle = link.handle
        data = delivery_frame(self.channel, handle, delivery_id, settled, sections, body)
        if len(data) > connection.peer_max_frame_size:
            transfer = Transfer(
                handle=handle, delivery_id=delivery_id, delivery_tag=delivery_tag(delivery_id),
                message_format=0, settled=settled,
            )  # fmt: skip
            self.send_transfer(transfer, sections + body)
        else:
            connection.write(data)
            self.next_outgoing_id = (self.next_outgoing_id + 1) % _SERIAL
            self.remote_incoming_window -= 1
        connection.messages_delivered += 1
        if not settled:
            self._outgoing[delivery_id] = link
        return delivery_id

    def sent_unsettled(self, delivery_id: int, link: Any, queue: Queue, entry: Entry) -> None:
        self._outgoing[delivery_id] = link

    def confirms_settled(self, link: Any) -> None:
        self._confirm_links.add(link)
        self.connection.session_has_dispositions(self)

    def transaction(self, txn_id: bytes) -> OpenTransaction:
        return self.transactions.find(txn_id)

    def published(self) -> None:
        self.connection.messages_published += 1

    def link_lost(self, link: Any, condition: str, description: str) -> None:
        found = self.links.get(link.handle)
        if found is not link or found is None:
            return
        self._detach_with_error(found, Amqp10Error(condition, description, Scope.LINK))

    # -- begin and end ---------------------------------------------------------------------
    def begin_reply(self, remote_channel: int) -> Begin:
        self.remote_channel = remote_channel
        return Begin(
            remote_channel=remote_channel,
            next_outgoing_id=self.next_outgoing_id,
            incoming_window=self.incoming_window,
            outgoing_window=OUTGOING_WINDOW,
        )

    def release(self) -> None:
        """The session ends (or its connection): every link is released, what the client
        did not settle goes back to its queue."""
        self.ended = True
        for link in list(self.links.values()):
            self._release(link)
        self.links.clear()
        self._confirm_links.clear()
        self.transactions.release()

    def _release(self, link: Link) -> None:
        if isinstance(link, SenderLink):
            for delivery_id in link.detach():
                self._outgoing.pop(delivery_id, None)
        else:  # a receiver or a control link (whose transactions roll back)
            link.detach()
            self._confirm_links.discard(link)

    # -- frames ----------------------------------------------------------------------------
    def received(self, performative: Any, payload: bytes) -> None:
        """One frame of this session (errors of link scope are answered here; session and
        connection scope raise)."""
        if isinstance(performative, Transfer):
            self._transfer(performative, payload)
        elif isinstance(performative, Flow):
            self._flow(performative)
        elif isinstance(performative, Disposition):
            self._disposition(performative)
        elif isinstance(performative, Attach):
            self._attach(performative)
        elif isinstance(performative, Detach):
            self._detach(performative)
        else:
            raise Amqp10Error(
                ILLEGAL_STATE, f"{type(performative).__name__} on a session", Scope.CONNECTION
            )

    def _link(self, handle: int, what: str) -> Link | None:
        link = self.links.get(handle)
        if link is None and handle not in self._detaching:
            raise Amqp10Error(
                UNATTACHED_HANDLE, f"{what} on handle {handle}, which is not attached",
                Scope.SESSION,
            )  # fmt: skip
        return link

    def _transfer(self, transfer: Transfer, payload: bytes) -> None:
        self.transfer(
            int(transfer.handle),
            None if transfer.delivery_id is None else int(transfer.delivery_id),
            transfer.settled, bool(transfer.more),
            bool(transfer.aborted), payload, transfer.state,
        )  # fmt: skip

    def transfer(
        self, handle: int, delivery_id: int | None, settled: bool | None, more: bool,
        aborted: bool, payload: bytes, state: Any = None,
    ) -> None:  # fmt: skip
        """One transfer frame (its fields: the connection reads a client's usual transfer
        by hand, without a :class:`Transfer`; ``state``: a transactional posting's)."""
        if self.incoming_window <= 0:
            raise Amqp10Error(
                WINDOW_VIOLATION, "transfer beyond the session's incoming window", Scope.SESSION
            )
        self.incoming_window -= 1
        self.next_incoming_id = (self.next_incoming_id + 1) % _SERIAL
        link = self.links.get(handle)
        if link is None:
            link = self._link(handle, "transfer")
        if link is not None:
            if isinstance(link, SenderLink):
                raise Amqp10Error(
                    ILLEGAL_STATE,
                    f"transfer on handle {handle}, where the broker sends",
                    Scope.SESSION,
                )
            try:
                link.transfer(delivery_id, settled, more, aborted, payload, state)
            except Amqp10Error as error:
                if error.scope is not Scope.LINK:
                    raise
                self._detach_with_error(link, error)
        if self.incoming_window <= WINDOW // 2:
            self.incoming_window = WINDOW
            self.send(Flow())

    def _flow(self, flow: Flow) -> None:
        if flow.next_incoming_id is None:
            window = int(flow.incoming_window)
        else:
            window = (int(flow.next_incoming_id) + int(flow.incoming_window)) % _SERIAL
            window = (window - self.next_outgoing_id) % _SERIAL
            if window >= 1 << 31:
                window = 0
        opened = window > 0 and self.remote_incoming_window <= 0
        self.remote_incoming_window = window
        if flow.handle is not None:
            link = self._link(int(flow.handle), "flow")
            if link is not None:
                link.peer_flow(flow)
        elif flow.echo:
            self.send(Flow())
        if opened:
            for link in list(self.links.values()):
                if isinstance(link, SenderLink):
                    link.queue.credit_returned(link)
                    link.queue.dispatch()

    def _disposition(self, disposition: Disposition) -> None:
        if disposition.role is not RECEIVER:
            return  # the client settles what it sent: nothing is kept for it
        state = disposition.state
        if isinstance(state, Received) or (state is None and not disposition.settled):
            return  # not an outcome yet
        first = int(disposition.first)
        last = first if disposition.last is None else int(disposition.last)
        if isinstance(state, TransactionalState):
            self._retire(first, last, state, disposition.settled)
            return
        outgoing = self._outgoing
        if last - first < len(outgoing):
            ids: list[int] = list(range(first, last + 1))
        else:
            ids = sorted(k for k in outgoing if first <= k <= last)
        if isinstance(state, Accepted) or state is None:  # the usual outcome: settled
            for delivery_id in ids:
                link = outgoing.pop(delivery_id, None)
                if link is not None:
                    link.accept(delivery_id)
        else:
            for delivery_id in ids:
                link = outgoing.pop(delivery_id, None)
                if link is not None:
                    link.settle(delivery_id, state)
        if not disposition.settled:
            self.send(
                Disposition(role=SENDER, first=first, last=disposition.last, settled=True,
                            state=state)
            )  # fmt: skip

    def _retire(self, first: int, last: int, state: TransactionalState, settled: bool) -> None:
        """A disposition inside a transaction: each delivery's outcome is held by it until
        commit (:class:`~broker.amqp10.sender.Retirement`); an unknown txn-id detaches the
        deliveries' links with ``amqp:transaction:unknown-id``."""
        outgoing = self._outgoing
        ids = [k for k in outgoing if first <= k <= last]
        try:
            txn = self.transactions.find(state.txn_id)
        except Amqp10Error as error:
            for link in {id(outgoing[k]): outgoing[k] for k in ids}.values():
                self._detach_with_error(link, error)
            return
        if state.outcome is None:
            return  # transactional acquisition's state: not supported, nothing to hold
        for delivery_id in sorted(ids):
            link = outgoing.pop(delivery_id)
            retirement = link.retire(delivery_id, state.outcome, settled)
            if retirement is not None:
                txn.work.settle(retirement)

    def _detach(self, detach: Detach) -> None:
        handle = int(detach.handle)
        if handle in self._detaching:
            self._detaching.discard(handle)
            return
        link = self.links.pop(handle, None)
        if link is None:
            raise Amqp10Error(
                UNATTACHED_HANDLE, f"detach of handle {handle}, which is not attached",
                Scope.SESSION,
            )  # fmt: skip
        self._release(link)
        self.send(Detach(handle=handle, closed=detach.closed))

    def _detach_with_error(self, link: Link, error: Amqp10Error) -> None:
        self.links.pop(link.handle, None)
        self._release(link)
        self._detaching.add(link.handle)
        self._log_refusal(link.name, error)
        self.send(
            Detach(handle=link.handle, closed=True, error=Error(error.condition, error.description))
        )

    def _log_refusal(self, name: str, error: Amqp10Error) -> None:
        self.ctx.protocol_errors_total += 1
        self.ctx.log.warning(
            "protocol_error",
            connection=self.connection.name,
            reply_code=None,
            reason=f"link {name!r}: {error.condition}: {error.description}",
            scope="link",
        )

    # -- attach ----------------------------------------------------------------------------
    def _attach(self, attach: Attach) -> None:
        handle = int(attach.handle)
        if handle in self.links or handle in self._detaching:
            raise Amqp10Error(HANDLE_IN_USE, f"handle {handle} is in use", Scope.SESSION)
        try:
            link = make_link(self, attach, self.transactions)
        except AmqpError as core:
            self._refuse(attach, from_core(core, Scope.LINK))
            return
        except Amqp10Error as error:
            if error.scope is not Scope.LINK:
                raise
            self._refuse(attach, error)
            return
        self.links[handle] = link
        self.send(link.attach_reply())
        if isinstance(link, SenderLink):
            link.queue.add_consumer(link)
            return
        if isinstance(link, ReceiverLink):
            link.blocked = self.ctx.publish_alarm is not None
        link.top_up(force=True)

    def _refuse(self, attach: Attach, error: Amqp10Error) -> None:
        """An attach answered with an attach without the terminus, then a detach."""
        ours = RECEIVER if attach.role is SENDER else SENDER
        self.send(
            Attach(
                name=attach.name,
                handle=attach.handle,
                role=ours,
                source=attach.source if ours is RECEIVER else None,
                target=attach.target if ours is SENDER else None,
                initial_delivery_count=0 if ours is SENDER else None,
            )
        )
        self._log_refusal(attach.name, error)
        self._detaching.add(int(attach.handle))  # until the client's detach
        self.send(
            Detach(
                handle=attach.handle, closed=True, error=Error(error.condition, error.description)
            )
        )

    def check_publish(self, exchange: str, routing_key: str) -> None:
        """The ACL's ``publish exchange`` for this connection's user.

        :raises Amqp10Error: ``amqp:unauthorized-access`` (link scope) when denied.
        """
        acl = self.ctx.acl
        if acl is None:
            return
        denied = acl.check(
            self.user, self.connection_name, "publish", "exchange",
            {"name": exchange, "routingkey": routing_key},
        )  # fmt: skip
        if denied is not None:
            raise Amqp10Error(UNAUTHORIZED_ACCESS, denied.reply_text, Scope.LINK)

    # -- output at the connection's flush --------------------------------------------------
    def send_dispositions(self) -> None:
        links = self._confirm_links
        self._confirm_links = set()
        for link in links:
            for disposition in link.take_dispositions():
                self.send(disposition)

    def writable_again(self) -> None:
        """The transport takes output again: the links send what they can."""
        for link in list(self.links.values()):
            if isinstance(link, SenderLink):
                link.queue.credit_returned(link)
                link.queue.dispatch()

    def publishers_blocked(self, blocked: bool) -> None:
        for link in list(self.links.values()):
            if isinstance(link, ReceiverLink):
                link.publishers_blocked(blocked)
