"""A link on which the client sends and the broker receives: :class:`ReceiverLink`.

Contract: made by a :class:`~broker.amqp10.session.Session` for an attach whose role is
sender, with its target resolved to an exchange and routing key (a queue: the default
exchange and the queue's name, as 0-9-1's ``basic.publish`` to ``""``), or without a target
address: the anonymous relay, where each message's ``to`` is resolved (and the ACL asked)
as a target's address is; a ``to`` naming nothing is ``released``, as any unroutable one.
It grants credit (:data:`CREDIT`, topped up when half is used; none while a resource alarm blocks
publishers), assembles a delivery from its transfer frames (``more``; ``aborted`` drops it;
over ``max_body_size`` detaches with ``amqp:link:message-size-exceeded``), maps the message
to 0-9-1 properties (:mod:`broker.amqp10.mapping`) and routes it through the virtual host
as a 0-9-1 publish does, so the store writes a durable message of a durable queue and the
HA module replicates it.

Settlement: a pre-settled delivery is routed and forgotten. An unsettled one takes a
:class:`~broker.core.confirms.ConfirmHandle` exactly as a 0-9-1 publish in confirm mode
(``PUBLISH_HOLDS``: routing, then the disk, then each HA backup), and its disposition goes
out only when the handle settles: ``accepted``; ``released`` when it routed nowhere;
``rejected`` when a queue refused it. Dispositions cover runs of delivery ids, settled at
once (``rcv-settle-mode`` first), or, when the client asked for ``rcv-settle-mode``
second, sent unsettled for the client to settle first (the broker keeps nothing for them
after: without link recovery no later frame can ask anything of them).

THREAD UNSAFE: the connection's event loop.
"""

from __future__ import annotations

import struct
from typing import Any

from broker.amqp10 import addresses
from broker.amqp10.codec import DecodeError
from broker.amqp10.errors import (
    DECODE_ERROR,
    INVALID_FIELD,
    MESSAGE_SIZE_EXCEEDED,
    TRANSACTION_UNKNOWN_ID,
    UNAUTHORIZED_ACCESS,
    Amqp10Error,
    Scope,
)
from broker.amqp10.mapping import stored_form
from broker.amqp10.performatives import (
    RCV_SECOND,
    RECEIVER,
    Accepted,
    Attach,
    Disposition,
    Error,
    Flow,
    Rejected,
    Released,
    TransactionalState,
    receiving_attach,
)
from broker.amqp10.ports import LinkSession, TransactionalWork
from broker.core.confirms import PublisherConfirms
from broker.core.message import Message

#: The credit a receiver link grants; topped up when it falls under half.
CREDIT = 256

_ACCEPTED = Accepted()
_RELEASED = Released()


def _first(pair: tuple[int, Any]) -> int:
    return pair[0]


class ReceiverLink:
    """See the module docstring."""

    def __init__(
        self, session: LinkSession, attach: Attach, exchange: str | None, routing_key: str
    ) -> None:
        self.session = session
        self.name = attach.name
        self.handle = int(attach.handle)
        #: None: the anonymous relay (each message's ``to`` names where it goes).
        self.exchange = exchange
        self.routing_key = routing_key
        self.attach = attach
        #: The sender's delivery-count as we know it (advances with each delivery).
        self.delivery_count = int(attach.initial_delivery_count or 0)
        self.credit = 0
        self.blocked = False
        #: ``rcv-settle-mode`` second (the client asked): our dispositions go out
        #: unsettled, and the client settles first.
        self.settles_second = attach.rcv_settle_mode == RCV_SECOND
        self.confirms: PublisherConfirms | None = None
        #: The unsettled deliveries' delivery ids by confirm number, in order.
        self._pending: dict[int, int] = {}
        #: Confirm numbers whose message routed nowhere (released).
        self._unrouted: set[int] = set()
        #: The delivery being assembled: (delivery id, settled, its frames' payloads).
        self._partial: tuple[int, bool, list[bytes]] | None = None
        #: Its transaction (a transactional posting), or None.
        self._partial_txn: TransactionalWork | None = None
        #: Provisional outcomes of transactional postings to send: (delivery id, state).
        self._tx_outcomes: list[tuple[int, Any]] = []
        self._partial_size = 0
        self.detached = False
        #: The settings' max_body_size, as 0-9-1's channel keeps it.
        self._max_body_size = session.ctx.settings.max_body_size
        #: The session was told of dispositions to send, and has not taken them yet.
        self._dispositions_due = False

    def attach_reply(self) -> Attach:
        """Our attach: the receiving end, settling first (second if the client asked)."""
        return receiving_attach(
            self.attach,
            settles_second=self.settles_second,
            target=self.attach.target,
            max_message_size=self.session.ctx.settings.max_body_size,
        )

    # -- credit --------------------------------------------------------------------------
    def top_up(self, force: bool = False) -> None:
        """Grant credit back up to CREDIT once half is used (``force``: whatever is left);
        none while publishers are blocked."""
        if self.detached or self.blocked:
            return
        if force or self.credit <= CREDIT // 2:
            self.credit = CREDIT
            self.session.send(self._flow())

    def _flow(self) -> Flow:
        return Flow(  # the session fields are filled in by the session
            handle=self.handle, delivery_count=self.delivery_count, link_credit=self.credit
        )

    def peer_flow(self, flow: Flow) -> None:
        """The sender's flow: its delivery-count (and ``echo``: ours back)."""
        if flow.delivery_count is not None:
            self.delivery_count = int(flow.delivery_count)
        if flow.echo:
            self.session.send(self._flow())

    def publishers_blocked(self, blocked: bool) -> None:
        """A resource alarm was raised (no credit is granted) or cleared (credit again)."""
        self.blocked = blocked
        if not blocked:
            self.top_up()

    # -- transfers -----------------------------------------------------------------------
    def transfer(
        self, delivery_id: int | None, settled: bool | None, more: bool, aborted: bool,
        payload: bytes, state: Any = None, txn: TransactionalWork | None = None,
    ) -> None:  # fmt: skip
        """One transfer frame of this link (its fields; ``state`` a
        ``transactional-state``: the delivery is posted in that transaction, ``txn``)."""
        if txn is None and (state is not None or self._partial_txn is not None):
            self._transactional(delivery_id, settled, more, aborted, payload, state)
            return
        partial = self._partial
        if partial is None:
            if delivery_id is None:
                raise Amqp10Error(
                    INVALID_FIELD, "the first transfer of a delivery has no delivery-id"
                )
            if self.credit <= 0:
                raise Amqp10Error(
                    "amqp:link:transfer-limit-exceeded",
                    f"link {self.name!r} has no credit",
                    Scope.LINK,
                )
            self.credit -= 1
            self.delivery_count = (self.delivery_count + 1) & 0xFFFFFFFF
            if not more and not aborted:  # a delivery in one frame: the usual case
                if len(payload) > self._max_body_size:
                    self._check_size(len(payload))
                self._publish(delivery_id, bool(settled), payload, txn)
                if self.credit <= CREDIT // 2:
                    self.top_up()
                return
            partial = (delivery_id, bool(settled), [])
            self._partial = partial
            self._partial_txn = txn
            self._partial_size = 0
        first_id, was_settled, chunks = partial
        if settled and not was_settled:
            self._partial = partial = (first_id, True, chunks)
        if aborted:
            self._partial = self._partial_txn = None
            return
        self._partial_size += len(payload)
        self._check_size(self._partial_size)
        chunks.append(payload)
        if more:
            return
        self._partial = self._partial_txn = None
        whole = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        self._publish(first_id, partial[1], whole, txn)
        self.top_up()

    def _transactional(
        self, delivery_id: int | None, settled: bool | None, more: bool, aborted: bool,
        payload: bytes, state: Any,
    ) -> None:  # fmt: skip
        """A transfer with a state, or a frame of a delivery posted in a transaction."""
        txn = self._partial_txn
        if txn is None and isinstance(state, TransactionalState):
            txn = self.session.transaction(state.txn_id)  # or amqp:transaction:unknown-id
        if txn is None:  # another state: not a transaction's
            self.transfer(delivery_id, settled, more, aborted, payload)
            return
        try:
            self.transfer(delivery_id, settled, more, aborted, payload, txn=txn)
        except Amqp10Error as error:  # the transaction may not commit without it
            txn.rollback_only = f"a delivery failed: {error.condition}: {error.description}"
            raise

    def _check_size(self, size: int) -> None:
        limit = self._max_body_size
        if size > limit:
            self._partial = self._partial_txn = None
            raise Amqp10Error(
                MESSAGE_SIZE_EXCEEDED,
                f"message of more than {limit} bytes (max-message-size)",
                Scope.LINK,
            )

    def _publish(
        self, delivery_id: int, settled: bool, payload: bytes, txn: TransactionalWork | None
    ) -> None:
        session = self.session
        try:
            found = stored_form(payload)
        except DecodeError as exc:
            raise Amqp10Error(DECODE_ERROR, f"malformed message: {exc}", Scope.LINK) from None
        except (ValueError, TypeError, OverflowError, struct.error) as exc:
            # a value 0-9-1 cannot carry (an application property of 2**64 - 1...)
            raise Amqp10Error(
                INVALID_FIELD, f"the message does not map to 0-9-1: {exc}", Scope.LINK
            ) from None
        raw, body, user_id, to = found
        if user_id is not None and user_id != session.user:
            raise Amqp10Error(
                UNAUTHORIZED_ACCESS,
                f"user-id {user_id!r} is not the authenticated user {session.user!r}",
                Scope.LINK,
            )
        exchange_name = self.exchange
        if exchange_name is None:
            exchange_name, routing_key = self._route(to)
        else:
            routing_key = self.routing_key
        stored = Message(exchange_name, routing_key, raw, body)
        session.published()
        if txn is not None:
            self._post(delivery_id, settled, exchange_name, stored, txn)
            return
        handle = None
        if not settled:
            confirms = self.confirms
            if confirms is None:
                confirms = self.confirms = PublisherConfirms(on_settled=self._settled)
            handle = confirms.publish(stored)
            self._pending[handle.seq] = delivery_id
        vhost = session.vhost
        exchange = vhost.exchanges.get(exchange_name)
        routed, rejected = False, 0
        if exchange is not None:
            result = vhost.publish(exchange, stored)
            routed, rejected = bool(result.routed), result.rejected
        if handle is not None:
            if not routed:
                self._unrouted.add(handle.seq)
            handle.release(ok=rejected == 0)
        between = session.ctx.between_publishes
        if between is not None:
            between()  # the store: a long read's records start going to disk

    def _post(
        self, delivery_id: int, settled: bool, exchange_name: str, message: Message,
        txn: TransactionalWork,
    ) -> None:  # fmt: skip
        """A transactional posting: held by its transaction until commit; its provisional
        outcome (``accepted``, or ``released`` when the exchange is gone) goes out at once.
        A transaction discharged while the delivery's frames came is not open any more:
        ``amqp:transaction:unknown-id``."""
        if self.session.transaction(txn.txn_id) is not txn:
            raise Amqp10Error(
                TRANSACTION_UNKNOWN_ID, f"transaction {txn.txn_id.hex()} ended", Scope.LINK
            )
        exchange = self.session.vhost.exchanges.get(exchange_name)
        if exchange is not None:
            txn.work.publish(exchange, message)
        if not settled:
            outcome = _ACCEPTED if exchange is not None else _RELEASED
            self._tx_outcomes.append((delivery_id, TransactionalState(txn.txn_id, outcome)))
            self._dispositions_due = True
            self.session.confirms_settled(self)

    def _route(self, to: str | None) -> tuple[str, str]:
        """Where a message on the anonymous relay goes: its ``to``."""
        if not to:
            raise Amqp10Error(
                INVALID_FIELD, "a message without 'to' on an anonymous relay link", Scope.LINK
            )
        exchange, key = addresses.route_of(addresses.parse(to))
        self.session.check_publish(exchange, key)
        return exchange, key

    def _settled(self) -> None:
        if not self._dispositions_due:  # once until the session takes them
            self._dispositions_due = True
            self.session.confirms_settled(self)

    def take_dispositions(self) -> list[Disposition]:
        """The dispositions for the deliveries settled since the last call: runs of
        consecutive delivery ids with one outcome each."""
        self._dispositions_due = False
        confirms = self.confirms
        outcomes, self._tx_outcomes = self._tx_outcomes, []
        if self.detached:
            return []
        pending = self._pending
        accepted: list[int] = []  # the usual outcome's delivery ids, apart
        for reply in () if confirms is None else confirms.take_replies():
            if reply.multiple:
                seqs = []  # the pending ones up to its tag: the first (in confirm order)
                for seq in pending:
                    if seq > reply.delivery_tag:
                        break
                    seqs.append(seq)
            else:
                seqs = [reply.delivery_tag] if reply.delivery_tag in pending else []
            for seq in seqs:
                delivery_id = pending.pop(seq)
                if not reply.ack:
                    outcome: Any = Rejected(
                        Error("amqp:precondition-failed", "a queue refused the message")
                    )
                elif seq in self._unrouted:
                    self._unrouted.discard(seq)
                    outcome = _RELEASED
                else:
                    accepted.append(delivery_id)
                    continue
                outcomes.append((delivery_id, outcome))
        if accepted:
            accepted.sort()
            if not outcomes and accepted[-1] - accepted[0] == len(accepted) - 1:
                return [self._disposition(accepted[0], accepted[-1], _ACCEPTED)]  # one run
            outcomes += [(delivery_id, _ACCEPTED) for delivery_id in accepted]
        outcomes.sort(key=_first)
        runs: list[list[Any]] = []  # [first, last, outcome]
        for delivery_id, outcome in outcomes:
            if runs:
                run = runs[-1]
                if delivery_id == run[1] + 1 and (run[2] is outcome or run[2] == outcome):
                    run[1] = delivery_id
                    continue
            runs.append([delivery_id, delivery_id, outcome])
        return [self._disposition(first, last, outcome) for first, last, outcome in runs]

    def _disposition(self, first: int, last: int, outcome: Any) -> Disposition:
        return Disposition(
            role=RECEIVER, first=first, last=None if last == first else last,
            settled=not self.settles_second, state=outcome,
        )  # fmt: skip

    def detach(self) -> None:
        """The link is gone: settlements after this are dropped."""
        self.detached = True
        self._partial = self._partial_txn = None
        if self.confirms is not None:
            self.confirms.close()
