"""A transaction, as both protocols commit it: 0-9-1's ``tx`` class and AMQP 1.0's
coordinator (part 4) hold their work here and commit it through here.

Contract: a :class:`Transaction` holds what a client did inside it until it is committed
or rolled back:

- **publishes** (:class:`TxPublish`: an exchange, a message, and what to do when it routes
  nowhere, e.g. 0-9-1's basic.return of a mandatory publish), not routed until commit;
- **settlements** (:class:`TxSettlement`: an acknowledgement, a nack or reject, a 1.0
  outcome), not applied until commit.

:meth:`Transaction.commit` takes the work held so far (the transaction is empty again,
ready for the next) and, in one store transaction (on disk all or none), routes and
enqueues each publish with a confirm handle of the commit's own
(:class:`~broker.core.confirms.PublisherConfirms`: ``PUBLISH_HOLDS``, so the store holds a
durable message's handle until it is on disk and each in-sync HA backup's guard until that
backup has it), marks the messages with one :class:`~broker.core.message.TxMark` (an HA
backup applies them all or none), then applies the settlements in order. The answer
(``committed``: 0-9-1's commit-ok, 1.0's ``accepted`` discharge) is called once, only when
every publish's handle settled **and** the backups and the store have the settlements'
dequeues (``after_replicated``, with the queues they touched): a promise kept by protocol,
exactly as a publisher confirm, never by a timeout. :meth:`Transaction.rollback` drops the
publishes and hands each settlement back (:meth:`TxSettlement.rolled_back`).

No I/O: the protocol shells (``broker/amqp/channel.py``, ``broker/amqp10/coordinator.py``)
give it the store's transaction and the replication barrier as callables.

THREAD UNSAFE: the event loop of the connection that owns the transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Protocol

from broker.core.confirms import PublisherConfirms
from broker.core.exchange import Exchange
from broker.core.message import Message, TxMark
from broker.core.queue import Queue
from broker.core.vhost import VirtualHost

#: ``after_replicated(done, queues)``: call ``done`` once the HA backups (every change so
#: far, and every dequeue of ``queues``) and the store (on disk) have what is done so far.
AfterReplicated = Callable[[Callable[[], None], tuple[Queue, ...]], None]
#: The store's transaction around a commit (all or none on disk); None without a store.
StoreTransaction = Callable[[], AbstractContextManager[None]] | None


class TxSettlement(Protocol):
    """An outcome a transaction holds until commit (an acknowledgement, a reject...)."""

    def apply(self) -> Iterable[Queue]:
        """Commit: settle, requeue or dead-letter the deliveries it names; returns the
        queues whose dequeues the commit's answer promises."""
        ...

    def rolled_back(self) -> None:
        """Rollback: the outcome is not applied (the deliveries are live again)."""
        ...


@dataclass(slots=True)
class TxPublish:
    """A publish a transaction holds until commit."""

    exchange: Exchange
    message: Message
    #: Called at commit when the message routed nowhere (0-9-1's basic.return of a
    #: mandatory publish); None: it is dropped.
    unroutable: Callable[[], None] | None = None


class Transaction:
    """See the module docstring."""

    __slots__ = ("publishes", "settlements")

    def __init__(self) -> None:
        self.publishes: list[TxPublish] = []
        self.settlements: list[TxSettlement] = []

    def publish(
        self, exchange: Exchange, message: Message, unroutable: Callable[[], None] | None = None
    ) -> None:
        """Hold a publish until commit."""
        self.publishes.append(TxPublish(exchange, message, unroutable))

    def settle(self, settlement: TxSettlement) -> None:
        """Hold an outcome until commit."""
        self.settlements.append(settlement)

    @property
    def empty(self) -> bool:
        return not self.publishes and not self.settlements

    def rollback(self) -> None:
        """Drop the held publishes; hand the held settlements back."""
        settlements = self.settlements
        self.publishes, self.settlements = [], []
        for settlement in settlements:
            settlement.rolled_back()

    def commit(
        self,
        vhost: VirtualHost,
        store_transaction: StoreTransaction,
        after_replicated: AfterReplicated,
        committed: Callable[[], None],
    ) -> None:
        """Apply the work held so far (see the module docstring); ``committed`` is called
        once every publish is settled (routing, disk, each in-sync backup) and the
        settlements' dequeues are replicated and stored."""
        publishes, settlements = self.publishes, self.settlements
        self.publishes, self.settlements = [], []
        answer = _Answer(committed, waiting_for_dequeues=bool(settlements))
        confirms = PublisherConfirms(on_settled=answer.check)
        answer.confirms = confirms
        if publishes:
            mark = TxMark()
            for held in publishes:
                held.message.tx = mark
        with nullcontext() if store_transaction is None else store_transaction():
            for held in publishes:
                _route(vhost, held, confirms)
            touched: dict[int, Queue] = {}
            for settlement in settlements:
                touched.update((id(q), q) for q in settlement.apply())
        if settlements:
            after_replicated(answer.dequeues_replicated, tuple(touched.values()))
        answer.arm()


def _route(vhost: VirtualHost, held: TxPublish, confirms: PublisherConfirms) -> None:
    """Route one held publish with a confirm handle of the commit's."""
    message = held.message
    handle = confirms.publish(message)
    if held.exchange.name not in vhost.exchanges:  # deleted while the transaction held it
        routed, rejected = False, 0
    else:
        result = vhost.publish(held.exchange, message)
        routed, rejected = bool(result.routed), result.rejected
    if not routed and held.unroutable is not None:
        held.unroutable()
    handle.release(ok=rejected == 0)


def _answered() -> None:
    """An answered commit's callback: nothing more."""


class _Answer:
    """A commit's answer: called once, when it is armed (the commit routed and applied
    everything), its publishes are settled and its dequeues replicated."""

    __slots__ = ("_armed", "_committed", "_dequeues", "_done", "confirms")

    def __init__(self, committed: Callable[[], None], waiting_for_dequeues: bool) -> None:
        self._committed = committed
        self._dequeues = not waiting_for_dequeues
        self._armed = False
        self._done = False
        self.confirms: PublisherConfirms | None = None

    def dequeues_replicated(self) -> None:
        self._dequeues = True
        self.check()

    def arm(self) -> None:
        self._armed = True
        self.check()

    def check(self) -> None:
        confirms = self.confirms
        if (
            self._armed
            and not self._done
            and self._dequeues
            and confirms is not None
            and confirms.outstanding == 0
        ):
            self._done = True
            committed = self._committed
            # Answered once: its confirms (whose on_settled is this check) and the
            # channel's callback let go of, no reference cycle left to the collector
            # (a heap frozen meanwhile would keep the connection for good).
            confirms.close()
            self.confirms = None
            self._committed = _answered
            committed()
