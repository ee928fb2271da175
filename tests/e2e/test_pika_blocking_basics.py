"""pika BlockingConnection basics: publish, consume, get, ack/nack/reject, confirms, returns, tx."""

from __future__ import annotations

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker, NackError, UnroutableError
from pika.spec import Basic, BasicProperties

from tests.e2e.support import drain, pump_until, ready_count, unique


def test_declare_publish_consume_ack(conn: pika.BlockingConnection) -> None:
    channel = conn.channel()
    queue = unique("basic")
    declared = channel.queue_declare(queue)
    assert (declared.method.queue, declared.method.message_count) == (queue, 0)
    assert declared.method.consumer_count == 0
    for i in range(5):
        channel.basic_publish(
            "",
            queue,
            f"m{i}".encode(),
            BasicProperties(content_type="text/plain", headers={"i": i}),
        )
    assert ready_count(channel, queue) == 5

    received: list[bytes] = []
    for method, props, body in channel.consume(queue, inactivity_timeout=5):
        assert method is not None, "no delivery within 5 s"
        assert not method.redelivered
        assert method.routing_key == queue and method.exchange == ""
        assert props.content_type == "text/plain"
        assert props.headers == {"i": len(received)}
        received.append(body)
        channel.basic_ack(method.delivery_tag)
        if len(received) == 5:
            break
    assert channel.cancel() == 0
    assert received == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    channel.close()

    # Acknowledged for good: closing the channel requeued nothing.
    other = conn.channel()
    assert ready_count(other, queue) == 0
    assert other.queue_delete(queue).method.message_count == 0


def test_basic_get(conn: pika.BlockingConnection) -> None:
    channel = conn.channel()
    queue = unique("get")
    channel.queue_declare(queue)
    assert channel.basic_get(queue) == (None, None, None)
    for body in (b"a", b"b", b"c"):
        channel.basic_publish("", queue, body, BasicProperties(message_id=body.decode()))

    method, props, body = channel.basic_get(queue)
    assert body == b"a" and props.message_id == "a"
    assert (method.message_count, method.redelivered) == (2, False)
    assert (method.exchange, method.routing_key) == ("", queue)
    channel.basic_ack(method.delivery_tag)

    method, _, body = channel.basic_get(queue, auto_ack=True)
    assert (body, method.message_count) == (b"b", 1)
    method, _, body = channel.basic_get(queue, auto_ack=True)
    assert (body, method.message_count) == (b"c", 0)
    assert channel.basic_get(queue) == (None, None, None)
    channel.queue_delete(queue)


def test_nack_and_reject_with_and_without_requeue(conn: pika.BlockingConnection) -> None:
    channel = conn.channel()
    queue = unique("nack")
    channel.queue_declare(queue)
    for body in (b"a", b"b"):
        channel.basic_publish("", queue, body)

    method, _, body = channel.basic_get(queue)
    assert (body, method.redelivered) == (b"a", False)
    channel.basic_nack(method.delivery_tag, requeue=True)
    method, _, body = channel.basic_get(queue)
    assert (body, method.redelivered) == (b"a", True)  # back at the head, marked
    channel.basic_reject(method.delivery_tag, requeue=True)
    method, _, body = channel.basic_get(queue)
    assert (body, method.redelivered) == (b"a", True)
    channel.basic_reject(method.delivery_tag, requeue=False)  # dropped (no DLX)

    method, _, body = channel.basic_get(queue)
    assert (body, method.redelivered) == (b"b", False)
    channel.basic_nack(method.delivery_tag, requeue=False)
    assert channel.basic_get(queue) == (None, None, None)

    # nack multiple=True requeues every delivery up to the tag, in the original order.
    for body in (b"x", b"y", b"z"):
        channel.basic_publish("", queue, body)
    tags = [channel.basic_get(queue)[0].delivery_tag for _ in range(3)]
    channel.basic_nack(tags[-1], multiple=True, requeue=True)
    redelivered = [channel.basic_get(queue, auto_ack=True) for _ in range(3)]
    assert [body for _, _, body in redelivered] == [b"x", b"y", b"z"]
    assert all(method.redelivered for method, _, _ in redelivered)
    channel.queue_delete(queue)


def test_ack_of_unknown_delivery_tag_closes_the_channel_406(conn: pika.BlockingConnection) -> None:
    channel = conn.channel()
    channel.basic_ack(12345)
    with pytest.raises(ChannelClosedByBroker) as info:
        channel.queue_declare("", exclusive=True)
    assert info.value.reply_code == 406
    assert "PRECONDITION_FAILED" in info.value.reply_text
    assert conn.is_open


# -- publisher confirms and returns ----------------------------------------------------------
def test_confirms_unroutable_mandatory_and_reject_publish_nack(
    conn: pika.BlockingConnection,
) -> None:
    channel = conn.channel()
    channel.confirm_delivery()
    queue = unique("bounded")
    channel.queue_declare(queue, arguments={"x-max-length": 1, "x-overflow": "reject-publish"})

    channel.basic_publish("", queue, b"fits")  # confirmed (ack)
    with pytest.raises(NackError):
        channel.basic_publish("", queue, b"overflows")

    nowhere = unique("nowhere")
    with pytest.raises(UnroutableError) as returned:
        channel.basic_publish("", nowhere, b"lost", mandatory=True)
    [message] = returned.value.messages
    assert message.body == b"lost"
    assert (message.method.reply_code, message.method.reply_text) == (312, "NO_ROUTE")
    assert message.method.routing_key == nowhere

    channel.basic_publish("", nowhere, b"dropped")  # not mandatory: silently acked
    assert ready_count(channel, queue) == 1
    assert drain(channel, queue) == [b"fits"]

    # A publish to a missing exchange closes the channel with 404.
    with pytest.raises(ChannelClosedByBroker) as closed:
        channel.basic_publish(unique("no-exchange"), "rk", b"x")
    assert closed.value.reply_code == 404
    conn.channel().queue_delete(queue)


def test_mandatory_return_without_confirms(conn: pika.BlockingConnection) -> None:
    channel = conn.channel()
    returned: list[tuple[Basic.Return, bytes]] = []
    channel.add_on_return_callback(
        lambda _ch, method, _props, body: returned.append((method, body))
    )
    channel.basic_publish("amq.direct", unique("unbound"), b"back", mandatory=True)
    pump_until(conn, lambda: returned)
    method, body = returned[0]
    assert (method.reply_code, method.exchange, body) == (312, "amq.direct", b"back")


# -- transactions --------------------------------------------------------------------------
def test_tx_commit_and_rollback(conn: pika.BlockingConnection) -> None:
    tx = conn.channel()
    observer = conn.channel()
    queue = unique("tx")
    observer.queue_declare(queue)
    tx.tx_select()

    tx.basic_publish("", queue, b"rolled back")
    tx.tx_rollback()
    assert ready_count(observer, queue) == 0

    tx.basic_publish("", queue, b"committed")
    assert ready_count(observer, queue) == 0  # held until commit
    tx.tx_commit()
    assert ready_count(observer, queue) == 1

    # Acknowledgements are transactional too: a rolled-back ack leaves the delivery
    # unacknowledged, and it comes back when the channel closes.
    method, _, body = tx.basic_get(queue)
    assert body == b"committed"
    tx.basic_ack(method.delivery_tag)
    tx.tx_rollback()
    tx.close()
    assert ready_count(observer, queue) == 1

    tx = conn.channel()
    tx.tx_select()
    method, _, _ = tx.basic_get(queue)
    assert method.redelivered
    tx.basic_ack(method.delivery_tag)
    tx.tx_commit()
    tx.close()
    assert ready_count(observer, queue) == 0
    observer.queue_delete(queue)
