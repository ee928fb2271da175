"""pika BlockingConnection: dead-lettering on nack, TTL expiry and max-length; queue expiry."""

from __future__ import annotations

from datetime import datetime

import pika
from pika.exceptions import UnroutableError
from pika.spec import Basic, BasicProperties

from common.polling import poll_until
from tests.e2e.support import drain, ready_count, unique


def test_dead_letter_on_nack(conn: pika.BlockingConnection) -> None:
    channel = conn.channel()
    source, dead = unique("dlx-src"), unique("dlx-dead")
    channel.queue_declare(dead)
    channel.queue_declare(
        source,
        arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dead},
    )
    channel.basic_publish(
        "", source, b"poison", BasicProperties(headers={"k": "v"}, message_id="m-1")
    )
    method, _, _ = channel.basic_get(source)
    channel.basic_nack(method.delivery_tag, requeue=False)

    method, props, body = channel.basic_get(dead, auto_ack=True)
    assert body == b"poison"
    assert (method.exchange, method.routing_key) == ("", dead)
    assert props.message_id == "m-1"
    headers = props.headers
    assert headers["k"] == "v"
    [death] = headers["x-death"]
    assert death["reason"] == "rejected"
    assert death["queue"] == source
    assert death["count"] == 1
    assert death["exchange"] == ""
    assert death["routing-keys"] == [source]
    assert isinstance(death["time"], datetime)
    assert headers["x-first-death-reason"] == "rejected"
    assert headers["x-first-death-queue"] == source
    assert headers["x-first-death-exchange"] == ""
    assert ready_count(channel, source) == 0
    channel.queue_delete(source)
    channel.queue_delete(dead)


def test_dead_letter_on_ttl_expiry(conn: pika.BlockingConnection) -> None:
    channel = conn.channel()
    dlx, dead = unique("dlx"), unique("expired")
    queue_ttl, message_ttl = unique("queue-ttl"), unique("message-ttl")
    channel.exchange_declare(dlx, "direct", auto_delete=True)
    channel.queue_declare(dead)
    for source in (queue_ttl, message_ttl):
        channel.queue_bind(dead, dlx, routing_key=source)  # DLX keeps the original key
    channel.queue_declare(queue_ttl, arguments={"x-message-ttl": 50, "x-dead-letter-exchange": dlx})
    channel.queue_declare(message_ttl, arguments={"x-dead-letter-exchange": dlx})
    channel.basic_publish("", queue_ttl, b"queue-ttl")
    channel.basic_publish("", message_ttl, b"message-ttl", BasicProperties(expiration="50"))

    got: dict[bytes, tuple[Basic.GetOk, BasicProperties]] = {}

    def collect() -> bool:
        method, props, body = channel.basic_get(dead, auto_ack=True)
        if method is not None:
            got[body] = (method, props)
        return len(got) == 2

    poll_until(collect, 5)
    for body, source in ((b"queue-ttl", queue_ttl), (b"message-ttl", message_ttl)):
        method, props = got[body]
        assert (method.exchange, method.routing_key) == (dlx, source)
        assert props.expiration is None  # the per-message TTL does not follow it
        [death] = props.headers["x-death"]
        assert (death["reason"], death["queue"], death["count"]) == ("expired", source, 1)
        assert death["routing-keys"] == [source]
        assert props.headers["x-first-death-reason"] == "expired"
    assert ready_count(channel, queue_ttl) == ready_count(channel, message_ttl) == 0
    for queue in (queue_ttl, message_ttl, dead):
        channel.queue_delete(queue)


def test_max_length_drop_head_dead_letters_the_oldest(conn: pika.BlockingConnection) -> None:
    channel = conn.channel()
    source, dead = unique("maxlen"), unique("maxlen-dead")
    channel.queue_declare(dead)
    channel.queue_declare(
        source,
        arguments={
            "x-max-length": 2,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": dead,
        },
    )
    for body in (b"1", b"2", b"3", b"4"):
        channel.basic_publish("", source, body)
    assert drain(channel, source) == [b"3", b"4"]
    _, props, body = channel.basic_get(dead, auto_ack=True)
    assert body == b"1" and props.headers["x-death"][0]["reason"] == "maxlen"
    assert drain(channel, dead) == [b"2"]
    channel.queue_delete(source)
    channel.queue_delete(dead)


def test_unused_queue_expires(conn: pika.BlockingConnection) -> None:
    queue = unique("expires")
    channel = conn.channel()
    channel.queue_declare(queue, arguments={"x-expires": 200})
    channel.confirm_delivery()

    def gone() -> bool:
        # Publishing does not count as use (a passive declare would renew the lease).
        try:
            channel.basic_publish("", queue, b"probe", mandatory=True)
        except UnroutableError:
            return True
        return False

    poll_until(gone, 5, interval=0.05)
