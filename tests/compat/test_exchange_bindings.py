"""Exchange-to-exchange bindings with real clients: pika's exchange_bind/unbind and
aio-pika's Exchange.bind, routing through a chain and a loop, the server property."""

from __future__ import annotations

import aio_pika
import pika

from tests.broker_process import BrokerProcess
from tests.compat.test_small_extensions import closed_with, run
from tests.e2e.support import unique


def drain(channel: pika.adapters.blocking_connection.BlockingChannel, queue: str) -> list[bytes]:
    bodies: list[bytes] = []
    while True:
        method, _props, body = channel.basic_get(queue, auto_ack=True)
        if method is None:
            return bodies
        bodies.append(body)


def test_server_says_it_has_exchange_bindings(conn: pika.BlockingConnection) -> None:
    capabilities = conn._impl.server_capabilities
    assert capabilities["exchange_exchange_bindings"] is True


def test_pika_chain_and_loop(conn: pika.BlockingConnection) -> None:
    channel = conn.channel()
    channel.confirm_delivery()
    front, back, loop = unique("front"), unique("back"), unique("loop")
    channel.exchange_declare(front, "topic")
    channel.exchange_declare(back, "fanout")
    channel.exchange_declare(loop, "fanout", auto_delete=True)
    queue = channel.queue_declare("", exclusive=True).method.queue
    channel.exchange_bind(back, front, "orders.*")
    channel.exchange_bind(loop, back)
    channel.exchange_bind(back, loop)  # a loop: each exchange routes a message once
    channel.queue_bind(queue, back)
    channel.basic_publish(front, "orders.eu", b"routed", mandatory=True)
    channel.basic_publish(back, "", b"direct to back")
    assert drain(channel, queue) == [b"routed", b"direct to back"]
    channel.exchange_unbind(back, front, "orders.*")
    channel.exchange_unbind(back, front, "orders.*")  # unbound already: unbind-ok
    channel.basic_publish(front, "orders.eu", b"nowhere")
    assert drain(channel, queue) == []
    closed_with(conn, 404, lambda: conn.channel().exchange_bind(back, unique("missing")))
    closed_with(conn, 403, lambda: conn.channel().exchange_bind(back, ""))
    channel = conn.channel()
    channel.exchange_delete(back)  # the binding from loop goes, and loop (auto-delete) too
    closed_with(conn, 404, lambda: conn.channel().exchange_declare(loop, passive=True))
    conn.channel().exchange_delete(front)


def test_aio_pika_exchange_bind(shared_broker: BrokerProcess) -> None:
    async def scenario() -> None:
        connection = await aio_pika.connect(shared_broker.url)
        async with connection:
            channel = await connection.channel()
            source = await channel.declare_exchange(unique("src"), aio_pika.ExchangeType.DIRECT)
            target = await channel.declare_exchange(unique("dst"), aio_pika.ExchangeType.FANOUT)
            queue = await channel.declare_queue(exclusive=True)
            await queue.bind(target)
            await target.bind(source, routing_key="k")
            await source.publish(aio_pika.Message(b"through"), routing_key="k")
            message = await queue.get(timeout=5)
            assert message.body == b"through" and message.exchange == source.name
            await message.ack()
            await target.unbind(source, routing_key="k")
            await source.delete()
            await target.delete()

    run(scenario)
