"""Priority queues, consumer priorities, single active consumer and direct reply-to with
real clients (pika, aio-pika) against a real qpidd."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import aio_pika
import pika
from pika.adapters.blocking_connection import BlockingChannel

from tests.broker_process import BrokerProcess
from tests.compat.test_exchange_bindings import drain
from tests.compat.test_small_extensions import closed_with, run
from tests.e2e.support import unique


def pump_until(
    conn: pika.BlockingConnection, done: Callable[[], bool], timeout: float = 10
) -> None:
    """Let pika dispatch deliveries until ``done()`` (or the deadline: the assert says)."""
    deadline = time.monotonic() + timeout
    while not done() and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.05)


def publish_priorities(channel: BlockingChannel, queue: str, items: list[tuple[str, int]]) -> None:
    for body, priority in items:
        props = pika.BasicProperties(priority=priority) if priority >= 0 else None
        channel.basic_publish("", queue, body.encode(), props)


def test_priority_queue_with_pika(conn: pika.BlockingConnection) -> None:
    channel = conn.channel()
    channel.confirm_delivery()
    queue = unique("prio")
    channel.queue_declare(queue, arguments={"x-max-priority": 10})
    items = [("low", 1), ("none", -1), ("top", 10), ("over", 200), ("mid", 5), ("low2", 1)]
    publish_priorities(channel, queue, items)
    assert drain(channel, queue) == [b"top", b"over", b"mid", b"low", b"low2", b"none"]
    # a consumer sees the same order, and a requeue puts messages back in their place
    publish_priorities(channel, queue, [("a", 0), ("b", 9), ("c", 9)])
    method, _props, body = channel.basic_get(queue)
    assert body == b"b"
    channel.basic_nack(method.delivery_tag, requeue=True)
    assert drain(channel, queue) == [b"b", b"c", b"a"]
    closed_with(
        conn, 406, lambda: conn.channel().queue_declare(queue, arguments={"x-max-priority": 3})
    )
    closed_with(
        conn,
        406,
        lambda: conn.channel().queue_declare(unique("bad"), arguments={"x-max-priority": 256}),
    )
    channel.queue_delete(queue)


def test_consumer_priorities_and_single_active_consumer(conn: pika.BlockingConnection) -> None:
    channel = conn.channel()
    channel.basic_qos(prefetch_count=1)
    queue = unique("cprio")
    channel.queue_declare(queue, auto_delete=True)
    got: dict[str, list[bytes]] = {"low": [], "high": []}

    def on(name: str) -> Callable[..., None]:
        def callback(ch: BlockingChannel, method: object, props: object, body: bytes) -> None:
            got[name].append(body)

        return callback

    channel.basic_consume(queue, on("low"), auto_ack=True)
    channel.basic_consume(queue, on("high"), auto_ack=True, arguments={"x-priority": 10})
    for i in range(5):
        channel.basic_publish("", queue, str(i).encode())
    pump_until(conn, lambda: len(got["high"]) + len(got["low"]) == 5)
    assert (got["high"], got["low"]) == ([b"0", b"1", b"2", b"3", b"4"], [])
    closed_with(
        conn,
        406,
        lambda: conn.channel().basic_consume(
            queue, on("x"), auto_ack=True, arguments={"x-priority": "high"}
        ),
    )

    sac = unique("sac")
    channel.queue_declare(sac, arguments={"x-single-active-consumer": True})
    seen: dict[str, list[bytes]] = {"first": [], "second": []}
    first = channel.basic_consume(sac, lambda c, m, p, b: seen["first"].append(b), auto_ack=True)
    channel.basic_consume(sac, lambda c, m, p, b: seen["second"].append(b), auto_ack=True)
    for i in range(3):
        channel.basic_publish("", sac, f"s{i}".encode())
    pump_until(conn, lambda: len(seen["first"]) + len(seen["second"]) == 3)
    assert seen == {"first": [b"s0", b"s1", b"s2"], "second": []}
    channel.basic_cancel(first)
    channel.basic_publish("", sac, b"s3")
    pump_until(conn, lambda: bool(seen["second"]))
    assert seen["second"] == [b"s3"]
    channel.queue_delete(sac)


def test_direct_reply_to_rpc_with_pika(conn: pika.BlockingConnection) -> None:
    server = conn.channel()
    requests = unique("rpc")
    server.queue_declare(requests, auto_delete=True)
    client = conn.channel()
    replies: list[tuple[bytes, str | None]] = []
    client.basic_consume(
        "amq.rabbitmq.reply-to",
        lambda ch, m, props, body: replies.append((body, props.correlation_id)),
        auto_ack=True,
    )
    assert client.queue_declare("amq.rabbitmq.reply-to", passive=True)
    client.basic_publish(
        "",
        requests,
        b"ping",
        pika.BasicProperties(reply_to="amq.rabbitmq.reply-to", correlation_id="1"),
    )
    _method, props, body = server.basic_get(requests, auto_ack=True)
    assert body == b"ping"
    assert props.reply_to.startswith("amq.rabbitmq.reply-to.")
    server.basic_publish(
        "", props.reply_to, b"pong", pika.BasicProperties(correlation_id=props.correlation_id)
    )
    pump_until(conn, lambda: bool(replies))
    assert replies == [(b"pong", "1")]
    # a request without the reply consumer on its channel: 406
    other = conn.channel()

    def request_without_reply_consumer() -> None:
        props = pika.BasicProperties(reply_to="amq.rabbitmq.reply-to")
        other.basic_publish("", requests, b"x", props)
        other.queue_declare(requests, passive=True)  # the close arrives first

    text = closed_with(conn, 406, request_without_reply_consumer)
    assert "fast reply consumer does not exist" in text


def test_direct_reply_to_rpc_with_aio_pika(shared_broker: BrokerProcess) -> None:
    async def scenario() -> None:
        connection = await aio_pika.connect(shared_broker.url)
        async with connection:
            channel = await connection.channel()
            requests = await channel.declare_queue(unique("aio-rpc"), auto_delete=True)

            async def serve(message: aio_pika.abc.AbstractIncomingMessage) -> None:
                async with message.process():
                    assert message.reply_to and message.reply_to.startswith(
                        "amq.rabbitmq.reply-to."
                    )
                    await channel.default_exchange.publish(
                        aio_pika.Message(
                            message.body.upper(), correlation_id=message.correlation_id
                        ),
                        routing_key=message.reply_to,
                    )

            await requests.consume(serve)
            client = await connection.channel()
            reply_queue = await client.get_queue("amq.rabbitmq.reply-to", ensure=False)
            answers: list[bytes] = []
            done = asyncio.Event()

            async def on_reply(message: aio_pika.abc.AbstractIncomingMessage) -> None:
                answers.append(message.body)
                done.set()

            await reply_queue.consume(on_reply, no_ack=True)
            await client.default_exchange.publish(
                aio_pika.Message(b"hello", reply_to="amq.rabbitmq.reply-to", correlation_id="7"),
                routing_key=requests.name,
            )
            await done.wait()
            assert answers == [b"HELLO"]

    run(scenario)
