"""Runs told to a queue's observers at once leave them as one at a time does (hypothesis):

- dequeues (``Queue.settle_all``: a multiple acknowledgement's on one queue; a backup's
  ``remove_positions`` of ranges: ``Queue.removed_all``): the store's records and ledger,
  each guard's held confirms and its backup's tally, each replicating subscription's
  dequeues to send and to skip, the confirms settled;
- a backup's replicated enqueues (``Queue.enqueue_replicated``: a batch's run, positions
  ahead, behind or repeated, messages expired on arrival): the queue's messages, counts and
  last position, the store's records and ledger.

Sans I/O: the journal is not started, its tail holds what was appended."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import commands

from broker.core.confirms import ConfirmHandle, PublisherConfirms
from broker.core.message import Entry, Message
from broker.core.properties import encode
from broker.core.queue import Queue
from broker.core.vhost import VirtualHost
from broker.ha.id_set import IdSet
from broker.ha.queue_guard import HeldTally, QueueGuard
from broker.ha.replicating_subscription import ReplicatingSubscription
from broker.store.journal import Journal
from broker.store.message_store import MessageStore
from broker.store.records import BadRecord, Kind, iter_records

PERSISTENT = bytes.fromhex("1000") + b"\x02"  # property flags: delivery-mode only; mode 2


class Primary:
    """A durable queue on a store, guarded and replicated for two backups. Each backup
    acknowledged a first batch (its delivery watermark: what may be delivered), then
    ``messages`` more were published; the first backup was sent ``sent`` batches of them and
    acknowledged the messages at ``acked`` (the second none: its guard holds them all)."""

    def __init__(self, directory: Path, messages: int, sent: int, acked: list[int]) -> None:
        self.vhost = vhost = VirtualHost()
        self.journal = Journal(directory)
        MessageStore(self.journal, vhost).recover_into(self.journal.recover())
        self.queue = vhost.declare_queue("q", durable=True)
        self.tally = HeldTally()
        self.guards = [QueueGuard(self.queue, name, self.tally) for name in ("b1", "b2")]
        self.subscriptions = [
            ReplicatingSubscription(self.queue, guard, IdSet(), max_batch_events=4)
            for guard in self.guards
        ]
        for subscription in self.subscriptions:  # the watermark, acknowledged
            batch = subscription.next_batch()
            assert batch is not None
            subscription.acknowledged(batch[0])
        confirms = PublisherConfirms()
        self.handles: list[ConfirmHandle] = []
        for i in range(messages):
            handle = confirms.publish()
            vhost.publish(
                vhost.exchange(""), Message("", "q", PERSISTENT, b"%d" % i, confirm=handle)
            )
            handle.release()  # the routing hold
            self.handles.append(handle)
        for _ in range(sent):  # batches sent to the first backup (4 messages each)
            self.subscriptions[0].next_batch()
        self.guards[0].acknowledged_all(acked)  # what that backup acknowledged
        self.mark = sum(len(data) for _, data in self.journal.tail.pending)

    def state(self) -> tuple[object, ...]:
        ledger = self.journal.ledger
        return (
            b"".join(data for _, data in self.journal.tail.pending)[self.mark :],  # (its queue
            # record has the queue's own uuid)
            self.journal.appended,
            {n: (use.records, use.live) for n, use in ledger.segments.items()},
            ledger.live_messages,
            [guard.held_positions() for guard in self.guards],
            self.tally.count,
            [(sorted(s._pending_dequeues), sorted(s._dequeued_unsent)) for s in self.subscriptions],
            [handle.settled for handle in self.handles],
            (self.queue.message_count, self.queue.unacked, self.queue.acked_total),
        )


runs = st.integers(1, 12).flatmap(
    lambda n: st.tuples(
        st.just(n),
        st.integers(0, 3),  # batches sent
        st.lists(st.integers(1, n), unique=True),  # positions the first backup acknowledged
        st.integers(0, n),  # how many are taken
        st.lists(st.integers(0, n - 1), unique=True),  # which of those are acknowledged
    )
)


@settings(deadline=None, max_examples=150)
@given(run=runs)
def test_a_settled_run_leaves_every_observer_as_one_at_a_time(
    run: tuple[int, int, list[int], int, list[int]],
) -> None:
    messages, sent, acked, taken, chosen = run
    with tempfile.TemporaryDirectory() as tmp:
        one, all_at_once = (
            Primary(Path(tmp) / name, messages, sent, acked) for name in ("one", "all")
        )
        runs: list[list[Entry]] = []
        for primary in (one, all_at_once):
            entries = [primary.queue.get() for _ in range(taken)]
            for entry in entries:
                assert entry is not None
                primary.queue.delivered(entry, no_ack=False)
            runs.append([entries[i] for i in sorted(chosen) if i < taken])  # type: ignore[misc]
        for entry in runs[0]:
            one.queue.settle(entry)
        all_at_once.queue.settle_all(runs[1])
        assert one.state() == all_at_once.state()


def _appended(journal: Journal) -> bytes:
    return b"".join(data for _, data in journal.tail.pending)


def _backup(directory: Path, messages: int) -> tuple[Journal, Queue, int]:
    """A backup's durable queue of ``messages`` at positions 1, 2, ...; where its journal's
    bytes stand (before them: its queue record, with the queue's own uuid)."""
    vhost = VirtualHost()
    journal = Journal(directory)
    MessageStore(journal, vhost).recover_into(journal.recover())
    queue = vhost.declare_queue("q", durable=True)
    mark = len(_appended(journal))
    for i in range(1, messages + 1):
        queue.enqueue(Message("", "q", PERSISTENT, b"%d" % i), i)
    return journal, queue, mark


@settings(deadline=None, max_examples=150)
@given(
    messages=st.integers(1, 20),
    positions=st.lists(st.integers(1, 22), unique=True),
    deleted=st.booleans(),
)
def test_a_backups_dequeued_ranges_leave_its_store_as_one_at_a_time(
    messages: int, positions: list[int], deleted: bool
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        (journal_one, one, mark), (journal_all, all_at_once, _) = (
            _backup(Path(tmp) / name, messages) for name in ("one", "all")
        )
        ids = IdSet()
        for position in positions:
            ids.add(position)
        one.deleted = all_at_once.deleted = deleted
        expected = 0
        while one.ready and one.ready[0].position in ids:  # the head, one at a time
            one.removed(one.ready.popleft())
            expected += 1
        assert all_at_once.remove_positions(ids, expected) == expected
        assert [e.position for e in all_at_once.ready] == [e.position for e in one.ready]
        assert all_at_once.bytes == one.bytes
        assert journal_all.ledger.live_messages == journal_one.ledger.live_messages
        assert _appended(journal_all)[mark:] == _appended(journal_one)[mark:]


PER_MESSAGE_TTL_0 = encode(commands.Basic.Properties(expiration="0", delivery_mode=2))


@settings(deadline=None, max_examples=150)
@given(
    run=st.lists(st.tuples(st.integers(1, 30), st.booleans()), max_size=25),
    before=st.integers(0, 10),
    ttl=st.sampled_from([None, 0, 60_000]),
)
def test_a_backups_run_of_enqueues_leaves_queue_and_store_as_one_at_a_time(
    run: list[tuple[int, bool]], before: int, ttl: int | None
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        sides = []
        for name in ("one", "all"):
            vhost = VirtualHost()
            journal = Journal(Path(tmp) / name)
            MessageStore(journal, vhost).recover_into(journal.recover())
            arguments = {} if ttl is None else {"x-message-ttl": ttl}
            queue = vhost.declare_queue("q", durable=True, arguments=arguments)
            for position in range(1, before + 1):
                queue.enqueue(Message("", "q", PERSISTENT, b"b%d" % position), position)
            sides.append((journal, queue, len(_appended(journal))))
        messages = [
            [
                Message("", "q", PER_MESSAGE_TTL_0 if expired else PERSISTENT, b"%d" % p)
                for p, expired in run
            ]
            for _ in sides
        ]
        positions = [p for p, _ in run]
        (journal_one, one, mark), (journal_all, all_at_once, _) = sides
        for message, position in zip(messages[0], positions, strict=True):
            one.enqueue(message, position)
        all_at_once.enqueue_replicated(messages[1], positions)
        assert [(e.position, e.message.body) for e in all_at_once.ready] == [
            (e.position, e.message.body) for e in one.ready
        ]
        assert (all_at_once.bytes, all_at_once.enqueued_total, all_at_once.last_position) == (
            one.bytes,
            one.enqueued_total,
            one.last_position,
        )
        assert journal_all.ledger.live_messages == journal_one.ledger.live_messages
        assert _records(journal_all, mark) == _records(journal_one, mark)


def _records(journal: Journal, mark: int) -> list[tuple[int, bytes]]:
    """The records appended past ``mark``, an ENQUEUE's expiry time left out (the wall
    clock's milliseconds when it was written)."""
    records = []
    for record in iter_records(_appended(journal)[mark:], 0):
        assert not isinstance(record, BadRecord)
        _offset, _size, kind, payload = record
        records.append((kind, payload[:-8] if kind == Kind.ENQUEUE else payload))
    return records
