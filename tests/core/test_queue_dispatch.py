"""Queue dispatch: round robin, credit, acknowledgement, get, requeue, reject and purge."""

from __future__ import annotations

import pytest

from tests.core.fakes import FakeConsumer
from tests.core.queue_support import DeadLetters, fill, make_queue, ready


# -- dispatch ----------------------------------------------------------------------------
def test_round_robin_is_fair() -> None:
    queue, _ = make_queue()
    consumers = [FakeConsumer(tag) for tag in "abc"]
    for consumer in consumers:
        queue.add_consumer(consumer)
    fill(queue, *[str(i) for i in range(9)])
    assert [c.bodies for c in consumers] == [
        [b"0", b"3", b"6"],
        [b"1", b"4", b"7"],
        [b"2", b"5", b"8"],
    ]
    assert queue.message_count == 0
    assert queue.unacked == 9
    assert queue.delivered_total == 9


def test_round_robin_skips_consumers_without_credit() -> None:
    queue, _ = make_queue()
    a, b, c = FakeConsumer("a"), FakeConsumer("b", credit=0), FakeConsumer("c")
    for consumer in (a, b, c):
        queue.add_consumer(consumer)
    fill(queue, "0", "1", "2", "3")
    assert a.bodies == [b"0", b"2"]
    assert b.bodies == []
    assert c.bodies == [b"1", b"3"]


def test_publishes_past_every_consumers_credit_make_no_choice_until_credit_returns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A publisher ahead of its consumers: once every consumer was found without credit, a
    publish queues its message without a dispatch round; the credit returned, the backlog
    goes out in order and round robin."""
    queue, _ = make_queue()
    a, b = FakeConsumer("a", credit=1), FakeConsumer("b", credit=1)
    queue.add_consumer(a)
    queue.add_consumer(b)
    fill(queue, "0", "1", "2")  # 0 to a, 1 to b; at 2 both are found without credit
    rounds: list[int] = []
    dispatch = queue.dispatch

    def counted() -> None:
        rounds.append(queue.delivered_total)
        dispatch()

    monkeypatch.setattr(queue, "dispatch", counted)
    fill(queue, *[str(i) for i in range(3, 40)])
    assert rounds == []
    assert ready(queue) == [str(i).encode() for i in range(2, 40)]
    a.credit, b.credit = 2, 2
    queue.credit_returned(a)
    queue.credit_returned(b)
    queue.dispatch()
    assert a.bodies == [b"0", b"2", b"4"] and b.bodies == [b"1", b"3", b"5"]
    assert ready(queue) == [str(i).encode() for i in range(6, 40)]
    b.credit = 1
    queue.credit_returned(b)  # one consumer of two back: the next publish is a round
    fill(queue, "40")
    assert b.bodies[-1] == b"6" and len(rounds) == 2


def test_a_single_active_consumer_is_asked_at_each_publish() -> None:
    """With x-single-active-consumer the active consumer is asked each time (never parked):
    credit it gains without a word to the queue is used at the next publish."""
    queue, _ = make_queue(x_single_active_consumer=True)
    a = FakeConsumer("a", credit=0)
    queue.add_consumer(a)
    fill(queue, "0", "1")
    assert a.bodies == []
    a.credit = 5
    fill(queue, "2")
    assert a.bodies == [b"0", b"1", b"2"]


def test_backlog_dispatched_to_new_consumer_round_robin() -> None:
    queue, _ = make_queue()
    fill(queue, "0", "1", "2", "3", "4")
    a = FakeConsumer("a", credit=0)
    b = FakeConsumer("b", credit=0)
    queue.add_consumer(a)
    queue.add_consumer(b)
    assert queue.message_count == 5
    a.credit = b.credit = 10
    queue.credit_returned()
    queue.dispatch()
    assert sorted(a.bodies + b.bodies) == [b"0", b"1", b"2", b"3", b"4"]
    assert abs(len(a.bodies) - len(b.bodies)) <= 1


def test_credit_is_respected() -> None:
    queue, _ = make_queue()
    consumer = FakeConsumer(credit=2)
    queue.add_consumer(consumer)
    fill(queue, "0", "1", "2", "3", "4")
    assert consumer.bodies == [b"0", b"1"]
    assert queue.message_count == 3
    assert ready(queue) == [b"2", b"3", b"4"]
    consumer.credit = 1
    queue.credit_returned(consumer)
    queue.dispatch()
    assert consumer.bodies == [b"0", b"1", b"2"]
    consumer.credit = None
    queue.credit_returned(consumer)
    queue.dispatch()
    assert consumer.bodies == [b"0", b"1", b"2", b"3", b"4"]
    assert queue.message_count == 0


def test_no_consumer_keeps_messages_ready() -> None:
    queue, observer = make_queue()
    fill(queue, "a", "b")
    assert queue.message_count == 2
    assert queue.bytes == 2
    assert [e.position for e in queue.entries()] == [1, 2]
    assert len(observer.enqueued_entries) == 2
    assert observer.dequeued_entries == []


def test_no_ack_delivery_dequeues_at_once() -> None:
    queue, observer = make_queue()
    consumer = FakeConsumer(no_ack=True)
    queue.add_consumer(consumer)
    fill(queue, "a", "b")
    assert queue.unacked == 0
    assert observer.dequeued_bodies == [b"a", b"b"]
    assert queue.acked_total == 2


def test_ack_dequeues() -> None:
    queue, observer = make_queue()
    consumer = FakeConsumer()
    queue.add_consumer(consumer)
    fill(queue, "a", "b")
    assert observer.dequeued_entries == []
    consumer.ack_all(queue)
    assert queue.unacked == 0
    assert observer.dequeued_bodies == [b"a", b"b"]


def test_remove_consumer() -> None:
    queue, _ = make_queue()
    consumer = FakeConsumer()
    queue.add_consumer(consumer)
    assert queue.consumer_count == 1
    assert queue.consumers == (consumer,)
    assert queue.remove_consumer(consumer) is False  # not auto-delete
    assert queue.remove_consumer(consumer) is False  # not there any more
    fill(queue, "a")
    assert consumer.bodies == []

    auto, _ = make_queue(auto_delete=True)
    first, second = FakeConsumer("1"), FakeConsumer("2")
    auto.add_consumer(first)
    auto.add_consumer(second)
    assert auto.remove_consumer(first) is False
    assert auto.remove_consumer(second) is True


def test_get_takes_the_head() -> None:
    queue, observer = make_queue()
    assert queue.get() is None
    fill(queue, "a", "b")
    entry = queue.get()
    assert entry is not None
    assert entry.message.body == b"a"
    assert not entry.redelivered
    queue.delivered(entry, no_ack=False)
    assert queue.unacked == 1
    assert queue.message_count == 1
    queue.requeue([entry])
    again = queue.get()
    assert again is entry
    assert again.redelivered
    queue.delivered(again, no_ack=True)
    assert observer.dequeued_entries == [entry]
    assert queue.unacked == 0


# -- requeue -----------------------------------------------------------------------------
def test_requeue_restores_original_order_and_marks_redelivered() -> None:
    queue, observer = make_queue()
    consumer = FakeConsumer(credit=4)
    queue.add_consumer(consumer)
    fill(queue, "0", "1", "2", "3", "4", "5")
    assert ready(queue) == [b"4", b"5"]
    e0, e1, e2, e3 = consumer.unacked
    queue.settle(e1)
    # requeue out of order: the queue puts them back by position, ahead of 4 and 5
    queue.requeue([e3, e0, e2])
    assert ready(queue) == [b"0", b"2", b"3", b"4", b"5"]
    assert queue.unacked == 0
    assert queue.bytes == 5
    assert [e.redelivered for e in queue.entries()] == [True, True, True, False, False]
    consumer.credit = None
    queue.credit_returned(consumer)
    queue.dispatch()
    assert consumer.deliveries[4:] == [
        (e0, True),
        (e2, True),
        (e3, True),
        (consumer.deliveries[7][0], False),
        (consumer.deliveries[8][0], False),
    ]
    assert len(observer.enqueued_entries) == 6
    assert observer.dequeued_entries == [e1]


def test_requeue_merges_between_ready_messages() -> None:
    queue, _ = make_queue()
    fill(queue, "0", "1", "2", "3")
    taken = [queue.get(), queue.get(), queue.get()]
    entries = [e for e in taken if e is not None]
    for entry in entries:
        queue.delivered(entry, no_ack=False)
    # 0 and 2 go back while 3 is still ready; 1 is requeued later
    queue.requeue([entries[2], entries[0]])
    assert ready(queue) == [b"0", b"2", b"3"]
    queue.requeue([entries[1]])
    assert ready(queue) == [b"0", b"1", b"2", b"3"]


def test_reject_with_requeue_puts_back_at_head() -> None:
    queue, _ = make_queue()
    consumer = FakeConsumer(credit=1)
    queue.add_consumer(consumer)
    fill(queue, "a", "b")
    queue.reject(consumer.unacked.pop(), requeue=True)
    # back at the head (the consumer has no credit left to take it again)
    assert ready(queue) == [b"a", b"b"]
    assert queue.unacked == 0
    consumer.credit = 1
    queue.credit_returned(consumer)
    queue.dispatch()
    assert consumer.deliveries[-1][0].message.body == b"a"
    assert consumer.deliveries[-1][1] is True


def test_requeue_to_deleted_queue_dequeues() -> None:
    queue, observer = make_queue()
    consumer = FakeConsumer()
    queue.add_consumer(consumer)
    fill(queue, "a")
    fill(queue, "b")
    consumer.credit = 0
    fill(queue, "c")
    assert queue.close() == [consumer]
    assert queue.deleted
    assert observer.dequeued_bodies == [b"c"]
    queue.requeue(list(consumer.unacked))
    assert queue.message_count == 0
    assert queue.unacked == 0
    assert observer.dequeued_bodies == [b"c", b"a", b"b"]


def test_purge_removes_only_ready_messages() -> None:
    queue, observer = make_queue()
    consumer = FakeConsumer(credit=1)
    queue.add_consumer(consumer)
    fill(queue, "a", "bb", "ccc")
    assert queue.purge() == 2
    assert queue.message_count == 0
    assert queue.bytes == 0
    assert queue.unacked == 1
    assert observer.dequeued_bodies == [b"bb", b"ccc"]
    consumer.ack_all(queue)
    assert observer.dequeued_bodies == [b"bb", b"ccc", b"a"]


# -- reject ------------------------------------------------------------------------------
def test_reject_without_requeue_dead_letters() -> None:
    dead = DeadLetters()
    queue, observer = make_queue(dead=dead)
    consumer = FakeConsumer()
    queue.add_consumer(consumer)
    fill(queue, "a")
    queue.reject(consumer.unacked[0], requeue=False)
    assert queue.unacked == 0
    assert dead.calls == [(b"a", "rejected", 1)]
    assert observer.dequeued_bodies == [b"a"]
