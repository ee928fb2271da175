"""pika's asynchronous adapters: confirms and a consumer driven by one I/O loop.

The same callback-driven scenario runs on SelectConnection (pika's own ioloop) and on
AsyncioConnection: open a channel, enable publisher confirms, declare a queue, start a
consumer, publish N messages; then every message must be received exactly once, in order,
and every publish confirmed (acks, possibly ``multiple``), before the connection is closed
and the loop stops. A timer stops the loop if that does not happen within the deadline.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pika
from pika.adapters.asyncio_connection import AsyncioConnection
from pika.spec import Basic, BasicProperties

from tests.broker_process import BrokerProcess
from tests.e2e.support import pika_params, unique

N = 1000
DEADLINE = 20.0


@dataclass
class Scenario:
    queue: str
    received: list[bytes] = field(default_factory=list)
    redelivered: int = 0
    acked: set[int] = field(default_factory=set)
    nacked: set[int] = field(default_factory=set)
    multiple_acks: int = 0
    published: int = 0
    closed_reason: Exception | None = None
    error: str | None = None
    connection: Any = None
    stop: Callable[[], None] = lambda: None

    def finished(self) -> bool:
        return len(self.received) >= N and len(self.acked) + len(self.nacked) >= N

    # callbacks, in the order they fire
    def on_open(self, connection: Any) -> None:
        connection.channel(on_open_callback=self.on_channel)

    def on_open_error(self, _connection: Any, error: Exception) -> None:
        self.error = f"connection failed: {error!r}"
        self.stop()

    def on_channel(self, channel: Any) -> None:
        self.channel = channel
        channel.add_on_close_callback(self.on_channel_closed)
        channel.confirm_delivery(
            ack_nack_callback=self.on_confirm, callback=lambda _frame: self.declare()
        )

    def on_channel_closed(self, _channel: Any, reason: Exception) -> None:
        if not self.finished():
            self.error = f"channel closed early: {reason!r}"
            self.connection.close()

    def declare(self) -> None:
        self.channel.queue_declare(self.queue, auto_delete=True, callback=self.on_declared)

    def on_declared(self, _frame: Any) -> None:
        self.channel.basic_qos(prefetch_count=100, callback=self.on_qos)

    def on_qos(self, _frame: Any) -> None:
        self.channel.basic_consume(self.queue, self.on_message, callback=self.on_consuming)

    def on_consuming(self, _frame: Any) -> None:
        for i in range(N):
            self.channel.basic_publish(
                "", self.queue, str(i).encode(), BasicProperties(message_id=str(i))
            )
            self.published += 1

    def on_confirm(self, frame: Any) -> None:
        method = frame.method
        tag = method.delivery_tag
        tags = set(range(1, tag + 1)) - self.acked - self.nacked if method.multiple else {tag}
        if tags & (self.acked | self.nacked):
            self.error = f"delivery tag {tag} confirmed twice"
        if isinstance(method, Basic.Ack):
            self.acked |= tags
            self.multiple_acks += bool(method.multiple)
        else:
            self.nacked |= tags
        self.maybe_finish()

    def on_message(self, channel: Any, method: Basic.Deliver, props: Any, body: bytes) -> None:
        self.received.append(body)
        self.redelivered += bool(method.redelivered)
        if props.message_id != body.decode():
            self.error = f"message {body!r} arrived with message-id {props.message_id!r}"
        channel.basic_ack(method.delivery_tag)
        self.maybe_finish()

    def maybe_finish(self) -> None:
        if self.finished() and self.connection.is_open:
            self.connection.close()

    def on_closed(self, _connection: Any, reason: Exception) -> None:
        self.closed_reason = reason
        self.stop()

    def check(self) -> None:
        assert self.error is None, self.error
        assert self.published == N
        assert self.received == [str(i).encode() for i in range(N)]  # once each, in order
        assert self.redelivered == 0
        assert self.acked == set(range(1, N + 1)) and not self.nacked
        assert isinstance(self.closed_reason, pika.exceptions.ConnectionClosedByClient)


def test_select_connection_confirms_and_consumer_in_one_ioloop(
    shared_broker: BrokerProcess,
) -> None:
    scenario = Scenario(unique("select"))
    connection = pika.SelectConnection(
        pika_params(shared_broker),
        on_open_callback=scenario.on_open,
        on_open_error_callback=scenario.on_open_error,
        on_close_callback=scenario.on_closed,
    )
    scenario.connection = connection
    ioloop = connection.ioloop
    scenario.stop = ioloop.stop

    def deadline() -> None:
        scenario.error = f"not finished within {DEADLINE} s"
        if connection.is_open:
            connection.close()  # on_closed stops the loop
        else:
            ioloop.stop()

    timer = ioloop.call_later(DEADLINE, deadline)
    try:
        ioloop.start()
    finally:
        ioloop.remove_timeout(timer)
        ioloop.close()
    scenario.check()


def test_asyncio_connection_confirms_and_consumer_in_one_loop(
    shared_broker: BrokerProcess,
) -> None:
    loop = asyncio.new_event_loop()
    scenario = Scenario(unique("asyncio"))
    closed = loop.create_future()

    def stop() -> None:
        if not closed.done():
            closed.set_result(None)

    scenario.stop = stop
    connection = AsyncioConnection(
        pika_params(shared_broker),
        on_open_callback=scenario.on_open,
        on_open_error_callback=scenario.on_open_error,
        on_close_callback=scenario.on_closed,
        custom_ioloop=loop,
    )
    scenario.connection = connection
    try:
        loop.run_until_complete(asyncio.wait_for(asyncio.shield(closed), DEADLINE))
    except TimeoutError:
        scenario.error = f"not finished within {DEADLINE} s"
        if connection.is_open:
            connection.close()
            loop.run_until_complete(asyncio.wait_for(closed, 5))
    finally:
        loop.close()
    scenario.check()
