"""Backup side, sans-I/O: the queue replicator, applying one queue's stream to the backup's copy.

QueueReplicator (Qpid's name) is the backup's side of one queue's replication.

It owns the backup's copy of a replicated queue. On (re)connect it reports the replication
ids it holds (:meth:`ids`, sent in the subscribe request); then it applies the batches the
primary's :class:`~broker.ha.replicating_subscription.ReplicatingSubscription` sends:
an ``Enqueue`` adds the message at its replication id (ids are the queue positions on every
broker), a ``Dequeue`` removes ids, ``QueueCaughtUp`` marks this queue caught up. The backup
acknowledges a batch once every event in it is applied (:class:`BatchAcks`), so the primary
may then release the publisher confirms it held.

A transaction's messages (after a ``Tx`` event) go to the link's
:class:`~broker.ha.tx_staging.TxStaging`, not to the queue, until the transaction is whole;
while this queue has staged messages, its later events wait behind them in :attr:`pending`
(``TxBase`` and ``QueueCaughtUp`` act at once). Without a staging (``ha-queue-replication``, one
queue) a transaction's messages are applied as they come.

A backup never delivers to clients, never expires or dead-letters on its own: those happen
on the primary and arrive as dequeues. But the primary may have delivered a message it
replicated, unacknowledged when it died: a ``Watermark`` event says up to which id it may
deliver (it waits for this backup's acknowledgement before delivering beyond), and raises
the queue's :attr:`~broker.core.queue.Queue.redelivered_through` to it, so a promoted backup
sends those messages with ``redelivered`` set and the rest (never delivered) without
(:mod:`broker.ha.delivery_watermark`). Messages the new primary enqueues are numbered above
(its era).

:class:`CatchUpGc` keeps a catch-up's messages out of the cyclic garbage collector's scans;
:class:`BatchAcks` decides when an applied batch may be acknowledged: not while any of its
events is staged or buffered behind a staged transaction, and, on a backup with a store,
once what applying it wrote is durable; :class:`AckCoalescer` acknowledges batches several
at a time.

THREAD UNSAFE: the backup's event loop owns it.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import sys
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from broker.core.message import Message
from broker.core.properties import scan
from broker.core.queue import Queue
from broker.ha.id_set import IdSet
from broker.ha.wire import Dequeue, Enqueue, QueueCaughtUp, StreamEvent, Tx, TxBase, Watermark

if TYPE_CHECKING:
    from broker.ha.tx_staging import Pending, TxStaging


#: Batches of live traffic heard by every replicator of the process, counted (no clock).
_traffic = itertools.count(1)


def catch_up_order(replicators: Mapping[str, QueueReplicator]) -> list[str]:
    """The keys of ``replicators`` in the order a new link subscribes them: the queues with
    the most recent traffic first, then those never heard, in the order they were made.

    A link to a new primary catches up on every queue again (the reconnect handshake), a
    few dozen streams at a time; a queue's confirms wait for this backup, when it is in
    the in-sync set, until its stream is open. In the order the queues were made, the
    queue a client declared last (its traffic's) came after 10,000 idle ones: 30 s of
    held confirms in the scale soak (docs/ha-design.md, "Who a confirm waits for"). The
    queues busy before the fail-over are those clients come back to."""
    return sorted(replicators, key=lambda key: -replicators[key].traffic)


class QueueReplicator:
    """Applies one queue's replication stream to the local copy."""

    def __init__(self, queue: Queue, staging: TxStaging | None = None) -> None:
        self.queue = queue
        self.staging = staging
        #: Staged messages and the events behind them (see :mod:`broker.ha.tx_staging`).
        self.pending: deque[Pending] = deque()
        #: Events ever put on :attr:`pending`: those up to ``pending_total - len(pending)``
        #: are applied (:class:`BatchAcks` holds a batch's acknowledgement until then).
        self.pending_total = 0
        self.caught_up = False
        self.enqueued_total = 0
        self.dequeued_total = 0
        #: When this queue last had traffic, in batches of every replicator of the process
        #: (:meth:`heard`; 0: none heard): a new link's catch-up subscribes the queues
        #: with the most recent traffic first (:func:`catch_up_order`).
        self.traffic = 0

    def heard(self) -> None:
        """A batch arrived on a queue caught up on its link: live traffic (a publish, a
        consumer's acknowledgement or delivery on the primary), not its catch-up."""
        self.traffic = next(_traffic)

    def ids(self) -> IdSet:
        """Replication ids held locally (the reconnect handshake's ``qpid.ha-ids``)."""
        positions = [entry.position for entry in self.queue.snapshot()]  # ascending
        try:
            return IdSet.from_ascending(positions)
        except ValueError:  # the same position twice: not expected, but not fatal
            return IdSet(positions)

    def apply(self, events: list[StreamEvent]) -> None:
        """Apply one batch, in order (a transaction's messages staged, and this queue's
        events behind them). Raises ValueError for a malformed message or transaction."""
        if self.pending:
            self._apply_transactional(events, 0)
            return
        index = self._apply_now(events)
        if index >= 0:
            self._apply_transactional(events, index)

    def _apply_now(self, events: Sequence[StreamEvent]) -> int:
        """Apply ``events`` to the queue up to the first ``Tx`` or ``TxBase``; its index,
        or -1 when there is none."""
        queue = self.queue
        # A run of enqueues goes to the queue at once (Queue.enqueue_replicated), before
        # any other event is applied.
        messages: list[Message] = []
        positions: list[int] = []
        # decode_batch gives a batch's messages of equal properties one bytes object: they
        # are scanned once (ValueError as in Message for a malformed block).
        scanned_raw: bytes | None = None
        scanned = None
        try:
            for index, event in enumerate(events):
                # The hot path of catch-up (about 60 a batch): the exact type first.
                if type(event) is Enqueue or isinstance(event, Enqueue):
                    raw = event.properties
                    if raw is not scanned_raw:
                        scanned = scan(raw)
                        scanned_raw = raw
                    messages.append(
                        Message(event.exchange, event.routing_key, raw, event.body, scanned=scanned)
                    )
                    positions.append(event.id)
                    continue
                if messages:
                    run, at = messages, positions
                    messages, positions = [], []
                    self._enqueue_run(run, at)
                if isinstance(event, Dequeue):
                    self.dequeued_total += queue.remove_positions(event.ids, len(event.ids))
                elif isinstance(event, QueueCaughtUp):
                    self.caught_up = True
                elif isinstance(event, Tx | TxBase):
                    return index
                elif isinstance(event, Watermark):
                    self._watermark(event.position)
        finally:  # (a malformed message: those before it are applied, as one at a time)
            if messages:
                self._enqueue_run(messages, positions)
        return -1

    def _enqueue_run(self, messages: list[Message], positions: list[int]) -> None:
        self.queue.enqueue_replicated(messages, positions)
        self.enqueued_total += len(messages)

    def _watermark(self, position: int) -> None:
        """The primary may deliver ids up to ``position``: promoted, this broker sends the
        ones it holds marked redelivered."""
        queue = self.queue
        if position > queue.redelivered_through:
            queue.redelivered_through = position

    def _apply_transactional(self, events: list[StreamEvent], index: int) -> None:
        """The slow path, from ``events[index]``: batches with transactions, or while this
        queue has pending events."""
        staging = self.staging
        end = len(events)
        while index < end:
            event = events[index]
            if isinstance(event, Tx):
                run = [
                    e for e in events[index + 1 : index + 1 + event.count] if isinstance(e, Enqueue)
                ]
                index += 1 + event.count
                if len(run) != event.count:
                    raise ValueError(f"transaction {event.id}: expected {event.count} enqueues")
                if staging is None:
                    self._apply_now(run)
                else:
                    staging.stage(self, event.id, event.total, run)
                continue
            index += 1
            if isinstance(event, TxBase):
                if staging is not None:
                    staging.base(self, event.first)
            elif isinstance(event, QueueCaughtUp):
                self.caught_up = True  # caught up even with messages staged
            elif isinstance(event, Watermark):
                self._watermark(event.position)  # a number: no order to keep
            elif self.pending and staging is not None:
                staging.buffer(self, [event])
            else:
                self._apply_now([event])
        if staging is not None:
            staging.drain()


#: The most memory blocks the whole heap may hold for :class:`CatchUpGc` to unfreeze it at a
#: catch-up's end: every object the collector tracks is one block or more, so the next full
#: collection walks fewer objects than this, about 35 ms of CPU at most (67 ns an object
#: measured on the 2-vCPU machine).
UNFREEZE_MAX = 500_000


def heap_blocks() -> int:
    """The memory blocks the interpreter's allocator holds (``sys.getallocatedblocks``):
    every object the cyclic collector tracks, frozen or not, is one of them or more, so
    this bounds what a full collection walks after ``gc.unfreeze()``. It walks the
    allocator's pools, not the objects: under a millisecond at millions of objects, where
    ``gc.get_freeze_count()`` walks the frozen objects one by one (3 million: 72 ms on a
    quiet machine, 100-144 ms steps on a loaded one, the scale soak's backups)."""
    return sys.getallocatedblocks()


class CatchUpGc:
    """Spares a catching-up backup the cyclic GC's rescans of the messages it piles up.

    A catch-up adds messages (two GC-tracked objects each, a ``Message`` and its ``Entry``)
    far faster than anything else allocates, so CPython's collector runs a full collection
    each time the heap has grown by a quarter, and each one walks every message held so
    far: about 5 us of a 1 KiB message's 16 us of catch-up on the reference machine. The
    link calls :meth:`applied` after each batch it applies while catching up, which moves
    everything alive to the collector's permanent generation (``gc.freeze()``, constant
    time), and :meth:`end` once caught up or when the link goes down, which moves it all
    back (``gc.unfreeze()``, constant time) when that is cheap: from then on the collector
    works as before. Reference counting frees objects meanwhile as always; only reference
    cycles that die during the catch-up wait for its end to be collected.

    Not when the heap holds more than :data:`UNFREEZE_MAX` blocks (:func:`heap_blocks`,
    a bound of the objects the collector tracks, read in constant time per allocator
    pool): the next full collection would walk them all in one step of the loop (10,000
    queues: 230-245 ms of CPU). They stay frozen, as after a store's recovery and after a
    long full collection (``broker.loop_steps``): a reference cycle among them that dies
    later (a closed connection's objects) is not collected, while reference counting frees
    the rest (messages and deleted queues are no cycle) as always. (Counting the frozen
    objects instead, ``gc.get_freeze_count()``, walks them: at 10,000 queues that count
    alone was the step of 100-144 ms at each catch-up's end.)
    """

    def __init__(
        self, unfreeze_max: int | None = None, blocks: Callable[[], int] = heap_blocks
    ) -> None:
        self.active = False
        self.unfreeze_max = UNFREEZE_MAX if unfreeze_max is None else unfreeze_max
        self._blocks = blocks
        #: Catch-ups that ended with the heap left frozen (too big to walk at once).
        self.kept_frozen = 0

    def applied(self) -> None:
        self.active = True
        gc.freeze()

    def end(self) -> None:
        if self.active:
            self.active = False
            if self._blocks() <= self.unfreeze_max:
                gc.unfreeze()
            else:
                self.kept_frozen += 1


class AckCoalescer:
    """Acknowledges a channel's applied batches with ``multiple``, a few at a time.

    Call :meth:`applied` with each batch's delivery tag once the batch is applied, in
    delivery order: so one ack of tag T with ``multiple`` covers only applied batches.
    Every ``every`` batches it acks at once (the primary keeps credit to send more); the
    rest is acked by a flush that ``call_soon`` runs when the event loop next gets control,
    which is when the link has nothing more to read: one ack frame, one write, for up to
    ``every`` batches instead of one each (a write on loopback costs the backup about as
    much as applying 60 messages). ``ack(tag, multiple)`` may raise once the channel is
    closed; the scheduled flush ignores that (the link is going down; the primary re-sends
    what was not acked to the next link, whose handshake skips what the backup holds).
    """

    def __init__(
        self,
        ack: Callable[[int, bool], None],
        call_soon: Callable[[Callable[[], None]], object],
        every: int,
        errors: tuple[type[BaseException], ...] = (),
    ) -> None:
        self._ack = ack
        self._call_soon = call_soon
        self._every = max(1, every)
        self._errors = errors
        self._last = 0
        self._pending = 0
        self._scheduled = False

    def applied(self, tag: int) -> None:
        self._last = tag
        self._pending += 1
        if self._pending >= self._every:
            self.flush()
        elif not self._scheduled:
            self._scheduled = True
            self._call_soon(self._flush_soon)

    def flush(self) -> None:
        if self._pending:
            self._pending = 0
            self._ack(self._last, True)

    def _flush_soon(self) -> None:
        self._scheduled = False
        with contextlib.suppress(*self._errors):
            self.flush()


#: ``after_durable(callback)`` of the backup's store (:class:`~broker.store.journal.Journal`):
#: ``callback(ok)`` once every record appended so far is durable.
AfterDurable = Callable[[Callable[[bool], None]], None]


#: A held batch: its replicator's ``pending_total`` once applied, its ack, its tag.
_Held = deque[tuple[int, Callable[[int], None], int]]


class BatchAcks:
    """When a link's applied batches may be acknowledged (issue 10's promise: a confirm goes
    out only once every guarded backup holds the message, and for a persistent message on a
    backup with a store, has it on its disk).

    Call :meth:`applied` after each batch's :meth:`QueueReplicator.apply` returned, in
    delivery order per channel. A batch whose events are all applied is acknowledged at once
    (``ack(tag)``), or, when ``after_durable`` is given (the backup's store) and it wrote
    to the store or an acknowledgement is already waiting for the disk, once what is
    appended so far is durable. A batch with events still on its replicator's
    :attr:`~QueueReplicator.pending` list (a transaction's staged messages, or events
    buffered behind one) is *held*, and every later batch of that channel behind it, until
    the staging applied them (in a later batch of any of the link's queues, or when a
    subscription fails): :meth:`release` (called by :meth:`applied`) then acknowledges them
    once durable. Held batches go with their link (a new link's handshake skips what the
    backup holds; what it lacks is sent again). The store's callbacks come in
    order, so each channel's acknowledgements keep their order (one ``multiple`` ack covers
    only applied and durable batches). A transaction's staged part is held too: its
    commit-ok then implies it is applied, and durable, on every guarded backup.

    No deadlock with the primary's credit: the oldest staged transaction's parts come, on
    each queue, behind older (applicable) events only, so those batches are acknowledged and
    the parts are sent.

    ``failed(reason)``: the store cannot write; nothing more is acknowledged by that callback.
    """

    def __init__(self, after_durable: AfterDurable | None, failed: Callable[[str], None]) -> None:
        self._after_durable = after_durable
        self._failed = failed
        self._held: dict[QueueReplicator, _Held] = {}
        #: Acknowledgements waiting for the disk (later ones wait behind them, in order).
        self.durable_waiting = 0

    @property
    def held(self) -> int:
        """Batches held behind staged events."""
        return sum(len(batches) for batches in self._held.values())

    def applied(
        self, replicator: QueueReplicator, ack: Callable[[int], None], tag: int, wrote: bool
    ) -> None:
        """``replicator`` applied the batch ``tag`` (``wrote``: it appended to the store)."""
        held = self._held.get(replicator)
        if held is not None or replicator.pending:
            if held is None:
                held = self._held[replicator] = deque()
            held.append((replicator.pending_total, ack, tag))
        else:
            self._send(replicator, ack, tag, wrote)
        if self._held:
            self.release()

    def release(self) -> None:
        """Acknowledge the held batches whose events are all applied now."""
        for replicator, batches in list(self._held.items()):
            applied = replicator.pending_total - len(replicator.pending)
            while batches and batches[0][0] <= applied:
                _, ack, tag = batches.popleft()
                self._send(replicator, ack, tag, True)  # the staging's apply may have written
            if not batches:
                del self._held[replicator]

    def forget(self, replicator: QueueReplicator) -> None:
        """``replicator``'s queue or channel is gone: drop its held acknowledgements."""
        self._held.pop(replicator, None)

    def _send(
        self, replicator: QueueReplicator, ack: Callable[[int], None], tag: int, wrote: bool
    ) -> None:
        after_durable = self._after_durable
        if after_durable is None or not (wrote or self.durable_waiting):
            ack(tag)
            return
        self.durable_waiting += 1
        name = replicator.queue.name

        def durable(ok: bool) -> None:
            self.durable_waiting -= 1
            if not ok:
                self._failed(f"queue stream {name!r}: the store cannot write")
                return
            ack(tag)

        after_durable(durable)
