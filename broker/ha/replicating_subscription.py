"""Primary side, sans-I/O: the replicating subscription, one queue's stream to one backup.

ReplicatingSubscription (Qpid's name) is the primary's side of one queue's replication to
one backup.

Created when a backup subscribes to a queue (``qpid.ha-queue:<name>``) with the set of
replication ids it already holds. The reconnect handshake (Qpid's):

- ids the backup holds that the primary no longer has are sent as one dequeue at once;
- ids the backup already holds are not sent again (and their guards are released: the
  backup holds them);
- everything else on the queue (ready or delivered-but-unacknowledged) is sent from the
  front, followed by every new enqueue and dequeue as they happen.

It browses the queue (it is a queue observer, never a consumer: it takes nothing away).
A message consumed on the primary before it was sent is simply skipped. Events are packed
into batches (:mod:`broker.ha.wire`); the shell sends each batch as one AMQP delivery when
the backup has credit and calls :meth:`acknowledged` with the batch's tag when the backup
acks it. Acknowledged ids release the :class:`~broker.ha.queue_guard.QueueGuard`.

Transactions (docs/ha-design.md, "Transactions"): a message of a committed transaction that
this subscription saw enqueued (it came after the subscription's start) is sent after a
``Tx`` event naming the transaction and its total, the number of the transaction's entries
any subscription saw enqueued (``TxMark.seen``, complete once the commit returns: the shell
pumps later, never inside an enqueue). Such a message is sent even when consumed before it
was sent, followed by its dequeue, so the backup receives every message of the total. The
first batch starts with ``TxBase``: the id of the first transaction committed after this
subscription started (omitted while no transaction was ever committed); a transaction with
a smaller id may reach this stream in part, unmarked, or not at all.

Delivery watermark (docs/ha-design.md, "Redelivered after a fail-over"): with a guard, the
subscription sends its queue's :class:`~broker.ha.delivery_watermark.DeliveryWatermark`
announcement (a ``Watermark`` event at the start of the next batch) whenever it rises, and
reports it acknowledged when the backup acknowledges that batch: the queue delivers a
message only once every guarded backup has acknowledged a watermark covering it.
:attr:`wake` (the stream's pump request) is called when a new announcement is to be sent.

Once every message up to the guard's first position has been sent, a ``QueueCaughtUp`` event
follows; when the backup acknowledges that batch the subscription is :attr:`ready` (the
backup is caught up on this queue).

THREAD UNSAFE: the primary's event loop owns it. It calls the guard, not the reverse.
"""

from __future__ import annotations

import itertools
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Callable, Sequence
from operator import attrgetter

from broker.core.message import Entry, TxMark
from broker.core.queue import Queue
from broker.core.queue_contracts import ObserverRole
from broker.ha.config_guard import NEXT_STREAM, ReplyHandle
from broker.ha.delivery_watermark import DeliveryWatermark
from broker.ha.id_set import IdSet
from broker.ha.queue_guard import QueueGuard
from broker.ha.wire import Dequeue, EnqueuePacker, QueueCaughtUp, StreamEvent, encode_batch
from broker.ha.wire_writers import pack_enqueues

_position = attrgetter("position")

#: Subscription keys: a later subscription (of any queue, any backup) has a greater key.
_keys = itertools.count(1)


class ReplicatingSubscription:
    """Streams one queue to one backup (see the module docstring)."""

    def __init__(
        self,
        queue: Queue,
        guard: QueueGuard | None,
        backup_ids: IdSet,
        *,
        max_batch_bytes: int = 64 * 1024,
        max_batch_events: int = 256,
        wire_format: int = 1,
    ) -> None:
        self.queue = queue
        self.guard = guard
        #: The link's replication format (broker.ha.link_format): formats 1 and 2 write the
        #: same batches; a format that writes them differently branches on it in next_batch.
        self.wire_format = wire_format
        #: Greater than every earlier subscription's (the guard's removal holds use it).
        self.key = next(_keys)
        self.max_batch_bytes = max_batch_bytes
        self.max_batch_events = max_batch_events
        snapshot = queue.snapshot()
        self._backup_had = backup_ids
        if not backup_ids:
            # A new backup (the usual catch-up): everything is to send, nothing to dequeue.
            self._pending_dequeues = IdSet()
            self._backlog: deque[Entry] = deque(snapshot)
        else:
            # By position, ascending: halved and bisected, never walked in Python (a
            # restarted backup's 50,000-message queues made 58 ms steps of the new
            # primary's loop at load 16, soak46).
            primary_ids = IdSet.of_sorted(snapshot, _position)
            self._pending_dequeues = backup_ids.difference(primary_ids)
            self._backlog = deque()
            # Range by range of what the backup holds (a restarted backup: one or a few):
            # what lies between them is to send, what lies in them it holds already.
            first_guarded = guard.first_guarded if guard is not None else 0
            send = self._backlog.extend
            at = 0
            for first, last in backup_ids.ranges():
                lo = bisect_left(snapshot, first, at, key=_position)
                hi = bisect_right(snapshot, last, lo, key=_position)
                send(snapshot[at:lo])
                if guard is not None:  # the backup holds them already: safe to confirm
                    held = bisect_left(snapshot, first_guarded, lo, hi, key=_position)
                    guard.acknowledged_all(map(_position, snapshot[held:hi]))
                at = hi
            send(snapshot[at:])
        self._dequeued_unsent: set[int] = set()
        # Entries after this position were seen enqueued (a transaction's are sent marked).
        self._live_after = queue.last_position
        self._tx_base = TxMark.next_id()
        self._tx_base_sent = self._tx_base == 1  # no transaction yet: nothing to say
        self._packer = EnqueuePacker()
        self._last_sent = 0
        self._unacked: dict[int, list[int]] = {}  # in tag order: the oldest first
        self._next_tag = 1
        self._dequeue_tag = 0  # the last batch that carried a Dequeue
        # Caught up once everything before the guard is on the backup.
        self.ready_position = (guard.first_guarded - 1) if guard else queue.last_position
        self._ready_tag: int | None = None
        self.ready = False
        self.sent_total = 0
        self.skipped_total = 0
        self.closed = False
        #: The queue's delivery watermark (with a guard): announcements to send.
        self._gate = DeliveryWatermark.of(queue) if guard is not None else None
        self._watermark_sent = 0
        self._watermarks: dict[int, int] = {}  # batch tag -> watermark it carried
        #: Called when there is a new announcement to send (the stream asks for a pump).
        self.wake: Callable[[], None] | None = None
        #: Called when work comes (an enqueue or a dequeue of the queue), once until
        #: :meth:`work_taken`: the stream's pump request (None: nobody to tell). The
        #: stream hears of the queue's work here rather than as an observer of its own:
        #: one call a message and backup fewer.
        self.on_work: Callable[[], None] | None = None
        self._work_told = False
        if self._gate is not None:
            self._gate.listeners.append(self._announced)
        queue.observe(self, ObserverRole.REPLICATION)

    def _announced(self) -> None:
        if self.wake is not None:
            self.wake()

    # -- queue observer ----------------------------------------------------------------
    def enqueued(self, queue: Queue, entry: Entry) -> None:
        if not self._work_told and self.on_work is not None:
            self._work_told = True
            self.on_work()
        if self.closed:  # stopped, not yet out of the queue's observers
            return
        self._backlog.append(entry)
        tx = entry.message.tx
        if tx is not None:
            tx.seen.add((queue.name, entry.position))

    def enqueued_all(self, queue: Queue, entries: Sequence[Entry]) -> None:
        for entry in entries:  # (each tells on_work as it needs)
            self.enqueued(queue, entry)

    def dequeued(self, queue: Queue, entry: Entry) -> None:
        if not self._work_told and self.on_work is not None:
            self._work_told = True
            self.on_work()
        if self.closed:
            return
        position = entry.position
        if position <= self._last_sent or position in self._backup_had:
            self._pending_dequeues.add(position)  # the backup has it (or will): tell it
        else:
            self._dequeued_unsent.add(position)  # still in the backlog: never send it

    def dequeued_all(self, queue: Queue, entries: Sequence[Entry]) -> None:
        if not self._work_told and self.on_work is not None:
            self._work_told = True
            self.on_work()
        if self.closed:
            return
        last_sent, backup_had = self._last_sent, self._backup_had
        tell_range, skip = self._pending_dequeues.add_range, self._dequeued_unsent.add
        # the positions to tell in runs of consecutive ones, a range each (a multiple
        # acknowledgement's run is one: one call where there was one an entry)
        first = last = -2
        for entry in entries:
            position = entry.position
            if position <= last_sent or position in backup_had:
                if position == last + 1:
                    last = position
                    continue
                if first >= 0:
                    tell_range(first, last)
                first = last = position
            else:
                skip(position)
        if first >= 0:
            tell_range(first, last)

    # -- stream ------------------------------------------------------------------------
    def work_taken(self) -> None:
        """The stream is pumping: the next enqueue or dequeue calls :attr:`on_work` again."""
        self._work_told = False

    @property
    def backlog(self) -> int:
        """Messages still to send (some may turn out consumed and be skipped)."""
        return len(self._backlog)

    @property
    def has_work(self) -> bool:
        return bool(
            self._backlog
            or len(self._pending_dequeues)
            or (self._ready_tag is None and not self.ready and self._caught_up())
            or (self._gate is not None and self._gate.announced > self._watermark_sent)
        )

    def _caught_up(self) -> bool:
        backlog = self._backlog
        return not backlog or backlog[0].position > self.ready_position

    def next_batch(self) -> tuple[int, bytes] | None:
        """The next batch to send as (tag, body), or None when there is nothing to send."""
        if self.closed:
            return None
        # Enqueues are encoded straight from the entries (no Enqueue objects: the hot path of
        # catch-up), then the Dequeue and QueueCaughtUp events, if any, as encode_batch would.
        parts: list[bytes] = [EnqueuePacker.VERSION_BYTE]
        add = parts.extend
        pack = self._packer.pack
        ids: list[int] = []
        budget = self.max_batch_bytes
        size = 0
        max_events = self.max_batch_events
        backlog = self._backlog
        skipped = self._dequeued_unsent
        popleft = backlog.popleft
        live_after = self._live_after
        marked = not self._tx_base_sent
        if marked:
            parts.append(EnqueuePacker.tx_base(self._tx_base))
        watermark = 0
        gate = self._gate
        if gate is not None and gate.announced > self._watermark_sent:
            watermark = gate.announced
            parts.append(EnqueuePacker.watermark(watermark))
        # The open run of a transaction's messages: its mark, the index of its Tx part and
        # len(ids) at its start. Checked once per message: a message's mark is run_tx
        # (None for a message outside any transaction) unless a run starts or ends.
        run_tx: TxMark | None = None
        run_part = run_start = 0
        native = pack_enqueues if not skipped else None
        while backlog and len(ids) < max_events and size < budget:
            if native is not None and run_tx is None:
                # The plain messages at the head (no transaction, the packer's route) packed
                # natively, as pack packs them; the first other one is taken here.
                size = native(self._packer, backlog, parts, ids, size, budget, max_events)
                if not backlog or len(ids) >= max_events or size >= budget:
                    break
            entry = popleft()
            position = entry.position
            message = entry.message
            if skipped and position in skipped:
                skipped.discard(position)
                if message.tx is None or position <= live_after:
                    self.skipped_total += 1
                    continue
                # Consumed before it was sent, but counted in its transaction's total: send
                # it, then its dequeue (in this batch, after the enqueues).
                self._pending_dequeues.add(position)
            tx = message.tx
            if tx is not run_tx:
                if run_tx is not None:
                    parts[run_part] = EnqueuePacker.tx(
                        run_tx.id, len(run_tx.seen), len(ids) - run_start
                    )
                    run_tx = None
                if tx is not None and position > live_after:
                    run_tx = tx
                    run_part = len(parts)
                    run_start = len(ids)
                    parts.append(b"")
                    size += EnqueuePacker.TX_SIZE
                    marked = True
            head, properties, body, event_size = pack(
                position,
                message.exchange,
                message.routing_key,
                message.properties_raw,
                message.body,
            )
            add((head, properties, body))
            size += event_size
            ids.append(position)
        if run_tx is not None:
            parts[run_part] = EnqueuePacker.tx(run_tx.id, len(run_tx.seen), len(ids) - run_start)
        if ids:
            self._last_sent = ids[-1]
        events: list[StreamEvent] = []
        tag = self._next_tag
        if len(self._pending_dequeues):
            events.append(Dequeue(self._pending_dequeues))
            self._pending_dequeues = IdSet()
            self._dequeue_tag = tag
        if self._ready_tag is None and not self.ready and self._caught_up():
            events.append(QueueCaughtUp())
            self._ready_tag = tag
        if not events and not ids and not watermark:
            return None
        if marked:
            parts[0] = EnqueuePacker.VERSION_TX_BYTE
            self._tx_base_sent = True
        if events:
            parts.append(encode_batch(events)[1:])  # without its version byte
        self._next_tag = tag + 1
        self._unacked[tag] = ids
        if watermark:
            self._watermark_sent = watermark
            self._watermarks[tag] = watermark
        self.sent_total += len(ids)
        return tag, b"".join(parts)

    def acknowledged(self, tag: int, multiple: bool = False) -> None:
        """The backup acknowledged batch ``tag`` (and every earlier one with ``multiple``)."""
        tags = [t for t in self._unacked if t <= tag] if multiple else [tag]
        guard = self.guard
        for t in tags:
            ids = self._unacked.pop(t, None)
            if ids is None:
                continue
            watermark = self._watermarks.pop(t, 0)
            if watermark and self._gate is not None:
                self._gate.acknowledged(guard, watermark)
            # A guard covers only positions from its first_guarded on: a batch of the
            # backlog that was queued before the backup connected has nothing to release.
            if guard is not None and ids and ids[-1] >= guard.first_guarded:
                guard.acknowledged_all(ids)
            if t == self._ready_tag:
                self.ready = True
        if guard is not None and guard.removals:  # purge-ok and friends wait for this backup
            guard.removals_acknowledged(self.key, self.acked_through)

    def hold_removal(self, handle: ReplyHandle) -> None:
        """Hold ``handle`` (purge-ok, the commit-ok of acknowledgements) on the guard until
        the backup applied every dequeue seen so far (at once when it has)."""
        guard = self.guard
        if guard is None:
            return
        if self.closed:  # the next subscription's handshake dequeues what the backup lacks
            guard.hold_removal(handle, self.key, NEXT_STREAM)
            return
        tag = self.removal_tag()
        if tag is not None:
            guard.hold_removal(handle, self.key, tag)

    def removal_tag(self) -> int | None:
        """The batch whose acknowledgement means the backup applied every dequeue seen so
        far (purge-ok waits for it): the next one when dequeues wait to be sent, the last
        one that carried any while it is unacknowledged; None when nothing is owed."""
        if len(self._pending_dequeues):
            return self._next_tag
        if self._dequeue_tag in self._unacked:
            return self._dequeue_tag
        return None

    @property
    def acked_through(self) -> int:
        """Every batch through this tag is acknowledged (0: none yet)."""
        for oldest in self._unacked:
            return oldest - 1
        return self._next_tag - 1

    @property
    def last_sent(self) -> int:
        """The replication id of the last message sent to the backup."""
        return self._last_sent

    @property
    def unacknowledged_batches(self) -> int:
        return len(self._unacked)

    def stop(self) -> None:
        """Stop at once (its stream closed): what the queue tells it from now on has no
        effect, and it sends nothing; :meth:`close` then leaves the queue."""
        self.closed = True

    def close(self) -> None:
        """Stop replicating (the backup went away) and leave the queue; the guard is
        cancelled by its owner."""
        self.closed = True
        self.queue.unobserve(self)
        self._backlog.clear()
        self._unacked.clear()
        self._watermarks.clear()
        if self._gate is not None and self._announced in self._gate.listeners:
            self._gate.listeners.remove(self._announced)
