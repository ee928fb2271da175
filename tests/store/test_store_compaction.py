"""Compaction end to end (a real qpidd, pika): publishing and consuming far more than a
segment (16 MiB) keeps the store directory to a few segments, and what is still live in
the oldest ones (messages nobody consumed, one delivered and not acked) is copied forward
and back after a crash (marked redelivered, as every message recovered after a crash)."""

from __future__ import annotations

import signal

from common.polling import poll_until
from tests.store.store_brokers import PERSISTENT, StoreBrokers, connect, drain, events

MIB = 1024 * 1024
SEGMENT = 16 * MIB  # the journal's segment size
ROUNDS = 6
PER_ROUND = 24
BODY = 512 * 1024  # 6 x 24 x 512 KiB = 72 MiB through the store


def _store_bytes(brokers: StoreBrokers) -> int:
    total = 0
    for path in brokers.segments():
        try:
            total += path.stat().st_size
        except FileNotFoundError:  # compacted meanwhile
            continue
    return total


def test_the_store_stays_small_while_messages_flow_through_it(brokers: StoreBrokers) -> None:
    broker = brokers.start()
    connection = connect(broker)
    channel = connection.channel()
    channel.confirm_delivery()
    channel.queue_declare("keep", durable=True)
    channel.queue_declare("flow", durable=True)
    channel.basic_publish("", "keep", b"the old one", PERSISTENT)
    channel.basic_publish("", "keep", b"never delivered", PERSISTENT)
    holder = connection.channel()  # takes "the old one" and never acks it
    method, _properties, body = holder.basic_get("keep", auto_ack=False)
    assert body == b"the old one"
    largest = 0
    for round_ in range(ROUNDS):
        for i in range(PER_ROUND):
            body = bytes([round_ * PER_ROUND + i & 0xFF]) * BODY
            channel.basic_publish("", "flow", body, PERSISTENT)
        for _ in range(PER_ROUND):
            method, _properties, _body = channel.basic_get("flow", auto_ack=False)
            assert method is not None
            channel.basic_ack(method.delivery_tag)
        largest = max(largest, _store_bytes(brokers))
    through = ROUNDS * PER_ROUND * BODY
    # Settled segments go: a few segments at most, whatever went through.
    poll_until(
        lambda: _store_bytes(brokers) <= 2 * SEGMENT,
        30,
        lambda: f"the store to shrink ({_store_bytes(brokers)} bytes)",
    )
    assert largest <= 4 * SEGMENT < through, largest
    compacted = events(broker, "store_segment_compacted")
    assert len(compacted) >= 2
    assert compacted[0]["segment"] == 1  # the oldest first, "the old one" copied forward
    assert compacted[0]["copied"] >= 6  # the two queues, two messages, two enqueues
    assert int(brokers.segments()[0].stem) > 1
    # An ack has no reply: a confirmed publish after the acks makes their dequeues durable
    # (the journal writes in order) before the kill.
    channel.queue_declare("marker", durable=True)
    channel.basic_publish("", "marker", b"after the acks", PERSISTENT)
    connection.close()
    assert broker.stop(signal.SIGKILL) == -signal.SIGKILL

    broker = brokers.start()
    connection = connect(broker)
    channel = connection.channel()
    # Copied forward, in order; after a crash every recovered message is marked
    # redelivered (which were delivered is not known).
    assert [(body, redelivered) for body, redelivered, _ in drain(channel, "keep")] == [
        (b"the old one", True),
        (b"never delivered", True),
    ]
    assert drain(channel, "flow") == []
    connection.close()
