"""Queue TTL: per-queue and per-message expiry, at the head only, and TTL 0."""

from __future__ import annotations

from typing import Any

import pytest

from tests.core.fakes import FakeClock, FakeConsumer, message
from tests.core.queue_support import DeadLetters, fill, make_queue, ready


# -- TTL ---------------------------------------------------------------------------------
def test_message_ttl_expires_head() -> None:
    clock = FakeClock()
    dead = DeadLetters()
    queue, observer = make_queue(clock, dead=dead, x_message_ttl=100)
    fill(queue, "a")
    clock.advance(0.05)
    fill(queue, "b")
    clock.advance(0.049)
    assert queue.expire() == 0
    clock.advance(0.002)
    assert queue.expire() == 1
    assert ready(queue) == [b"b"]
    assert queue.bytes == 1
    assert dead.calls == [(b"a", "expired", 1)]
    assert observer.dequeued_bodies == [b"a"]
    clock.advance(0.05)
    assert queue.expire() == 1
    assert queue.message_count == 0
    assert queue.expired_total == 2


def test_expired_messages_are_not_delivered() -> None:
    clock = FakeClock()
    dead = DeadLetters()
    queue, observer = make_queue(clock, dead=dead, x_message_ttl=100)
    fill(queue, "a", "b")
    clock.advance(0.2)
    fill(queue, "c")
    consumer = FakeConsumer()
    queue.add_consumer(consumer)
    assert consumer.bodies == [b"c"]
    assert dead.reasons == ["expired", "expired"]
    assert observer.dequeued_bodies == [b"a", b"b"]
    assert queue.bytes == 0


def test_expired_message_not_returned_by_get() -> None:
    clock = FakeClock()
    queue, _ = make_queue(clock, x_message_ttl=10)
    fill(queue, "a")
    clock.advance(1)
    assert queue.get() is None
    assert queue.message_count == 0


def test_per_message_expiration() -> None:
    clock = FakeClock()
    queue, _ = make_queue(clock)
    assert queue.enqueue(message("short", expiration="100"))
    assert queue.enqueue(message("plain"))
    entries = queue.entries()
    assert entries[0].expires_at == pytest.approx(clock.now + 0.1)
    assert entries[1].expires_at is None
    clock.advance(0.2)
    assert queue.expire() == 1
    assert ready(queue) == [b"plain"]
    clock.advance(3600)
    assert queue.expire() == 0


@pytest.mark.parametrize(
    ("queue_ttl", "expiration", "expected"),
    [(1000, "100", 0.1), (50, "100", 0.05), (None, "7", 0.007), (200, None, 0.2)],
)
def test_effective_ttl_is_the_lower_one(
    queue_ttl: int | None, expiration: str | None, expected: float
) -> None:
    clock = FakeClock()
    args: dict[str, Any] = {} if queue_ttl is None else {"x_message_ttl": queue_ttl}
    queue, _ = make_queue(clock, **args)
    props = {} if expiration is None else {"expiration": expiration}
    queue.enqueue(message("m", **props))
    (entry,) = queue.entries()
    assert entry.expires_at == pytest.approx(clock.now + expected)


def test_expiry_only_at_the_head_like_rabbitmq() -> None:
    clock = FakeClock()
    queue, _ = make_queue(clock)
    queue.enqueue(message("long", expiration="10000"))
    queue.enqueue(message("short", expiration="10"))
    clock.advance(1)
    assert queue.expire() == 0
    assert queue.message_count == 2
    consumer = FakeConsumer()
    queue.add_consumer(consumer)
    assert consumer.bodies == [b"long"]  # short was dropped on its way out
    assert queue.expired_total == 1


def test_invalid_expiration_is_refused() -> None:
    with pytest.raises(ValueError):
        message("x", expiration="soon")
    with pytest.raises(ValueError):
        message("x", expiration="-1")


def test_ttl_zero_without_consumer_expires_on_arrival() -> None:
    clock = FakeClock()
    dead = DeadLetters()
    queue, observer = make_queue(clock, dead=dead, x_message_ttl=0)
    assert queue.enqueue(message("a"))
    assert queue.message_count == 0
    assert queue.bytes == 0
    assert dead.reasons == ["expired"]
    assert observer.enqueued_entries == observer.dequeued_entries
    assert len(observer.enqueued_entries) == 1


def test_ttl_zero_goes_to_a_ready_consumer() -> None:
    """RabbitMQ: a ttl-0 message reaches a consumer that can take it at once."""
    clock = FakeClock()
    dead = DeadLetters()
    queue, observer = make_queue(clock, dead=dead, x_message_ttl=0)
    busy, ready_consumer = FakeConsumer("busy", credit=0), FakeConsumer("ready")
    queue.add_consumer(busy)
    queue.add_consumer(ready_consumer)
    assert queue.enqueue(message("a"))
    assert ready_consumer.bodies == [b"a"]
    assert dead.calls == []
    ready_consumer.credit = 0
    assert queue.enqueue(message("b"))
    assert dead.bodies == [b"b"]
    assert queue.message_count == 0
    assert len(observer.enqueued_entries) == 2
    assert observer.dequeued_bodies == [b"b"]


@pytest.mark.parametrize("replicated_as", ["enqueue", "enqueue_replicated"])
def test_ttl_zero_replicated_is_kept_until_its_primary_removes_it(replicated_as: str) -> None:
    """A replicated message (its replication id given) reaching a queue already expired
    (a TTL of 0: a consumer took it on the primary) is kept, never expired or dead-lettered
    on arrival: only the primary does that, and its dequeue follows."""
    clock = FakeClock()
    dead = DeadLetters()
    queue, observer = make_queue(clock, dead=dead, x_message_ttl=0)
    if replicated_as == "enqueue":
        assert queue.enqueue(message("a"), 7)
    else:
        queue.enqueue_replicated([message("a")], [7])
    assert ready(queue) == [b"a"]
    assert dead.calls == [] and queue.expired_total == 0
    assert observer.dequeued_entries == []
    assert queue.remove_positions({7}) == 1  # the primary's dequeue
    assert queue.message_count == 0 and dead.calls == []
