"""Queue behaviour: dispatch, credit, requeue, TTL, length limits and dead-lettering."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from broker.core.errors import AmqpError, ReplyCode
from broker.core.message import Entry, Message
from broker.core.properties import decode
from broker.core.queue import Queue, QueueLimits
from broker.core.vhost import VirtualHost
from tests.core.fakes import FakeClock, FakeConsumer, RecordingObserver, message, raw_props

WALL = 1_700_000_000.0


class DeadLetters:
    """A queue's dead-letter callback that records (body, reason, position)."""

    def __init__(self) -> None:
        self.calls: list[tuple[bytes, str, int]] = []

    def __call__(self, queue: Queue, entry: Entry, reason: str) -> None:
        self.calls.append((entry.message.body, reason, entry.position))

    @property
    def bodies(self) -> list[bytes]:
        return [body for body, _, _ in self.calls]

    @property
    def reasons(self) -> list[str]:
        return [reason for _, reason, _ in self.calls]


def make_queue(
    clock: FakeClock | None = None,
    *,
    dead: DeadLetters | None = None,
    default_limit_bytes: int = 0,
    auto_delete: bool = False,
    **arguments: Any,
) -> tuple[Queue, RecordingObserver]:
    args = {k.replace("_", "-"): v for k, v in arguments.items()}
    if dead is not None:
        args.setdefault("x-dead-letter-exchange", "dlx")
    queue = Queue(
        "q",
        clock=clock or FakeClock(),
        arguments=args,
        dead_letter=dead,
        default_limit_bytes=default_limit_bytes,
        auto_delete=auto_delete,
    )
    observer = RecordingObserver()
    queue.observers.append(observer)
    return queue, observer


def fill(queue: Queue, *bodies: str) -> None:
    for body in bodies:
        assert queue.enqueue(message(body))


def ready(queue: Queue) -> list[bytes]:
    return [entry.message.body for entry in queue.entries()]


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


def test_backlog_dispatched_to_new_consumer_round_robin() -> None:
    queue, _ = make_queue()
    fill(queue, "0", "1", "2", "3", "4")
    a = FakeConsumer("a", credit=0)
    b = FakeConsumer("b", credit=0)
    queue.add_consumer(a)
    queue.add_consumer(b)
    assert queue.message_count == 5
    a.credit = b.credit = 10
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
    queue.dispatch()
    assert consumer.bodies == [b"0", b"1", b"2"]
    consumer.credit = None
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


# -- length limits -----------------------------------------------------------------------
def test_max_length_drop_head() -> None:
    dead = DeadLetters()
    queue, observer = make_queue(dead=dead, x_max_length=2)
    fill(queue, "a", "b", "c", "d")
    assert ready(queue) == [b"c", b"d"]
    assert dead.calls == [(b"a", "maxlen", 1), (b"b", "maxlen", 2)]
    assert observer.dequeued_bodies == [b"a", b"b"]
    assert queue.dropped_total == 2


def test_max_length_drop_head_without_dlx_just_drops() -> None:
    queue, observer = make_queue(x_max_length=1)
    fill(queue, "a", "b")
    assert ready(queue) == [b"b"]
    assert observer.dequeued_bodies == [b"a"]


def test_max_length_counts_ready_messages_only() -> None:
    queue, _ = make_queue(x_max_length=1)
    consumer = FakeConsumer(credit=2)
    queue.add_consumer(consumer)
    fill(queue, "a", "b", "c", "d")
    assert consumer.bodies == [b"a", b"b"]
    assert ready(queue) == [b"d"]


def test_max_length_zero_drops_every_message() -> None:
    dead = DeadLetters()
    queue, observer = make_queue(dead=dead, x_max_length=0)
    assert queue.enqueue(message("a"))
    assert queue.message_count == 0
    assert dead.calls == [(b"a", "maxlen", 0)]
    assert observer.enqueued_entries == []


def test_max_length_bytes_drop_head() -> None:
    dead = DeadLetters()
    queue, _ = make_queue(dead=dead, x_max_length_bytes=5)
    fill(queue, "aa", "bb", "cc")
    assert ready(queue) == [b"bb", b"cc"]
    assert queue.bytes == 4
    fill(queue, "dddd")
    assert ready(queue) == [b"dddd"]
    assert dead.bodies == [b"aa", b"bb", b"cc"]
    # a message bigger than the limit is dropped itself (after everything else)
    fill(queue, "eeeeee")
    assert queue.message_count == 0
    assert queue.bytes == 0
    assert dead.bodies == [b"aa", b"bb", b"cc", b"dddd", b"eeeeee"]


def test_reject_publish() -> None:
    dead = DeadLetters()
    queue, observer = make_queue(dead=dead, x_max_length=2, x_overflow="reject-publish")
    fill(queue, "a", "b")
    assert queue.enqueue(message("c")) is False
    assert ready(queue) == [b"a", b"b"]
    assert queue.rejected_publishes == 1
    assert dead.calls == []
    assert len(observer.enqueued_entries) == 2
    assert queue.enqueued_total == 2


def test_reject_publish_bytes() -> None:
    queue, _ = make_queue(x_max_length_bytes=3, x_overflow="reject-publish")
    fill(queue, "ab")
    assert queue.enqueue(message("cd")) is False
    assert queue.enqueue(message("c")) is True
    assert queue.bytes == 3


def test_reject_publish_dlx_dead_letters_the_refused_message() -> None:
    dead = DeadLetters()
    queue, observer = make_queue(dead=dead, x_max_length=1, x_overflow="reject-publish-dlx")
    fill(queue, "a")
    assert queue.enqueue(message("b")) is False
    assert ready(queue) == [b"a"]
    assert dead.calls == [(b"b", "maxlen", 0)]
    assert len(observer.enqueued_entries) == 1


def test_default_byte_limit_rejects_even_with_drop_head() -> None:
    queue, _ = make_queue(default_limit_bytes=10)
    fill(queue, "123456")
    assert queue.enqueue(message("12345")) is False
    assert queue.enqueue(message("1234")) is True
    assert queue.bytes == 10
    assert queue.rejected_publishes == 1


def test_default_byte_limit_rejects_with_drop_head_and_max_length() -> None:
    queue, _ = make_queue(default_limit_bytes=4, x_max_length=10)
    fill(queue, "1234")
    assert queue.enqueue(message("5")) is False


def test_explicit_byte_limit_overrides_default() -> None:
    queue, _ = make_queue(default_limit_bytes=2, x_max_length_bytes=100)
    fill(queue, "123456", "123456")
    assert queue.bytes == 12


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


# -- arguments ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ({"x-message-ttl": -1}, "x-message-ttl"),
        ({"x-message-ttl": "10"}, "x-message-ttl"),
        ({"x-message-ttl": True}, "x-message-ttl"),
        ({"x-expires": 0}, "x-expires"),
        ({"x-max-length": -1}, "x-max-length"),
        ({"x-max-length-bytes": 1.5}, "x-max-length-bytes"),
        ({"x-overflow": "drop-tail"}, "x-overflow"),
        ({"x-dead-letter-exchange": 5}, "x-dead-letter-exchange"),
        ({"x-dead-letter-routing-key": "k"}, "x-dead-letter-routing-key"),
    ],
)
def test_invalid_arguments_are_precondition_failed(arguments: dict[str, Any], named: str) -> None:
    with pytest.raises(AmqpError) as info:
        QueueLimits.from_arguments("q", arguments)
    assert info.value.reply_code == ReplyCode.PRECONDITION_FAILED
    assert named in info.value.reply_text


def test_limits_from_arguments() -> None:
    limits = QueueLimits.from_arguments(
        "q",
        {
            "x-message-ttl": 0,
            "x-expires": 1,
            "x-max-length": 0,
            "x-max-length-bytes": 0,
            "x-overflow": "reject-publish-dlx",
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": "k",
            "x-unknown": "ignored",
        },
    )
    assert limits == QueueLimits(0, 1, 0, 0, "reject-publish-dlx", "", "k")


# -- dead-lettering through a virtual host -----------------------------------------------
def dlx_vhost(
    clock: FakeClock | None = None, dlx_type: str = "fanout"
) -> tuple[VirtualHost, Queue]:
    vhost = VirtualHost(clock=clock or FakeClock(), wall_clock=lambda: WALL)
    vhost.declare_exchange("dlx", dlx_type)
    dead = vhost.declare_queue("dead")
    vhost.bind("dead", "dlx", "" if dlx_type == "fanout" else "dl")
    return vhost, dead


def publish(vhost: VirtualHost, body: str, routing_key: str, exchange: str = "") -> None:
    vhost.publish(vhost.exchange(exchange), message(body, routing_key, exchange))


def only(queue: Queue) -> Message:
    (entry,) = queue.entries()
    return entry.message


def test_drop_head_dead_letters_with_x_death() -> None:
    vhost, dead = dlx_vhost()
    vhost.declare_queue("work", arguments={"x-dead-letter-exchange": "dlx", "x-max-length": 1})
    publish(vhost, "a", "work")
    publish(vhost, "b", "work")
    dropped = only(dead)
    assert dropped.body == b"a"
    assert dropped.exchange == "dlx"
    assert dropped.routing_key == "work"
    headers = dropped.headers
    (death,) = headers["x-death"]
    assert death["count"] == 1
    assert death["reason"] == "maxlen"
    assert death["queue"] == "work"
    assert death["exchange"] == ""
    assert death["routing-keys"] == ["work"]
    assert isinstance(death["time"], datetime)
    assert int(death["time"].timestamp()) == int(WALL)
    assert headers["x-first-death-reason"] == "maxlen"
    assert headers["x-first-death-queue"] == "work"
    assert headers["x-first-death-exchange"] == ""
    assert vhost.dead_lettered_total == 1


def test_reject_dead_letters_with_x_death_and_keeps_properties() -> None:
    vhost, dead = dlx_vhost()
    vhost.declare_exchange("in", "direct")
    work = vhost.declare_queue("work", arguments={"x-dead-letter-exchange": "dlx"})
    vhost.bind("work", "in", "rk")
    vhost.publish(
        vhost.exchange("in"),
        message("a", "rk", "in", headers={"app": "yes"}, content_type="text/plain"),
    )
    consumer = FakeConsumer()
    work.add_consumer(consumer)
    work.reject(consumer.unacked[0], requeue=False)
    dropped = only(dead)
    headers = dropped.headers
    assert headers["app"] == "yes"
    (death,) = headers["x-death"]
    assert (death["count"], death["reason"], death["queue"], death["exchange"]) == (
        1,
        "rejected",
        "work",
        "in",
    )
    assert death["routing-keys"] == ["rk"]
    assert headers["x-first-death-exchange"] == "in"
    assert decode(dropped.properties_raw).content_type == "text/plain"


def test_expired_dead_letter_clears_expiration() -> None:
    clock = FakeClock()
    vhost, dead = dlx_vhost(clock)
    vhost.declare_queue("work", arguments={"x-dead-letter-exchange": "dlx"})
    publish_msg = message("a", "work", expiration="50")
    vhost.publish(vhost.exchange(""), publish_msg)
    clock.advance(1)
    vhost.tick()
    dropped = only(dead)
    assert dropped.expiration_ms is None
    assert dropped.headers["x-death"][0]["reason"] == "expired"
    assert dropped.headers["x-first-death-reason"] == "expired"


def test_dead_letter_routing_key_override() -> None:
    vhost, dead = dlx_vhost(dlx_type="direct")
    vhost.declare_queue(
        "work",
        arguments={
            "x-dead-letter-exchange": "dlx",
            "x-dead-letter-routing-key": "dl",
            "x-max-length": 0,
        },
    )
    publish(vhost, "a", "work")
    dropped = only(dead)
    assert dropped.routing_key == "dl"
    assert dropped.headers["x-death"][0]["routing-keys"] == ["work"]


def test_dead_letter_without_override_uses_original_key() -> None:
    vhost, dead = dlx_vhost(dlx_type="direct")
    vhost.declare_queue("work", arguments={"x-dead-letter-exchange": "dlx", "x-max-length": 0})
    publish(vhost, "a", "work")  # routing key "work" is not bound to dlx with "dl"
    assert dead.message_count == 0
    vhost.bind("dead", "dlx", "work")
    publish(vhost, "b", "work")
    assert only(dead).body == b"b"


def test_missing_dlx_drops_silently() -> None:
    vhost = VirtualHost(clock=FakeClock(), wall_clock=lambda: WALL)
    vhost.declare_queue("work", arguments={"x-dead-letter-exchange": "nope", "x-max-length": 0})
    publish(vhost, "a", "work")
    assert vhost.dead_lettered_total == 0


def test_repeated_rejection_counts_deaths() -> None:
    """A rejected message may cycle back to its queue; x-death counts each death."""
    vhost = VirtualHost(clock=FakeClock(), wall_clock=lambda: WALL)
    work = vhost.declare_queue("work", arguments={"x-dead-letter-exchange": ""})
    publish(vhost, "a", "work")
    consumer = FakeConsumer()
    work.add_consumer(consumer)
    for expected in (1, 2, 3):
        entry = consumer.unacked.pop()
        work.reject(entry, requeue=False)
        assert work.unacked == 1  # it came straight back and was delivered again
        redelivered = consumer.unacked[0].message
        (death,) = redelivered.headers["x-death"]
        assert death["count"] == expected
        assert death["reason"] == "rejected"
        assert redelivered.headers["x-first-death-reason"] == "rejected"


def test_deaths_for_different_reasons_are_separate_newest_first() -> None:
    clock = FakeClock()
    vhost, dead = dlx_vhost(clock)
    vhost.declare_queue(
        "first", arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "second"}
    )
    second = vhost.declare_queue("second", arguments={"x-dead-letter-exchange": "dlx"})
    publish(vhost, "a", "first")
    first_consumer = FakeConsumer()
    first = vhost.queue("first")
    first.add_consumer(first_consumer)
    first.reject(first_consumer.unacked[0], requeue=False)
    consumer = FakeConsumer()
    second.add_consumer(consumer)
    second.reject(consumer.unacked[0], requeue=False)
    headers = only(dead).headers
    assert [(d["queue"], d["reason"]) for d in headers["x-death"]] == [
        ("second", "rejected"),
        ("first", "rejected"),
    ]
    assert headers["x-first-death-queue"] == "first"
    assert headers["x-death"][1]["routing-keys"] == ["first"]
    assert headers["x-death"][0]["routing-keys"] == ["second"]


def test_synchronous_dlx_cycle_terminates() -> None:
    vhost = VirtualHost(clock=FakeClock(), wall_clock=lambda: WALL)
    for name, other in (("q1", "q2"), ("q2", "q1")):
        vhost.declare_queue(
            name,
            arguments={
                "x-max-length": 0,
                "x-dead-letter-exchange": "",
                "x-dead-letter-routing-key": other,
            },
        )
    publish(vhost, "a", "q1")
    assert vhost.queue("q1").message_count == 0
    assert vhost.queue("q2").message_count == 0
    assert vhost.dead_lettered_total == 1  # q1 -> q2; back into q1 is a cycle


def test_ttl_self_cycle_is_dropped() -> None:
    """Dead-lettering back into the queue it died in, with no rejection, drops (RabbitMQ)."""
    clock = FakeClock()
    vhost = VirtualHost(clock=clock, wall_clock=lambda: WALL)
    queue = vhost.declare_queue(
        "loop", arguments={"x-message-ttl": 10, "x-dead-letter-exchange": ""}
    )
    publish(vhost, "a", "loop")
    for _ in range(5):
        clock.advance(1)
        vhost.tick()
    assert queue.message_count == 0
    assert queue.expired_total == 1  # it never came back
    assert vhost.dead_lettered_total == 0


def test_ttl_cycle_between_two_queues_is_dropped() -> None:
    clock = FakeClock()
    vhost = VirtualHost(clock=clock, wall_clock=lambda: WALL)
    for name, other in (("q1", "q2"), ("q2", "q1")):
        vhost.declare_queue(
            name,
            arguments={
                "x-message-ttl": 10,
                "x-dead-letter-exchange": "",
                "x-dead-letter-routing-key": other,
            },
        )
    publish(vhost, "a", "q1")
    for _ in range(10):
        clock.advance(1)
        vhost.tick()
    assert vhost.queue("q1").message_count == 0
    assert vhost.queue("q2").message_count == 0
    # q1 -> q2 once; back to q1 would be a cycle, so it is dropped there
    assert vhost.dead_lettered_total == 1
    assert vhost.queue("q1").expired_total == 1
    assert vhost.queue("q2").expired_total == 1


def test_cycle_drops_only_the_cyclic_copy() -> None:
    clock = FakeClock()
    vhost, dead = dlx_vhost(clock)
    work = vhost.declare_queue(
        "work", arguments={"x-message-ttl": 10, "x-dead-letter-exchange": "dlx"}
    )
    vhost.bind("work", "dlx", "")  # the fanout DLX also feeds the queue itself
    publish(vhost, "a", "work")
    clock.advance(1)
    vhost.tick()
    assert only(dead).body == b"a"
    assert work.message_count == 0


def test_empty_dead_letter_routing_key_is_used_as_given() -> None:
    vhost, dead = dlx_vhost(dlx_type="direct")
    vhost.bind("dead", "dlx", "")
    vhost.declare_queue(
        "work",
        arguments={
            "x-dead-letter-exchange": "dlx",
            "x-dead-letter-routing-key": "",
            "x-max-length": 0,
        },
    )
    publish(vhost, "a", "work")
    assert only(dead).routing_key == ""


def test_dlx_cycle_through_another_queue_keeps_going_when_a_client_rejected() -> None:
    clock = FakeClock()
    vhost = VirtualHost(clock=clock, wall_clock=lambda: WALL)
    vhost.declare_queue(
        "work",
        arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "retry"},
    )
    vhost.declare_queue(
        "retry",
        arguments={
            "x-message-ttl": 10,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": "work",
        },
    )
    publish(vhost, "job", "work")
    work = vhost.queue("work")
    consumer = FakeConsumer()
    work.add_consumer(consumer)
    # the retry pattern: reject -> wait in "retry" -> expire back to "work", three rounds
    for _ in range(3):
        work.reject(consumer.unacked.pop(), requeue=False)
        clock.advance(1)
        vhost.tick()
        assert len(consumer.unacked) == 1
    deaths = consumer.unacked[0].message.headers["x-death"]
    assert {(d["queue"], d["reason"]): d["count"] for d in deaths} == {
        ("work", "rejected"): 3,
        ("retry", "expired"): 3,
    }


# -- random operation sequences ----------------------------------------------------------
class _MachineConsumer:
    def __init__(self, machine: QueueMachine, tag: str, credit: int | None, no_ack: bool):
        self.machine = machine
        self.tag = tag
        self.exclusive = False
        self.credit = credit
        self.no_ack = no_ack

    def can_deliver(self) -> bool:
        return self.credit is None or self.credit > 0

    def deliver(self, queue: Queue, entry: Entry) -> None:
        assert self.can_deliver()
        if self.credit is not None:
            self.credit -= 1
        self.machine.handed_out(entry, self.no_ack)


class QueueMachine(RuleBasedStateMachine):
    """Random enqueue/deliver/ack/requeue/reject/expire/purge sequences keep the books."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.queue: Queue | None = None
        self.enq: set[Entry] = set()
        self.deq: set[Entry] = set()
        self.unacked: list[Entry] = []
        self.delivered_before: set[Entry] = set()
        self.dead: list[tuple[Entry, str]] = []
        self.consumers: list[_MachineConsumer] = []
        self.bodies = 0

    # observer interface (the machine observes the queue)
    def enqueued(self, queue: Queue, entry: Entry) -> None:
        assert entry not in self.enq, "enqueued twice"
        self.enq.add(entry)

    def dequeued(self, queue: Queue, entry: Entry) -> None:
        assert entry in self.enq, "dequeued without enqueue"
        assert entry not in self.deq, "dequeued twice"
        assert entry not in queue.entries(), "dequeued but still ready"
        self.deq.add(entry)

    def dead_letter(self, queue: Queue, entry: Entry, reason: str) -> None:
        self.dead.append((entry, reason))
        if reason == "expired":
            assert entry.expires_at is not None and entry.expires_at <= self.clock.now

    def handed_out(self, entry: Entry, no_ack: bool) -> None:
        q = self.q
        assert entry in self.enq
        assert entry not in q.entries()
        assert entry.redelivered == (entry in self.delivered_before)
        self.delivered_before.add(entry)
        q.delivered(entry, no_ack)
        if not no_ack:
            self.unacked.append(entry)

    @property
    def q(self) -> Queue:
        assert self.queue is not None
        return self.queue

    @initialize(
        max_length=st.none() | st.integers(0, 4),
        max_bytes=st.none() | st.integers(0, 12),
        overflow=st.sampled_from(["drop-head", "reject-publish", "reject-publish-dlx"]),
        ttl=st.none() | st.integers(0, 50),
        default_limit=st.sampled_from([0, 0, 15]),
    )
    def setup(
        self,
        max_length: int | None,
        max_bytes: int | None,
        overflow: str,
        ttl: int | None,
        default_limit: int,
    ) -> None:
        args: dict[str, Any] = {"x-overflow": overflow, "x-dead-letter-exchange": "dlx"}
        for name, value in (
            ("x-max-length", max_length),
            ("x-max-length-bytes", max_bytes),
            ("x-message-ttl", ttl),
        ):
            if value is not None:
                args[name] = value
        self.queue = Queue(
            "q",
            clock=self.clock,
            arguments=args,
            dead_letter=self.dead_letter,
            default_limit_bytes=default_limit,
        )
        self.queue.observers.append(self)

    @rule(size=st.integers(0, 6), expiration=st.none() | st.integers(0, 60))
    def enqueue(self, size: int, expiration: int | None) -> None:
        self.bodies += 1
        body = str(self.bodies).encode().ljust(size, b".")[: max(size, 1)]
        props = {} if expiration is None else {"expiration": str(expiration)}
        msg = Message("", "q", raw_props(**props) if props else b"\x00\x00", body)
        before_enq, before_dead = len(self.enq), len(self.dead)
        accepted = self.q.enqueue(msg)
        heard = [e for e in self.enq if e.message is msg]
        dead_new = [e for e, _ in self.dead[before_dead:] if e.message is msg and e.position == 0]
        if accepted:
            # on the queue (or delivered), or dropped at once as the one that cannot fit
            assert len(heard) + len(dead_new) == 1
        else:
            assert not heard
            assert len(self.enq) == before_enq
            assert len(dead_new) == (1 if self.q.limits.overflow == "reject-publish-dlx" else 0)

    @rule(credit=st.none() | st.integers(0, 3), no_ack=st.booleans())
    def add_consumer(self, credit: int | None, no_ack: bool) -> None:
        consumer = _MachineConsumer(self, f"c{len(self.consumers)}", credit, no_ack)
        self.consumers.append(consumer)
        self.q.add_consumer(consumer)

    @precondition(lambda self: self.consumers)
    @rule(index=st.integers(0, 100))
    def remove_consumer(self, index: int) -> None:
        consumer = self.consumers.pop(index % len(self.consumers))
        self.q.remove_consumer(consumer)

    @precondition(lambda self: self.consumers)
    @rule(index=st.integers(0, 100), credit=st.none() | st.integers(0, 3))
    def set_credit(self, index: int, credit: int | None) -> None:
        self.consumers[index % len(self.consumers)].credit = credit
        self.q.dispatch()

    @rule(no_ack=st.booleans())
    def get(self, no_ack: bool) -> None:
        entry = self.q.get()
        if entry is not None:
            self.handed_out(entry, no_ack)

    @precondition(lambda self: self.unacked)
    @rule(index=st.integers(0, 100))
    def ack(self, index: int) -> None:
        entry = self.unacked.pop(index % len(self.unacked))
        self.q.settle(entry)
        assert entry in self.deq

    @precondition(lambda self: self.unacked)
    @rule(index=st.integers(0, 100), requeue=st.booleans())
    def reject(self, index: int, requeue: bool) -> None:
        entry = self.unacked.pop(index % len(self.unacked))
        dead_before = len(self.dead)
        self.q.reject(entry, requeue)
        if not requeue:
            assert entry in self.deq
            assert self.dead[dead_before] == (entry, "rejected")

    @precondition(lambda self: self.unacked)
    @rule(picks=st.lists(st.integers(0, 100), min_size=1, max_size=5))
    def requeue(self, picks: list[int]) -> None:
        chosen: list[Entry] = []
        for pick in picks:
            if self.unacked:
                chosen.append(self.unacked.pop(pick % len(self.unacked)))
        self.q.requeue(chosen)
        for entry in chosen:
            assert entry.redelivered
            assert entry in self.q.entries() or entry in self.unacked or entry in self.deq

    @rule(ms=st.integers(0, 40))
    def advance_and_expire(self, ms: int) -> None:
        self.clock.advance(ms / 1000)
        self.q.expire()
        head = self.q.entries()[:1]
        assert not head or head[0].expires_at is None or head[0].expires_at > self.clock.now

    @rule()
    def purge(self) -> None:
        count = self.q.message_count
        assert self.q.purge() == count
        assert self.q.message_count == 0

    @rule()
    def dispatch(self) -> None:
        self.q.dispatch()

    @invariant()
    def books_balance(self) -> None:
        if self.queue is None:
            return
        q = self.queue
        ready = q.entries()
        ready_set = set(ready)
        unacked_set = set(self.unacked)
        assert len(ready_set) == len(ready)
        assert len(unacked_set) == len(self.unacked)
        assert not ready_set & unacked_set
        assert not ready_set & self.deq
        assert not unacked_set & self.deq
        # every enqueued message is dequeued exactly once, or still ready, or unacked
        assert self.enq == self.deq | ready_set | unacked_set
        assert q.message_count == len(ready)
        assert q.unacked == len(self.unacked)
        assert q.bytes == sum(len(e.message.body) for e in ready)
        assert q.enqueued_total == len(self.enq)
        positions = [e.position for e in ready]
        assert positions == sorted(positions)
        assert len(set(positions)) == len(positions)
        for entry, reason in self.dead:
            if entry.position:  # it had been on the queue: it left for good
                assert entry in self.deq
            assert reason in ("expired", "maxlen", "rejected")

    def teardown(self) -> None:
        if self.queue is None:
            return
        for entry in self.unacked:
            self.queue.settle(entry)
        self.unacked.clear()
        self.queue.purge()
        assert self.deq == self.enq
        assert self.queue.unacked == 0
        assert self.queue.bytes == 0


TestQueueMachine = QueueMachine.TestCase
TestQueueMachine.settings = settings(max_examples=300, stateful_step_count=50, deadline=None)
