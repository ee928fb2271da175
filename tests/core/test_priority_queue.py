"""Priority queues (``x-max-priority``), consumer priorities (``x-priority``) and single
active consumers (``x-single-active-consumer``): RabbitMQ's ordering rules, sans I/O."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.core.errors import AmqpError, ReplyCode
from broker.core.message import Entry
from broker.core.priority import PriorityMessages, message_priority
from broker.core.queue import Queue
from broker.core.vhost import VirtualHost
from tests.core.fakes import FakeClock, FakeConsumer, message


def priority_queue(max_priority: int = 10, **arguments: Any) -> Queue:
    return Queue("pq", clock=FakeClock(), arguments={"x-max-priority": max_priority, **arguments})


def put(queue: Queue, body: str, priority: int | None = None) -> None:
    props: dict[str, Any] = {} if priority is None else {"priority": priority}
    assert queue.enqueue(message(body, "pq", **props))


def take_all(queue: Queue) -> list[str]:
    bodies = []
    while (entry := queue.get()) is not None:
        queue.delivered(entry, True)
        bodies.append(entry.message.body.decode())
    return bodies


def test_highest_priority_first_fifo_within_a_priority() -> None:
    queue = priority_queue(5)
    for body, priority in [("a", 1), ("b", None), ("c", 5), ("d", 1), ("e", 9), ("f", 0)]:
        put(queue, body, priority)
    assert queue.message_count == 6
    # 9 counts as the maximum (5); no priority counts as 0
    assert take_all(queue) == ["c", "e", "a", "d", "b", "f"]


def test_requeued_messages_go_back_to_their_place_in_their_priority() -> None:
    queue = priority_queue(3)
    for i, priority in enumerate([1, 2, 1, 2, 0]):
        put(queue, f"m{i}", priority)
    consumer = FakeConsumer(credit=3)
    queue.add_consumer(consumer)
    assert consumer.bodies == [b"m1", b"m3", b"m0"]
    put(queue, "late", 2)  # no credit left: stays ready
    queue.requeue(reversed(consumer.unacked))
    queue.remove_consumer(consumer)
    assert take_all(queue) == ["m1", "m3", "late", "m0", "m2", "m4"]


def test_replicated_positions_removals_and_purge_keep_the_order() -> None:
    queue = priority_queue(2)
    for position, priority in [(1, 0), (2, 2), (3, 1), (4, 2), (5, 0)]:
        queue.enqueue(message(f"p{position}", "pq", priority=priority), position=position)
    assert [e.position for e in queue.entries()] == [2, 4, 3, 1, 5]
    assert queue.remove_positions({4, 1}) == 2
    assert [e.position for e in queue.entries()] == [2, 3, 5]
    assert queue.purge() == 3 and queue.message_count == 0 and not queue.entries()


def test_max_priority_is_checked_and_part_of_equivalence() -> None:
    for bad in (-1, 256, "5", True, 2.5):
        with pytest.raises(AmqpError) as info:
            priority_queue(bad)  # type: ignore[arg-type]
        assert info.value.reply_code == ReplyCode.PRECONDITION_FAILED
        assert "x-max-priority" in info.value.reply_text
    assert isinstance(priority_queue(255)._messages, PriorityMessages)
    assert not isinstance(priority_queue(0)._messages, PriorityMessages)
    vhost = VirtualHost()
    vhost.declare_queue("q", arguments={"x-max-priority": 10})
    with pytest.raises(AmqpError) as info:
        vhost.declare_queue("q", arguments={"x-max-priority": 5})
    assert "inequivalent arg 'x-max-priority'" in info.value.reply_text


# -- the rule, for any sequence of publishes, deliveries and requeues ----------------------
_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("publish"), st.one_of(st.none(), st.integers(0, 12))),
        st.tuples(st.just("get"), st.just(None)),
        st.tuples(st.just("requeue"), st.integers(0, 3)),
    ),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(_OPS, st.integers(1, 10))
def test_delivery_order_is_priority_then_arrival(
    ops: list[tuple[str, int | None]], max_priority: int
) -> None:
    queue = priority_queue(max_priority)
    model: dict[int, int] = {}  # position -> effective priority, for ready messages
    unacked: list[Entry] = []
    published = 0
    for op, value in ops:
        if op == "publish":
            published += 1
            put(queue, str(published), value)
            model[published] = min(value or 0, max_priority)
        elif op == "get":
            entry = queue.get()
            if not model:
                assert entry is None
                continue
            assert entry is not None
            expected = min(model, key=lambda p: (-model[p], p))
            assert entry.position == expected
            queue.delivered(entry, False)
            unacked.append(entry)
            del model[expected]
        elif unacked:
            back = unacked[: (value or 0) + 1]
            del unacked[: len(back)]
            queue.requeue(back)
            for entry in back:
                model[entry.position] = min(message_priority(entry), max_priority)
        assert queue.message_count == len(model)
        assert [e.position for e in queue.entries()] == sorted(model, key=lambda p: (-model[p], p))


# -- consumer priorities and single active consumer -----------------------------------
class PriorityConsumer(FakeConsumer):
    def __init__(self, tag: str, priority: int, credit: int | None = None) -> None:
        super().__init__(tag, credit=credit, no_ack=True)
        self.priority = priority


def plain_queue(**arguments: Any) -> Queue:
    return Queue("q", clock=FakeClock(), arguments=arguments)


def test_consumer_priorities_serve_the_highest_with_credit_round_robin() -> None:
    queue = plain_queue()
    low = PriorityConsumer("low", 0)
    high_a = PriorityConsumer("high-a", 5, credit=2)
    high_b = PriorityConsumer("high-b", 5, credit=1)
    mid = PriorityConsumer("mid", 1, credit=1)
    for consumer in (low, high_a, high_b, mid):
        queue.add_consumer(consumer)
    assert [c.tag for c in queue.consumers] == ["high-a", "high-b", "mid", "low"]
    for i in range(6):
        queue.enqueue(message(str(i), "q"))
    assert high_a.bodies == [b"0", b"2"] and high_b.bodies == [b"1"]
    assert mid.bodies == [b"3"] and low.bodies == [b"4", b"5"]
    high_b.credit = 1
    queue.credit_returned(high_b)
    queue.enqueue(message("6", "q"))
    assert high_b.bodies == [b"1", b"6"]


def test_single_active_consumer_takes_everything_until_it_goes() -> None:
    queue = plain_queue(**{"x-single-active-consumer": True})
    first, second = FakeConsumer("first", no_ack=True), FakeConsumer("second", no_ack=True)
    queue.add_consumer(first)
    queue.add_consumer(second)
    for i in range(3):
        queue.enqueue(message(str(i), "q"))
    assert first.bodies == [b"0", b"1", b"2"] and second.bodies == []
    first.credit = 0  # the active one is busy: the others still wait
    queue.enqueue(message("3", "q"))
    assert second.bodies == [] and queue.message_count == 1
    queue.remove_consumer(first)
    queue.dispatch()
    assert second.bodies == [b"3"]
    with pytest.raises(AmqpError):
        plain_queue(**{"x-single-active-consumer": "yes"})


class CheckedConsumer(FakeConsumer):
    """Checks at each delivery that no consumer of a higher priority had credit."""

    def __init__(self, tag: str, priority: int, everyone: list[CheckedConsumer]) -> None:
        super().__init__(tag, credit=0, no_ack=True)
        self.priority = priority
        self.everyone = everyone

    def deliver(self, queue: Queue, entry: Entry) -> None:
        assert not any(
            c.priority > self.priority and c.can_deliver() for c in self.everyone if c is not self
        )
        super().deliver(queue, entry)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(-2, 3), min_size=1, max_size=5),
    st.lists(
        st.one_of(
            st.tuples(st.just("publish"), st.integers(1, 4)),
            st.tuples(st.just("credit"), st.integers(0, 4)),
        ),
        max_size=40,
    ),
)
def test_deliveries_go_to_the_highest_priority_consumer_with_credit(
    priorities: list[int], ops: list[tuple[str, int]]
) -> None:
    queue = plain_queue()
    everyone: list[CheckedConsumer] = []
    for i, priority in enumerate(priorities):
        consumer = CheckedConsumer(f"c{i}", priority, everyone)
        everyone.append(consumer)
        queue.add_consumer(consumer)
    published = 0
    for op, value in ops:
        if op == "publish":
            for _ in range(value):
                published += 1
                queue.enqueue(message(str(published), "q"))
        else:
            consumer = everyone[value % len(everyone)]
            consumer.credit = (consumer.credit or 0) + 1
            queue.credit_returned(consumer)
            queue.dispatch()
        delivered = sum(len(c.deliveries) for c in everyone)
        # every message went to someone as long as anyone had credit, in arrival order
        assert delivered + queue.message_count == published
        assert queue.message_count == 0 or not any(c.can_deliver() for c in everyone)
    bodies = sorted(
        (int(entry.message.body) for c in everyone for entry, _ in c.deliveries),
    )
    assert bodies == list(range(1, len(bodies) + 1))
