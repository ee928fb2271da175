"""Queue length limits and overflow modes, and the x- arguments a queue accepts."""

from __future__ import annotations

from typing import Any

import pytest

from broker.core.errors import AmqpError, ReplyCode
from broker.core.queue_limits import QueueLimits
from tests.core.fakes import FakeConsumer, message
from tests.core.queue_support import DeadLetters, fill, make_queue, ready


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
