"""The delivery watermark, sans-I/O (docs/ha-design.md, "Redelivered after a fail-over").

A primary delivers a message only once every guarded backup acknowledged an announcement
covering it; a promoted backup sends what it holds up to the last watermark it received
marked redelivered, and the rest unmarked. Real objects: the primary's queue, guards and
replicating subscriptions, the backups' queue replicators and queues, batches through the
real wire format; hypothesis drives random interleavings of publishes, deliveries,
acknowledgements, batches sent, applied and acknowledged, and backups released.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.core.message import Entry, Message
from broker.core.paging import PagedMessages, PagingBudget
from broker.core.queue import NO_GATE, Queue
from broker.ha.delivery_watermark import (
    DeliveryWatermark,
    deliverable,
    next_announcement,
)
from broker.ha.id_set import IdSet
from broker.ha.queue_guard import QueueGuard
from broker.ha.queue_replicator import QueueReplicator
from broker.ha.replicating_subscription import ReplicatingSubscription
from broker.ha.wire import Watermark, decode_batch
from broker.store.page_file import PageFile
from tests.core.fakes import FakeClock, FakeConsumer

#: A promoted backup's first new id (an era, docs/ha-design.md).
ERA = 2 << 40


def _message(body: bytes) -> Message:
    return Message("", "q", b"\x00\x00", body)


def _promote(queue: Queue) -> None:
    """What a promotion does to a queue's ids (HaBroker._start_primary)."""
    queue.last_position = max(ERA, queue.last_position + 2**32)


@dataclass
class Backup:
    """One backup of the primary's queue: its guard, stream and copy."""

    name: str
    primary: Queue
    window: int
    copy: Queue = field(init=False)
    guard: QueueGuard = field(init=False)
    subscription: ReplicatingSubscription = field(init=False)
    replicator: QueueReplicator = field(init=False)
    sent: list[tuple[int, bytes]] = field(default_factory=list)  # not applied yet
    applied: list[int] = field(default_factory=list)  # tags applied, not acknowledged

    def __post_init__(self) -> None:
        self.copy = Queue("q", clock=FakeClock())
        self.guard = QueueGuard(self.primary, self.name)
        self.subscription = ReplicatingSubscription(self.primary, self.guard, IdSet())
        self.replicator = QueueReplicator(self.copy)

    def send(self) -> None:
        batch = self.subscription.next_batch()
        if batch is not None:
            self.sent.append(batch)

    def apply(self) -> None:
        if self.sent:
            tag, body = self.sent.pop(0)
            self.replicator.apply(decode_batch(body))
            self.applied.append(tag)

    def ack(self) -> None:
        for tag in self.applied:
            self.subscription.acknowledged(tag)
        self.applied.clear()

    def flush(self) -> None:
        while self.subscription.has_work or self.sent or self.applied:
            self.send()
            while self.sent:
                self.apply()
            self.ack()


def _gated_queue(window: int, backups: int) -> tuple[Queue, list[Backup]]:
    queue = Queue("q", clock=FakeClock())
    DeliveryWatermark(queue, window)
    return queue, [Backup(f"b{i}", queue, window) for i in range(backups)]


# -- the rule as pure functions ----------------------------------------------------------
@given(st.integers(0, 10**6), st.integers(1, 10**6), st.integers(2, 10**4))
def test_an_announcement_always_covers_the_delivery_it_is_made_for(
    announced: int, position: int, window: int
) -> None:
    nxt = next_announcement(announced, position, window)
    if nxt is None:
        assert position + window // 2 <= announced  # still half a window ahead
    else:
        assert nxt >= position + window and nxt >= announced  # never lowered


@given(st.integers(1, 100), st.lists(st.integers(0, 100), max_size=4))
def test_deliverable_only_under_every_acknowledged_watermark(
    position: int, acknowledged: list[int]
) -> None:
    assert deliverable(position, acknowledged) == (position <= min(acknowledged, default=NO_GATE))


# -- the gate --------------------------------------------------------------------------
def test_a_joined_backup_holds_deliveries_until_it_acknowledges_the_watermark() -> None:
    queue, [backup] = _gated_queue(8, 1)
    for i in range(3):
        queue.enqueue(_message(b"%d" % i))
    consumer = FakeConsumer()
    queue.add_consumer(consumer)
    assert consumer.deliveries == []  # nothing acknowledged yet
    assert queue.get() is None  # basic.get: empty while held back
    backup.send()
    backup.apply()
    assert consumer.deliveries == []  # applied, not yet acknowledged
    backup.ack()
    assert [e.message.body for e, _flag in consumer.deliveries] == [b"0", b"1", b"2"]
    assert backup.copy.redelivered_through == 8  # joined at id 0: a window from there


def test_the_window_announces_ahead_and_blocks_only_past_the_acknowledged_watermark() -> None:
    queue, [backup] = _gated_queue(8, 1)
    backup.flush()  # watermark 8 acknowledged
    consumer = FakeConsumer()
    queue.add_consumer(consumer)
    for i in range(12):
        queue.enqueue(_message(b"%d" % i))
    # 1..4 go at once; 5 is within half a window of 8: a new announcement (5 + 8 = 13),
    # and 5..8 still go (covered by 8); 9 waits for 13's acknowledgement
    assert len(consumer.deliveries) == 8
    gate = DeliveryWatermark.of(queue)
    assert gate.announced == 13 and gate.blocked
    backup.flush()
    assert len(consumer.deliveries) == 12
    assert backup.copy.redelivered_through >= 12


def test_a_released_backup_no_longer_holds_deliveries() -> None:
    queue, [fast, gone] = _gated_queue(8, 2)
    queue.enqueue(_message(b"a"))
    consumer = FakeConsumer()
    queue.add_consumer(consumer)
    fast.flush()
    assert consumer.deliveries == []  # the other backup (expected, silent) holds it
    gone.guard.cancel()  # the role releases it (ReleaseGuards)
    assert [e.message.body for e, _flag in consumer.deliveries] == [b"a"]


def test_a_queue_without_guards_delivers_at_once() -> None:
    queue = Queue("q", clock=FakeClock())
    consumer = FakeConsumer()
    queue.add_consumer(consumer)
    queue.enqueue(_message(b"a"))
    assert queue.gate_above == NO_GATE and len(consumer.deliveries) == 1


# -- a promoted backup -----------------------------------------------------------------
def test_a_promoted_backup_marks_what_may_have_been_delivered_and_only_that() -> None:
    window = 8
    queue, [backup] = _gated_queue(window, 1)
    backup.flush()
    taken = FakeConsumer(credit=3)
    queue.add_consumer(taken)
    for i in range(30):
        queue.enqueue(_message(b"m%02d" % i))
    backup.flush()
    assert len(taken.deliveries) == 3  # delivered 1..3, never acknowledged
    watermark = backup.copy.redelivered_through
    assert watermark == window  # no delivery came near it: not raised
    copy = backup.copy
    _promote(copy)  # the old primary dies; the backup takes over
    copy.enqueue(_message(b"new"))
    after = FakeConsumer()
    copy.add_consumer(after)
    flags = {e.message.body: flag for e, flag in after.deliveries}
    assert len(flags) == 31
    assert all(flags[b"m%02d" % i] for i in range(3))  # delivered before: marked
    assert [i for i in range(30) if flags[b"m%02d" % i]] == list(range(window))
    assert not flags[b"new"]


def test_paged_messages_go_out_marked_up_to_the_watermark() -> None:
    with tempfile.TemporaryDirectory() as directory:
        queue, [backup] = _gated_queue(10, 1)
        backup.copy.use_message_list(
            PagedMessages(PagingBudget(500), PageFile(Path(directory), "1"), chunk_bytes=300)
        )
        for i in range(20):
            queue.enqueue(_message(b"m%02d" % i + b"." * 100))
        backup.flush()
        _promote(backup.copy)
        consumer = FakeConsumer()
        backup.copy.add_consumer(consumer)
        assert [flag for _e, flag in consumer.deliveries] == [True] * 10 + [False] * 10


def test_a_watermark_inside_a_transactions_batch_is_applied_at_once() -> None:
    copy = Queue("q", clock=FakeClock())
    replicator = QueueReplicator(copy)
    replicator.apply([Watermark(40)])
    assert copy.redelivered_through == 40
    replicator.apply([Watermark(30)])  # never lowered
    assert copy.redelivered_through == 40


# -- any interleaving ------------------------------------------------------------------
STEP = st.one_of(
    st.tuples(st.just("publish"), st.integers(1, 5)),
    st.tuples(st.just("credit"), st.integers(1, 5)),
    st.tuples(st.just("ack"), st.integers(1, 5)),
    st.tuples(st.just("requeue"), st.just(0)),
    st.tuples(st.just("get"), st.just(0)),
    st.tuples(st.sampled_from(["send", "apply", "acked"]), st.integers(0, 1)),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(STEP, max_size=60), st.integers(0, 1), st.integers(2, 12), st.booleans())
def test_nothing_that_may_have_been_delivered_is_ever_unmarked(
    steps: list[tuple[str, int]], promoted: int, window: int, release_other: bool
) -> None:
    """Whatever interleaving, a promoted backup marks every message it holds that the
    primary delivered (to a consumer or basic.get, acknowledged or not); and once every
    batch is through, the gate holds nothing back."""
    queue, backups = _gated_queue(window, 2)
    consumer = FakeConsumer(credit=0)
    queue.add_consumer(consumer)
    delivered: set[int] = set()
    unacked: list[Entry] = []
    published = 0
    for step, count in steps:
        if step == "publish":
            for _ in range(count):
                queue.enqueue(_message(b"%d" % published))
                published += 1
        elif step == "credit":
            consumer.credit = (consumer.credit or 0) + count
            queue.credit_returned(consumer)
            queue.dispatch()
        elif step == "ack":
            unacked = [*unacked, *consumer.unacked]
            consumer.unacked.clear()
            for entry in unacked[:count]:
                queue.settle(entry)
            del unacked[:count]
        elif step == "requeue":
            queue.requeue([*unacked, *consumer.unacked])
            unacked, consumer.unacked = [], []
        elif step == "get":
            got = queue.get()
            if got is not None:
                delivered.add(got.position)
                queue.delivered(got, False)
                unacked.append(got)
        else:
            backup = backups[count]
            {"send": backup.send, "apply": backup.apply, "acked": backup.ack}[step]()
        delivered.update(entry.position for entry, _flag in consumer.deliveries)
        limit = DeliveryWatermark.of(queue).limit
        assert all(position <= limit for position in delivered)

    target = backups[promoted]
    if release_other:  # the cluster manager dropped the other one: no longer waited for
        backups[1 - promoted].guard.cancel()
    mark = target.copy.redelivered_through
    held = {entry.position for entry in target.copy.snapshot()}
    assert {p for p in delivered if p in held} <= {p for p in held if p <= mark}

    # liveness: with every batch through, everything on the queue can be delivered (each
    # round delivers up to an announcement and sends the next one)
    consumer.credit = None
    queue.credit_returned(consumer)
    for _ in range(published + 1):
        queue.dispatch()
        for backup in backups:
            backup.flush()
        if queue.message_count == 0:
            break
    assert queue.message_count == 0
