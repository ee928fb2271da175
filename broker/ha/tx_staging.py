"""Backup side, sans-I/O: transactions staged until whole, shared by a link's queue replicators.

A transaction committed on the primary may enqueue on several queues, and each queue
replicates over its own stream, so its parts reach a backup at different times. So that a
promoted backup holds all of a transaction or none of it (docs/ha-design.md,
"Transactions"), :class:`TxStaging` holds the messages that arrive after a ``Tx`` event
(staged: not in the queue) until all ``total`` of them have arrived across the link's
queues, then applies them together: in one call, and, on a backup with a store, in one
store transaction (one TX record on its disk, all or none after a crash, as on the primary).

Staging rule
------------
* Each :class:`~broker.ha.queue_replicator.QueueReplicator` keeps a *pending* list: the
  staged enqueues of its queue, and every later event of that queue (buffered behind them,
  so the queue keeps the primary's order). A queue without pending events applies as before.
* A transaction is *whole* when ``total`` of its messages arrived. It is applied when it is
  whole and at the head of the pending list of every queue it staged on: then each of those
  queues applies its pending events in order up to the transaction's last message, in one
  call (nothing runs in between). Queues apply their buffered events up to the next staged
  transaction. A Dequeue of a staged id is buffered like any event after it, so it removes
  the message right after it is applied: the same as removing it from the staging.
* A transaction that can no longer arrive whole is *released*: its staged messages are
  applied as they are, in order, and its later ones directly. That is when a stream's
  ``TxBase`` is above its id (that queue's subscription started after the commit: its part
  may come unmarked or not at all), or when a queue of the link goes away (deleted, or its
  subscription failed: its part never comes).
* :meth:`abandon` (the link went down, or the broker is promoted) discards what is staged
  of every transaction not yet whole (its messages were never confirmed: the primary's
  tx.commit-ok waits until every guarded backup acknowledged all of them), applies what
  each queue had buffered, in order, and returns what it discarded for the log
  (``ha_tx_discarded``). After a link went down, the next link's reconnect handshake sends
  again what the backup lacks.

A batch is acknowledged only once every event in it is applied (and durable on a backup
with a store): not while staged or buffered (:class:`~broker.ha.queue_replicator.BatchAcks`,
which reads :attr:`~broker.ha.queue_replicator.QueueReplicator.pending_total`, counted
here). So a confirm of a message waiting behind a staged transaction, and the commit-ok
of a transaction, imply it is in the queue (and on the disk) of every guarded backup.

THREAD UNSAFE: the backup's event loop owns it. Replicators call it; it calls their
``_apply_now`` and reads their ``pending`` list, and knows nothing else of them: a
replicator is a :class:`StagedReplicator` here (this module does not import theirs).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Protocol

from broker.core.queue import Queue
from broker.ha.wire import Enqueue, StreamEvent

__all__ = ["Discarded", "Pending", "StoreTransaction", "TxStaging"]

#: The store's transaction (:meth:`broker.store.journal.Journal.transaction`): the records
#: appended inside go to the disk as one TX record, all or none.
StoreTransaction = Callable[[], AbstractContextManager[None]]


#: An item of a replicator's pending list: (transaction id, its enqueue) for a staged
#: message, (None, event) for a buffered event.
Pending = tuple[int | None, StreamEvent]


class StagedReplicator(Protocol):
    """A :class:`~broker.ha.queue_replicator.QueueReplicator`, as the staging sees it."""

    #: Staged messages and the events behind them, in the primary's order.
    pending: deque[Pending]
    #: Events ever put on ``pending`` (the batch acknowledgements count applied ones).
    pending_total: int

    @property
    def queue(self) -> Queue:
        """The queue it replicates to."""
        ...

    def _apply_now(self, events: Sequence[StreamEvent]) -> int:
        """Apply ``events`` to the queue up to the first ``Tx`` or ``TxBase``; its index,
        or -1 when there is none."""
        ...


@dataclass
class _Tx:
    id: int
    total: int
    arrived: int = 0
    #: Messages staged per queue and not yet applied.
    left: dict[StagedReplicator, int] = field(default_factory=dict)
    released: bool = False

    @property
    def whole(self) -> bool:
        return self.arrived >= self.total


@dataclass(frozen=True)
class Discarded:
    """A transaction :meth:`TxStaging.abandon` dropped: what ``ha_tx_discarded`` logs."""

    tx: int
    total: int
    arrived: int
    #: Queue name -> messages of it that were staged and are now dropped.
    queues: dict[str, int]

    @property
    def messages(self) -> int:
        return sum(self.queues.values())


class TxStaging:
    """Transactions staged across one link's queue replicators (see the module docstring)."""

    def __init__(self, store_transaction: StoreTransaction | None = None) -> None:
        #: The backup's store, when it has one: a transaction applied whole is written in
        #: one store transaction (one TX record), so a crash during its write leaves none
        #: of it in the store, as on the primary (docs/store.md, "The promise").
        self.store_transaction = store_transaction
        self._txs: dict[int, _Tx] = {}
        #: Per replicator, its stream's TxBase (transactions from it come whole).
        self._bases: dict[StagedReplicator, int] = {}
        #: Replicators with a non-empty pending list.
        self._waiting: set[StagedReplicator] = set()
        self.applied_total = 0  # transactions applied whole
        self.released_total = 0
        self.discarded_total = 0

    @property
    def staged(self) -> int:
        """Transactions staged and not yet applied."""
        return sum(1 for tx in self._txs.values() if not tx.released)

    # -- called by the queue replicators ------------------------------------------------
    def stage(
        self, replicator: StagedReplicator, tx_id: int, total: int, run: list[Enqueue]
    ) -> None:
        """``run``: messages of transaction ``tx_id`` (of ``total``) on ``replicator``'s queue."""
        tx = self._txs.get(tx_id)
        if tx is None:
            tx = self._txs[tx_id] = _Tx(tx_id, total)
            base = max(self._bases.values(), default=0)
            if tx_id < base:
                self._release(tx)
        elif tx.total != total:
            raise ValueError(f"transaction {tx_id}: total {total}, earlier {tx.total}")
        tx.arrived += len(run)
        if tx.arrived > tx.total:
            raise ValueError(f"transaction {tx_id}: {tx.arrived} messages of {tx.total}")
        pending = replicator.pending
        if tx.released and not pending:
            replicator._apply_now(run)
            return
        if not tx.released:
            tx.left[replicator] = tx.left.get(replicator, 0) + len(run)
        pending.extend((tx_id, event) for event in run)
        replicator.pending_total += len(run)
        self._waiting.add(replicator)

    def base(self, replicator: StagedReplicator, first: int) -> None:
        """``replicator``'s stream started before transaction ``first``: release the older."""
        self._bases[replicator] = first
        for tx in list(self._txs.values()):
            if tx.id < first and not tx.released:
                self._release(tx)

    def buffer(self, replicator: StagedReplicator, events: list[StreamEvent]) -> None:
        """Events of a queue that has pending ones: applied after them, in order."""
        replicator.pending.extend((None, event) for event in events)
        replicator.pending_total += len(events)
        self._waiting.add(replicator)

    def drain(self) -> None:
        """Apply what can be applied: whole transactions at the head of all their queues,
        released ones, and events buffered before the next staged transaction."""
        progress = True
        while progress:
            progress = False
            for replicator in list(self._waiting):
                if self._advance(replicator):
                    progress = True

    def queue_gone(self, replicator: StagedReplicator) -> None:
        """``replicator``'s queue is gone (deleted, or its subscription failed): its pending
        events go with it, and a transaction that is not whole may miss a part there."""
        self._bases.pop(replicator, None)
        self._waiting.discard(replicator)
        replicator.pending.clear()  # dropped with the queue
        for tx in list(self._txs.values()):
            tx.left.pop(replicator, None)
            if not tx.whole and not tx.released:
                self._release(tx)
        self.drain()

    def abandon(self) -> list[Discarded]:
        """The link is gone: drop every transaction not yet whole, apply what is buffered."""
        discarded: list[Discarded] = []
        dropped: set[int] = set()
        for tx in self._txs.values():
            if not tx.released and not tx.whole:
                dropped.add(tx.id)
                discarded.append(
                    Discarded(
                        tx.id,
                        tx.total,
                        tx.arrived,
                        {r.queue.name: n for r, n in tx.left.items() if n},
                    )
                )
        # One store transaction: the whole transactions blocked behind a dropped one are
        # written all or none, as when applied on time (none of it was acknowledged yet).
        begin = self.store_transaction
        with nullcontext() if begin is None else begin():
            for replicator in list(self._waiting):
                pending = replicator.pending
                for tx_id, event in pending:
                    if tx_id is None or tx_id not in dropped:
                        replicator._apply_now([event])
                pending.clear()
        self.discarded_total += len(discarded)
        self._txs.clear()
        self._bases.clear()
        self._waiting.clear()
        return discarded

    # -- internals ------------------------------------------------------------------------
    def _release(self, tx: _Tx) -> None:
        tx.released = True
        tx.left.clear()
        self.released_total += 1

    def _advance(self, replicator: StagedReplicator) -> bool:
        """Apply the head of ``replicator``'s pending list as far as possible."""
        pending = replicator.pending
        progress = False
        while pending:
            tx_id, event = pending[0]
            if tx_id is not None:
                tx = self._txs.get(tx_id)
                if tx is not None and not tx.released:
                    if not (tx.whole and all(self._at_head(r, tx_id) for r in tx.left)):
                        break
                    self._apply_tx(tx)
                    progress = True
                    continue
            pending.popleft()
            replicator._apply_now([event])
            progress = True
        if not pending:
            self._waiting.discard(replicator)
        return progress

    def _at_head(self, replicator: StagedReplicator, tx_id: int) -> bool:
        """Whether ``tx_id`` is next on ``replicator`` once its buffered events before it
        (and released transactions' messages) are applied, which this applies."""
        pending = replicator.pending
        while pending:
            head_tx, event = pending[0]
            if head_tx == tx_id:
                return True
            if head_tx is not None:
                tx = self._txs.get(head_tx)
                if tx is not None and not tx.released:
                    return False
            pending.popleft()
            replicator._apply_now([event])
        self._waiting.discard(replicator)
        return False

    def _apply_tx(self, tx: _Tx) -> None:
        """Apply a whole transaction on every queue it staged on, in one store transaction
        (the buffered events applied with it are in it too)."""
        begin = self.store_transaction
        with nullcontext() if begin is None else begin():
            for replicator, left in tx.left.items():
                pending = replicator.pending
                run: list[StreamEvent] = []
                while left:
                    head_tx, event = pending.popleft()
                    run.append(event)
                    if head_tx == tx.id:
                        left -= 1
                replicator._apply_now(run)
                if not pending:
                    self._waiting.discard(replicator)
        del self._txs[tx.id]
        self.applied_total += 1
