"""Dead-lettering through a virtual host: x-death headers, dead-letter routing keys and cycles."""

from __future__ import annotations

from datetime import datetime

from broker.core.properties import decode
from broker.core.vhost import VirtualHost
from tests.core.fakes import FakeClock, FakeConsumer, message
from tests.core.queue_support import WALL, dlx_vhost, only, publish


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
    assert "original-expiration" not in death  # the message had no per-message TTL
    assert isinstance(death["time"], datetime)
    assert int(death["time"].timestamp()) == int(WALL)
    assert headers["x-first-death-reason"] == "maxlen"
    assert headers["x-first-death-queue"] == "work"
    assert headers["x-first-death-exchange"] == ""
    assert vhost.dead_letters.total == 1


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
    assert dropped.headers["x-death"][0]["original-expiration"] == "50"
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
    assert vhost.dead_letters.total == 0


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
    assert vhost.dead_letters.total == 1  # q1 -> q2; back into q1 is a cycle


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
    assert vhost.dead_letters.total == 0


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
    assert vhost.dead_letters.total == 1
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
