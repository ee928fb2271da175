"""aio-pika (robust connections, publisher confirms by default) against a real qpidd.

pytest-asyncio is not installed: each test runs its coroutine with ``asyncio.run`` and
bounds it with ``asyncio.timeout``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aio_pika
import aiormq
import pytest
from aio_pika.abc import AbstractIncomingMessage
from pamqp import commands

from tests.broker_process import BrokerProcess
from tests.e2e.support import events, unique

TIMEOUT = 15.0


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(TIMEOUT):
            await scenario()

    asyncio.run(bounded())


async def take(queue: aio_pika.abc.AbstractQueue, count: int) -> list[AbstractIncomingMessage]:
    """``count`` messages from ``queue.iterator()``, each acknowledged."""
    received: list[AbstractIncomingMessage] = []
    async with queue.iterator() as messages:
        async for message in messages:
            async with message.process():
                received.append(message)
            if len(received) == count:
                break
    return received


def test_declare_bind_publish_with_confirms_and_iterate(shared_broker: BrokerProcess) -> None:
    async def scenario() -> None:
        connection = await aio_pika.connect_robust(shared_broker.url)
        async with connection:
            channel = await connection.channel()  # publisher confirms: aio-pika's default
            exchange = await channel.declare_exchange(
                unique("aio-ex"), aio_pika.ExchangeType.DIRECT, auto_delete=True
            )
            queue = await channel.declare_queue(unique("aio-q"))
            await queue.bind(exchange, routing_key="orders")
            for i in range(20):
                confirmation = await exchange.publish(
                    aio_pika.Message(f"order {i}".encode()), routing_key="orders"
                )
                assert isinstance(confirmation, commands.Basic.Ack)
            received = await take(queue, 20)
            assert [m.body for m in received] == [f"order {i}".encode() for i in range(20)]
            assert {m.routing_key for m in received} == {"orders"}
            assert {m.exchange for m in received} == {exchange.name}
            assert not any(m.redelivered for m in received)
            declared = await channel.declare_queue(queue.name, passive=True)
            assert declared.declaration_result.message_count == 0
            await queue.delete()

    run(scenario)


def test_message_properties_round_trip(shared_broker: BrokerProcess) -> None:
    timestamp = datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)
    headers: dict[str, Any] = {
        "text": "héllo",
        "int": 42,
        "negative": -7,
        "big": 2**40,
        "float": 1.5,
        "bool": True,
        "none": None,
        "nested": {"list": [1, "two", False]},
        "when": timestamp,
    }

    async def scenario() -> None:
        connection = await aio_pika.connect_robust(shared_broker.url)
        async with connection:
            channel = await connection.channel()
            # Not auto-delete: the iterator's basic.cancel would delete it.
            queue = await channel.declare_queue(unique("props"))
            sent = aio_pika.Message(
                b'{"k": 1}',
                headers=headers,
                content_type="application/json",
                content_encoding="utf-8",
                correlation_id="corr-1",
                reply_to="replies",
                message_id="msg-1",
                expiration=60,  # seconds; on the wire "60000" milliseconds
                delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                priority=7,
                timestamp=timestamp,
                app_id="e2e-app",
                type="order.created",
                user_id="guest",
            )
            await channel.default_exchange.publish(sent, routing_key=queue.name)
            [got] = await take(queue, 1)
            assert got.body == b'{"k": 1}'
            assert got.headers == headers
            assert got.content_type == "application/json"
            assert got.content_encoding == "utf-8"
            assert got.correlation_id == "corr-1"
            assert got.reply_to == "replies"
            assert got.message_id == "msg-1"
            assert got.expiration == 60
            assert got.delivery_mode == aio_pika.DeliveryMode.PERSISTENT
            assert got.priority == 7
            assert got.timestamp == timestamp
            assert got.app_id == "e2e-app"
            assert got.type == "order.created"
            assert got.user_id == "guest"

            # And a message without those properties arrives without them.
            await channel.default_exchange.publish(aio_pika.Message(b""), routing_key=queue.name)
            [bare] = await take(queue, 1)
            assert bare.body == b""
            assert bare.headers == {}
            assert bare.content_type is None and bare.correlation_id is None
            assert bare.expiration is None and bare.timestamp is None
            assert bare.delivery_mode == aio_pika.DeliveryMode.NOT_PERSISTENT
            await queue.delete()

    run(scenario)


def test_large_body_spans_many_frames(shared_broker: BrokerProcess) -> None:
    body = os.urandom(1024 * 1024)  # 1 MiB: at least 8 body frames of frame-max 131072

    async def scenario() -> None:
        connection = await aio_pika.connect_robust(shared_broker.url)
        async with connection:
            channel = await connection.channel()
            queue = await channel.declare_queue(unique("large"))
            for _ in range(3):
                confirmation = await channel.default_exchange.publish(
                    aio_pika.Message(body), routing_key=queue.name
                )
                assert isinstance(confirmation, commands.Basic.Ack)
            received = await take(queue, 3)
            assert all(m.body == body for m in received)
            assert all(m.body_size == len(body) for m in received)
            await queue.delete()

    run(scenario)


def test_unroutable_mandatory_is_returned_and_overflow_is_nacked(
    shared_broker: BrokerProcess,
) -> None:
    async def scenario() -> None:
        connection = await aio_pika.connect_robust(shared_broker.url)
        async with connection:
            channel = await connection.channel()
            result = await channel.default_exchange.publish(
                aio_pika.Message(b"nowhere"), routing_key=unique("unbound"), mandatory=True
            )
            assert isinstance(result, aiormq.abc.DeliveredMessage)
            assert isinstance(result.delivery, commands.Basic.Return)
            assert result.delivery.reply_code == 312

            full = await channel.declare_queue(
                unique("full"),
                auto_delete=True,
                arguments={"x-max-length": 0, "x-overflow": "reject-publish"},
            )
            with pytest.raises(aiormq.exceptions.DeliveryError) as info:
                await channel.default_exchange.publish(
                    aio_pika.Message(b"refused"), routing_key=full.name
                )
            assert isinstance(info.value.frame, commands.Basic.Nack)

            # Channel errors surface as exceptions, and a new channel works after one.
            with pytest.raises(aio_pika.exceptions.ChannelNotFoundEntity):
                await channel.declare_queue(unique("missing"), passive=True)
            other = await connection.channel()
            await other.declare_queue(full.name, passive=True)

    run(scenario)


def test_robust_connection_recovers_after_broker_restart(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "first").start()
    restarted: list[BrokerProcess] = []
    queue_name = unique("robust")

    async def scenario() -> None:
        url = broker.url + "?reconnect_interval=0.1"
        connection = await aio_pika.connect_robust(url)
        async with connection:
            channel = await connection.channel()
            queue = await channel.declare_queue(queue_name, auto_delete=True)
            received: asyncio.Queue[bytes] = asyncio.Queue()

            async def on_message(message: AbstractIncomingMessage) -> None:
                async with message.process():
                    await received.put(message.body)

            await queue.consume(on_message)
            await channel.default_exchange.publish(aio_pika.Message(b"before"), queue_name)
            assert await received.get() == b"before"

            reconnected = asyncio.Event()
            connection.reconnect_callbacks.add(lambda *_: reconnected.set())
            # Graceful stop: the broker closes every connection with 320 CONNECTION_FORCED.
            await asyncio.to_thread(broker.stop)
            assert any(e["event"] == "broker_stopped" for e in events(broker)), (
                "broker did not stop cleanly"
            )
            second = BrokerProcess(tmp_path / "second", port=broker.port)
            restarted.append(second)
            await asyncio.to_thread(second.start)
            await reconnected.wait()
            # The robust channel re-declared the queue and restarted the consumer.
            while True:
                try:
                    await channel.default_exchange.publish(
                        aio_pika.Message(b"after"), queue_name, mandatory=True
                    )
                    break
                except aio_pika.exceptions.ChannelInvalidStateError:
                    await asyncio.sleep(0.05)  # the channel is still being restored
            assert await received.get() == b"after"

    try:
        run(scenario)
    finally:
        broker.stop()
        for process in restarted:
            process.stop()
