"""AMQP 1.0 transactions (part 4): a session's coordinator and the client's control links.

Contract: a :class:`~broker.amqp10.session.Session` owns one :class:`Transactions` (the
transactions declared on it, by txn-id) and makes a :class:`CoordinatorLink` for an attach
whose target is a ``coordinator`` (the client's control link; offered capabilities
``amqp:local-transactions`` and ``amqp:multi-txns-per-ssn``: several transactions at once
on a session, each used by the links of that session only).

On the control link the client sends unsettled messages whose body is one ``amqp-value``:

- ``declare`` (without ``global-id``: local transactions only): answered ``declared`` with
  a new txn-id (4 bytes, per session);
- ``discharge`` with ``fail`` false commits through the core both protocols use
  (:meth:`broker.core.transaction.Transaction.commit`) and is answered ``accepted`` only
  once the commit is kept: every message of it routed, on disk (durable) and held by every
  in-sync HA backup, and its retirements' dequeues replicated and stored, exactly as a
  0-9-1 commit-ok; the answer also waits for ``may_confirm``, as every 1.0 disposition of
  the broker does. ``fail`` true rolls back and is ``accepted`` at once. An unknown txn-id
  is ``rejected`` with ``amqp:transaction:unknown-id``; a transaction whose transactional
  work failed (a transfer the broker could not take) is rolled back and the discharge
  ``rejected`` with ``amqp:transaction:rollback``.

Transactional work on the session's other links names its transaction by a
``transactional-state``: a transfer (posting: :class:`~broker.amqp10.receiver.ReceiverLink`,
held until commit and answered with its provisional outcome at once) and a disposition
(retirement: :class:`~broker.amqp10.sender.SenderLink`, the outcome held until commit).
A control link detached, its session ended or its connection lost rolls back every
transaction it declared and did not discharge. Not supported: transactional acquisition
(a ``txn-id`` in a flow's properties is ignored), distributed transactions.

THREAD UNSAFE: the connection's event loop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from broker.amqp.context import after_replicated
from broker.amqp10.codec import DecodeError
from broker.amqp10.errors import (
    DECODE_ERROR,
    ILLEGAL_STATE,
    NOT_IMPLEMENTED,
    TRANSACTION_ROLLBACK,
    TRANSACTION_UNKNOWN_ID,
    Amqp10Error,
    Scope,
)
from broker.amqp10.performatives import (
    RECEIVER,
    Accepted,
    Attach,
    Coordinator,
    Declare,
    Declared,
    Discharge,
    Disposition,
    Error,
    Flow,
    Rejected,
    receiving_attach,
)
from broker.amqp10.ports import LinkSession
from broker.amqp10.sections import AmqpValue, parse_message
from broker.core.queue import Queue
from broker.core.transaction import Transaction

#: The capabilities the coordinator offers.
CAPABILITIES = ("amqp:local-transactions", "amqp:multi-txns-per-ssn")
#: The credit a control link grants (declares and discharges at once), topped up at half.
CREDIT = 64

_ACCEPTED = Accepted()


@dataclass(slots=True, eq=False)
class OpenTransaction:
    """A declared transaction not discharged yet."""

    txn_id: bytes
    work: Transaction
    #: The control link that declared it (its detach rolls the transaction back).
    controller: CoordinatorLink
    #: Why it may only roll back (transactional work the broker could not take), or None.
    rollback_only: str | None = None


class Transactions:
    """The transactions declared on one session; see the module docstring."""

    def __init__(self, session: LinkSession) -> None:
        self._session = session
        self._open: dict[bytes, OpenTransaction] = {}
        self._next = 1

    def declare(self, controller: CoordinatorLink) -> bytes:
        txn_id = self._next.to_bytes(4, "big")
        self._next = (self._next + 1) & 0xFFFFFFFF or 1
        self._open[txn_id] = OpenTransaction(txn_id, Transaction(), controller)
        return txn_id

    def find(self, txn_id: bytes) -> OpenTransaction:
        """The open transaction ``txn_id``.

        :raises Amqp10Error: ``amqp:transaction:unknown-id`` (link scope).
        """
        found = self._open.get(bytes(txn_id))
        if found is None:
            raise Amqp10Error(
                TRANSACTION_UNKNOWN_ID, f"no transaction {bytes(txn_id).hex()}", Scope.LINK
            )
        return found

    def discharge(self, txn_id: bytes, fail: bool, answer: Callable[[Any], None]) -> None:
        """End ``txn_id``: ``answer(outcome)`` once it is rolled back, or committed and kept
        (see the module docstring)."""
        found = self._open.pop(bytes(txn_id), None)
        if found is None:
            answer(Rejected(Error(TRANSACTION_UNKNOWN_ID, f"no transaction {txn_id.hex()}")))
            return
        if fail or found.rollback_only is not None:
            found.work.rollback()
            if fail:
                answer(_ACCEPTED)
            else:
                answer(Rejected(Error(TRANSACTION_ROLLBACK, found.rollback_only)))
            return
        ctx = self._session.ctx

        def replicated(done: Any, queues: tuple[Queue, ...]) -> None:
            after_replicated(ctx.barrier, ctx.store_barrier, done, queues)

        found.work.commit(
            self._session.vhost, ctx.store_transaction, replicated, lambda: answer(_ACCEPTED)
        )

    def controller_gone(self, controller: CoordinatorLink) -> None:
        """A control link detached: roll back what it declared and did not discharge."""
        for txn_id, found in list(self._open.items()):
            if found.controller is controller:
                del self._open[txn_id]
                found.work.rollback()

    def release(self) -> None:
        """The session ends: roll back every open transaction."""
        left, self._open = list(self._open.values()), {}
        for found in left:
            found.work.rollback()


class CoordinatorLink:
    """The client's control link: declares and discharges; see the module docstring."""

    def __init__(self, session: LinkSession, attach: Attach, transactions: Transactions) -> None:
        self.session = session
        self.name = attach.name
        self.handle = int(attach.handle)
        self.attach = attach
        self._transactions = transactions
        self.delivery_count = int(attach.initial_delivery_count or 0)
        self.credit = 0
        self.detached = False
        #: The control messages' outcomes to send: (delivery id, outcome).
        self._outcomes: list[tuple[int, Any]] = []
        #: A control message being assembled: (delivery id, settled, its frames' payloads).
        self._partial: tuple[int, bool, list[bytes]] | None = None

    def attach_reply(self) -> Attach:
        """Our attach: the coordinator's receiving end, settling first."""
        return receiving_attach(
            self.attach, settles_second=False, target=Coordinator(capabilities=CAPABILITIES)
        )

    # -- credit --------------------------------------------------------------------------
    def top_up(self, force: bool = False) -> None:
        if self.detached:
            return
        if force or self.credit <= CREDIT // 2:
            self.credit = CREDIT
            self.session.send(
                Flow(handle=self.handle, delivery_count=self.delivery_count, link_credit=CREDIT)
            )

    def peer_flow(self, flow: Flow) -> None:
        if flow.delivery_count is not None:
            self.delivery_count = int(flow.delivery_count)
        if flow.echo:
            self.session.send(
                Flow(
                    handle=self.handle, delivery_count=self.delivery_count, link_credit=self.credit
                )
            )

    def publishers_blocked(self, blocked: bool) -> None:
        """Control messages are not publishes: a resource alarm leaves the credit."""

    # -- control messages ----------------------------------------------------------------
    def transfer(
        self, delivery_id: int | None, settled: bool | None, more: bool, aborted: bool,
        payload: bytes, state: Any = None,
    ) -> None:  # fmt: skip
        partial = self._partial
        if partial is None:
            if delivery_id is None:
                raise Amqp10Error(ILLEGAL_STATE, "a control message without delivery-id")
            if self.credit <= 0:
                raise Amqp10Error(
                    "amqp:link:transfer-limit-exceeded", "the control link has no credit",
                    Scope.LINK,
                )  # fmt: skip
            self.credit -= 1
            self.delivery_count = (self.delivery_count + 1) & 0xFFFFFFFF
            partial = self._partial = (delivery_id, bool(settled), [])
        if aborted:
            self._partial = None
            return
        partial[2].append(payload)
        if more:
            return
        self._partial = None
        delivery_id, was_settled = partial[0], partial[1] or bool(settled)
        if was_settled:
            raise Amqp10Error(
                ILLEGAL_STATE, "a declare or discharge must be sent unsettled", Scope.LINK
            )
        self._control(delivery_id, b"".join(partial[2]))
        self.top_up()

    def _control(self, delivery_id: int, payload: bytes) -> None:
        try:
            message = parse_message(payload)
        except DecodeError as exc:
            raise Amqp10Error(DECODE_ERROR, f"control message: {exc}", Scope.LINK) from None
        body = message.body
        value = body[0].value if len(body) == 1 and isinstance(body[0], AmqpValue) else None
        if isinstance(value, Declare):
            if value.global_id is not None:
                self.answer(delivery_id, Rejected(Error(NOT_IMPLEMENTED, "global transactions")))
                return
            txn_id = self._transactions.declare(self)
            self.answer(delivery_id, Declared(txn_id=txn_id))
        elif isinstance(value, Discharge):
            self._transactions.discharge(
                value.txn_id, value.fail, lambda outcome: self.answer(delivery_id, outcome)
            )
        else:
            raise Amqp10Error(
                DECODE_ERROR, "a control message's body is one declare or discharge", Scope.LINK
            )

    def answer(self, delivery_id: int, outcome: Any) -> None:
        """A control message's outcome, sent at the connection's next flush (once the broker
        serves, as every disposition); dropped once the link is gone."""
        if self.detached:
            return
        self._outcomes.append((delivery_id, outcome))
        self.session.confirms_settled(self)

    def take_dispositions(self) -> list[Disposition]:
        outcomes, self._outcomes = self._outcomes, []
        if self.detached:
            return []
        return [
            Disposition(role=RECEIVER, first=delivery_id, settled=True, state=outcome)
            for delivery_id, outcome in outcomes
        ]

    def detach(self) -> None:
        """The link is gone: what it declared and did not discharge is rolled back."""
        self.detached = True
        self._partial = None
        self._transactions.controller_gone(self)
