"""A promoted backup sends what the old primary may have delivered marked redelivered
(sans-I/O: a primary's queue, its replicating subscription, a backup's queue replicator).

The rule (docs/ha-design.md, "Redelivered after a fail-over"): every message a backup holds
from its primary may have been delivered by that primary; once promoted, the backup sends
each of them with ``redelivered`` set (ready or got, paged or not), and never a message it
enqueued itself after the promotion (numbered from its era).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.core.message import Message
from broker.core.paging import PagedMessages, PagingBudget
from broker.core.queue import Queue
from broker.ha.id_set import IdSet
from broker.ha.queue_replicator import QueueReplicator
from broker.ha.replicating_subscription import ReplicatingSubscription
from broker.ha.wire import decode_batch
from broker.store.page_file import PageFile
from tests.core.fakes import FakeClock, FakeConsumer

#: A promoted backup's first new id (an era, docs/ha-design.md).
ERA = 2 << 40


def _message(body: bytes) -> Message:
    return Message("", "q", b"\x00\x00", body)


def _replicate(
    primary: Queue, backup: QueueReplicator, subscription: ReplicatingSubscription
) -> None:
    """Send every pending batch and apply it on the backup."""
    while subscription.has_work:
        batch = subscription.next_batch()
        if batch is None:
            return
        tag, body = batch
        backup.apply(decode_batch(body))
        subscription.acknowledged(tag)


def _promote(queue: Queue) -> None:
    """What a promotion does to a queue's ids (HaBroker._start_primary)."""
    queue.last_position = max(ERA, queue.last_position + 2**32)


def test_messages_of_the_old_primary_go_out_redelivered_new_ones_do_not() -> None:
    clock = FakeClock()
    primary = Queue("q", clock=clock)
    backup = Queue("q", clock=clock)
    replicator = QueueReplicator(backup)
    subscription = ReplicatingSubscription(primary, None, IdSet())
    for i in range(5):
        primary.enqueue(_message(b"old%d" % i))
    taken = FakeConsumer(credit=2)
    primary.add_consumer(taken)  # the old primary delivers two, unacknowledged
    _replicate(primary, replicator, subscription)
    assert [entry.message.body for entry in backup.entries()] == [b"old%d" % i for i in range(5)]

    _promote(backup)
    backup.enqueue(_message(b"new0"))
    got = backup.get()  # basic.get takes the head, marked too
    assert got is not None and got.message.body == b"old0" and got.redelivered
    consumer = FakeConsumer()
    backup.add_consumer(consumer)
    backup.enqueue(_message(b"new1"))
    assert [(e.message.body, flag) for e, flag in consumer.deliveries] == [
        (b"old1", True),
        (b"old2", True),
        (b"old3", True),
        (b"old4", True),
        (b"new0", False),
        (b"new1", False),
    ]


def test_a_primary_never_marks_what_it_enqueued_itself() -> None:
    queue = Queue("q", clock=FakeClock())
    for i in range(3):
        queue.enqueue(_message(b"%d" % i))
    consumer = FakeConsumer()
    queue.add_consumer(consumer)
    assert [flag for _entry, flag in consumer.deliveries] == [False, False, False]


def test_paged_messages_of_the_old_primary_go_out_redelivered() -> None:
    clock = FakeClock()
    with tempfile.TemporaryDirectory() as directory:
        backup = Queue("q", clock=clock)
        # A budget of about one message: the rest is paged to disk and read back.
        backup.use_message_list(
            PagedMessages(PagingBudget(500), PageFile(Path(directory), "1"), chunk_bytes=300)
        )
        primary = Queue("q", clock=clock)
        replicator = QueueReplicator(backup)
        subscription = ReplicatingSubscription(primary, None, IdSet())
        for i in range(20):
            primary.enqueue(_message(b"m%02d" % i + b"." * 100))
        _replicate(primary, replicator, subscription)
        _promote(backup)
        backup.enqueue(_message(b"new"))
        consumer = FakeConsumer()
        backup.add_consumer(consumer)
        flags = [flag for _entry, flag in consumer.deliveries]
        assert flags == [True] * 20 + [False]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("publish"), st.integers(1, 4)),
            st.tuples(st.just("deliver"), st.integers(1, 4)),
            st.tuples(st.just("ack"), st.integers(1, 4)),
            st.tuples(st.just("replicate"), st.just(0)),
        ),
        max_size=30,
    ),
    st.integers(0, 5),
)
def test_nothing_the_old_primary_may_have_delivered_comes_back_unmarked(
    steps: list[tuple[str, int]], new_messages: int
) -> None:
    """Whatever the old primary delivered, acknowledged or replicated when it died, every
    message it delivered that the promoted backup holds goes out redelivered; the backup's
    own new messages never."""
    clock = FakeClock()
    primary = Queue("q", clock=clock)
    backup = Queue("q", clock=clock)
    replicator = QueueReplicator(backup)
    subscription = ReplicatingSubscription(primary, None, IdSet())
    consumer = FakeConsumer(credit=0)
    primary.add_consumer(consumer)
    published = 0
    for step, count in steps:
        if step == "publish":
            for _ in range(count):
                primary.enqueue(_message(b"old%d" % published))
                published += 1
        elif step == "deliver":
            consumer.credit = (consumer.credit or 0) + count
            primary.dispatch()
        elif step == "ack":
            for entry in consumer.unacked[:count]:
                primary.settle(entry)
            del consumer.unacked[:count]
        else:
            _replicate(primary, replicator, subscription)
    delivered = {entry.message.body for entry, _flag in consumer.deliveries}

    _promote(backup)
    for i in range(new_messages):
        backup.enqueue(_message(b"new%d" % i))
    after = FakeConsumer()
    backup.add_consumer(after)
    for entry, flag in after.deliveries:
        body = entry.message.body
        if body in delivered:
            assert flag, body
        if body.startswith(b"new"):
            assert not flag, body
    assert sum(1 for e, _f in after.deliveries if e.message.body.startswith(b"new")) == new_messages
