"""A message published to a queue with nothing ready and a consumer with credit goes to that
consumer at once (``Queue.enqueue``'s direct hand-off, without the round through the ready
messages): its observers hear of it first, the consumers' turns, re-entrant enqueues and
the HA delivery gate are kept as :meth:`~broker.core.queue.Queue.dispatch` keeps them."""

from __future__ import annotations

from collections.abc import Sequence

from broker.core.message import Entry
from broker.core.queue import Queue
from broker.core.queue_contracts import ObserverRole
from tests.core.fakes import FakeConsumer, message
from tests.core.queue_support import fill, make_queue, ready


class Events:
    """What the queue's observer, its consumers and its gate saw, in order."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, bytes]] = []

    def enqueued(self, queue: Queue, entry: Entry) -> None:
        self.seen.append(("enqueued", entry.message.body))

    def enqueued_all(self, queue: Queue, entries: Sequence[Entry]) -> None:
        for entry in entries:
            self.enqueued(queue, entry)

    def dequeued(self, queue: Queue, entry: Entry) -> None:
        self.seen.append(("dequeued", entry.message.body))

    def dequeued_all(self, queue: Queue, entries: Sequence[Entry]) -> None:
        for entry in entries:
            self.dequeued(queue, entry)


class EventConsumer(FakeConsumer):
    def __init__(self, events: Events, tag: str = "c", credit: int | None = None) -> None:
        super().__init__(tag, credit=credit)
        self.events = events

    def deliver(self, queue: Queue, entry: Entry) -> None:
        self.events.seen.append((f"deliver {self.tag}", entry.message.body))
        super().deliver(queue, entry)


def test_the_observers_hear_of_a_message_before_its_consumer_gets_it() -> None:
    queue, _ = make_queue()
    events = Events()
    queue.observe(events, ObserverRole.STORE)
    queue.add_consumer(EventConsumer(events, "a"))
    queue.add_consumer(EventConsumer(events, "b"))
    fill(queue, "0", "1", "2")
    assert events.seen == [
        ("enqueued", b"0"),
        ("deliver a", b"0"),
        ("enqueued", b"1"),
        ("deliver b", b"1"),
        ("enqueued", b"2"),
        ("deliver a", b"2"),
    ]
    assert queue.message_count == 0 and queue.unacked == 3 and queue.delivered_total == 3
    assert queue.enqueued_total == 3


class Republisher(FakeConsumer):
    """Publishes the next message to its own queue from inside its delivery (as a consumer
    whose settle routes on: a dead letter, a reply on the same queue)."""

    def __init__(self, bodies: list[str]) -> None:
        super().__init__("r")
        self.more = bodies

    def deliver(self, queue: Queue, entry: Entry) -> None:
        super().deliver(queue, entry)
        if self.more:
            queue.enqueue(message(self.more.pop(0)))


def test_a_publish_from_inside_a_delivery_waits_its_turn_and_goes_out_in_order() -> None:
    queue, _ = make_queue()
    consumer = Republisher(["1", "2", "3"])
    queue.add_consumer(consumer)
    fill(queue, "0")
    assert consumer.bodies == [b"0", b"1", b"2", b"3"]
    assert queue.message_count == 0 and queue.delivered_total == 4


def test_a_consumer_without_credit_leaves_the_message_ready_for_the_next_with_credit() -> None:
    queue, _ = make_queue()
    full, free = FakeConsumer("full", credit=0), FakeConsumer("free", credit=1)
    queue.add_consumer(full)
    queue.add_consumer(free)
    fill(queue, "0", "1")
    assert full.bodies == [] and free.bodies == [b"0"]
    assert ready(queue) == [b"1"]
    full.credit = 5
    queue.credit_returned(full)
    queue.dispatch()
    assert full.bodies == [b"1"] and queue.message_count == 0


class Gate:
    """An HA delivery gate that lets positions up to ``through`` out; records each ask."""

    def __init__(self, events: Events, through: int) -> None:
        self.events = events
        self.through = through

    def may_deliver(self, queue: Queue, position: int) -> bool:
        self.events.seen.append(("gate", str(position).encode()))
        return position <= self.through


def test_a_position_the_gate_is_asked_about_is_asked_after_the_observers_heard() -> None:
    queue, _ = make_queue()
    events = Events()
    queue.observe(events, ObserverRole.GUARD)
    queue.add_consumer(EventConsumer(events))
    gate = Gate(events, through=1)
    queue.delivery_gate = gate
    queue.gate_above = 0
    fill(queue, "a", "b")
    assert events.seen == [
        ("enqueued", b"a"),
        ("gate", b"1"),
        ("deliver c", b"a"),
        ("enqueued", b"b"),
        ("gate", b"2"),
    ]
    assert ready(queue) == [b"b"]
    gate.through = 2
    queue.dispatch()
    assert events.seen[-2:] == [("gate", b"2"), ("deliver c", b"b")]


def test_a_position_below_the_gate_goes_at_once_without_asking() -> None:
    queue, _ = make_queue()
    events = Events()
    queue.add_consumer(EventConsumer(events))
    queue.delivery_gate = Gate(events, through=0)
    queue.gate_above = 5
    fill(queue, "a")
    assert events.seen == [("deliver c", b"a")]


def test_a_message_that_may_have_gone_out_before_a_fail_over_is_delivered_redelivered() -> None:
    queue, _ = make_queue()
    consumer = FakeConsumer()
    queue.add_consumer(consumer)
    queue.redelivered_through = 1
    fill(queue, "0", "1")
    assert [redelivered for _, redelivered in consumer.deliveries] == [True, False]
