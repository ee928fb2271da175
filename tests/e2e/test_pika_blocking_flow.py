"""pika BlockingConnection: prefetch per consumer and per channel, redelivery, consumer cancel."""

from __future__ import annotations

import pika
from pika.spec import Basic

from tests.broker_process import BrokerProcess
from tests.e2e.support import connect, pump_until, ready_count, unique


def test_prefetch_count_per_consumer(conn: pika.BlockingConnection) -> None:
    channel = conn.channel()
    queue = unique("prefetch")
    channel.queue_declare(queue)
    for i in range(10):
        channel.basic_publish("", queue, str(i).encode())
    channel.basic_qos(prefetch_count=3)
    deliveries: list[Basic.Deliver] = []
    channel.basic_consume(queue, lambda _ch, method, _p, _b: deliveries.append(method))
    # Dispatch happens while the broker handles basic.consume, so one more round trip
    # shows exactly how many it handed out: three, and seven still ready.
    assert ready_count(channel, queue) == 7
    pump_until(conn, lambda: len(deliveries) >= 3)
    assert len(deliveries) == 3

    channel.basic_ack(deliveries[0].delivery_tag)  # one credit back: one more delivery
    assert ready_count(channel, queue) == 6
    pump_until(conn, lambda: len(deliveries) >= 4)
    channel.basic_ack(deliveries[3].delivery_tag, multiple=True)  # three credits back
    assert ready_count(channel, queue) == 3
    pump_until(conn, lambda: len(deliveries) >= 7)
    assert len(deliveries) == 7
    channel.close()  # three unacknowledged deliveries go back
    assert ready_count(conn.channel(), queue) == 6


def test_prefetch_count_global_is_shared_by_the_channel(conn: pika.BlockingConnection) -> None:
    channel = conn.channel()
    queues = [unique("global-a"), unique("global-b")]
    for queue in queues:
        channel.queue_declare(queue)
        for i in range(5):
            channel.basic_publish("", queue, str(i).encode())
    channel.basic_qos(prefetch_count=4, global_qos=True)
    deliveries: list[Basic.Deliver] = []
    for queue in queues:
        channel.basic_consume(queue, lambda _ch, method, _p, _b: deliveries.append(method))
    assert sum(ready_count(channel, queue) for queue in queues) == 6
    pump_until(conn, lambda: len(deliveries) >= 4)
    assert len(deliveries) == 4
    channel.basic_ack(0, multiple=True)
    assert sum(ready_count(channel, queue) for queue in queues) == 2
    channel.close()
    for queue in queues:
        conn.channel().queue_delete(queue)


def test_unacked_messages_are_redelivered_when_the_connection_closes(
    shared_broker: BrokerProcess,
) -> None:
    queue = unique("redeliver")
    first = connect(shared_broker)
    channel = first.channel()
    channel.queue_declare(queue)
    for body in (b"one", b"two", b"three"):
        channel.basic_publish("", queue, body)
    deliveries: list[Basic.Deliver] = []
    channel.basic_consume(queue, lambda _ch, method, _p, _b: deliveries.append(method))
    pump_until(first, lambda: len(deliveries) == 3)
    channel.basic_ack(deliveries[0].delivery_tag)
    first.close()

    second = connect(shared_broker)
    try:
        channel = second.channel()
        assert ready_count(channel, queue) == 2
        for expected in (b"two", b"three"):
            method, _, body = channel.basic_get(queue, auto_ack=True)
            assert (body, method.redelivered) == (expected, True)
        channel.queue_delete(queue)
    finally:
        second.close()


def test_consumer_is_cancelled_when_its_queue_is_deleted(conn: pika.BlockingConnection) -> None:
    channel = conn.channel()
    queue = unique("cancel-notify")
    channel.queue_declare(queue)
    cancelled: list[Basic.Cancel] = []
    channel.add_on_cancel_callback(lambda frame: cancelled.append(frame.method))
    tag = channel.basic_consume(queue, lambda *_: None)
    conn.channel().queue_delete(queue)
    pump_until(conn, lambda: cancelled)
    assert cancelled[0].consumer_tag == tag
    assert channel.is_open
