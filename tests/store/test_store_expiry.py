"""Message TTL and dead-lettering across a restart, end to end (real qpidd processes, pika).

A message's expiry is kept from its original publish: the broker being down does not
restart the clock (a queue's x-message-ttl and a message's expiration alike); what expired
while the broker was down is dead-lettered once it is back, and dead-lettered messages are
stored like any other persistent message.
"""

from __future__ import annotations

import signal
import time
from datetime import datetime

import pika

from common.polling import poll_until
from tests.store.store_brokers import PERSISTENT, StoreBrokers, connect, drain, events

TTL = 9.0  # seconds: a queue's x-message-ttl and the long per-message expiration
DOWN = 4.0  # the broker is down until this long after the publish


def test_expiry_counts_from_the_original_publish_and_expired_messages_are_dead_lettered(
    brokers: StoreBrokers,
) -> None:
    broker = brokers.start()
    connection = connect(broker)
    channel = connection.channel()
    channel.confirm_delivery()
    channel.exchange_declare("dlx", "fanout", durable=True)
    channel.queue_declare("dead", durable=True)
    channel.queue_bind("dead", "dlx")
    ttl_ms = int(TTL * 1000)
    channel.queue_declare(
        "ttl", durable=True, arguments={"x-message-ttl": ttl_ms, "x-dead-letter-exchange": "dlx"}
    )
    channel.queue_declare("per", durable=True, arguments={"x-dead-letter-exchange": "dlx"})
    published = time.monotonic()
    published_wall = time.time()
    channel.basic_publish("", "ttl", b"queue-ttl", PERSISTENT)

    def expiring(ms: int) -> pika.BasicProperties:
        return pika.BasicProperties(delivery_mode=2, expiration=str(ms))

    channel.basic_publish("", "per", b"short", expiring(1000))  # expires while down
    channel.basic_publish("", "per", b"long", expiring(ttl_ms))
    channel.basic_publish("", "per", b"never", PERSISTENT)
    channel.basic_publish("", "per", b"far", expiring(600_000))
    assert broker.stop(signal.SIGKILL) == -signal.SIGKILL

    poll_until(lambda: time.monotonic() >= published + DOWN, DOWN + 1, "the downtime")
    broker = brokers.start()
    # When the store was read again (wall clock, from the broker's log: a slow start spends
    # its time before it, importing): an expiry counted from the restart is after
    # recovered + TTL.
    (recovery,) = events(broker, "store_recovered")
    recovered = datetime.fromisoformat(str(recovery["ts"])).timestamp()
    assert recovered >= published_wall + DOWN - 0.1
    connection = connect(broker)
    channel = connection.channel()

    def count(queue: str) -> int:
        return int(channel.queue_declare(queue, passive=True).method.message_count)

    # "short" expired while the broker was down: dead-lettered once it is back.
    poll_until(lambda: count("dead") >= 1, 10, "the message that expired while down")
    counts = (count("dead"), count("ttl"))
    if time.monotonic() < published + TTL - 0.3:
        assert counts == (1, 1)  # the others do not expire early
    poll_until(lambda: count("dead") == 3, 2 * TTL, "the messages of TTL from the publish")
    expired_at = time.time()
    # Counted from the publish, not from the restart.
    assert expired_at < recovered + TTL - 0.5, (expired_at - published_wall, recovered)
    assert count("ttl") == 0
    assert count("per") == 2  # "never" and, behind it, "far"
    connection.close()
    assert broker.stop() == 0

    # The dead letters were stored: back after a restart, with why they died.
    broker = brokers.start()
    connection = connect(broker)
    channel = connection.channel()
    dead = drain(channel, "dead")
    deaths = {
        body: (
            properties.headers["x-death"][0]["reason"],
            properties.headers["x-death"][0]["queue"],
        )
        for body, _, properties in dead
    }
    assert deaths == {
        b"short": ("expired", "per"),
        b"queue-ttl": ("expired", "ttl"),
        b"long": ("expired", "per"),
    }
    assert [body for body, _, _ in drain(channel, "per")] == [b"never", b"far"]
    connection.close()
