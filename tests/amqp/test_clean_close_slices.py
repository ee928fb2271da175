"""A clean close releases the connection's channels a slice a turn of the loop (issue 25,
"no step holds the loop > 100 ms": a backup's replication link, a channel a queue stream,
closed cleanly at its shutdown, released 10,000 channels in one step of 119 ms), as a lost
socket's release does (tests/amqp/test_turn_budget.py): the client's connection.close,
the broker's, a connection error. Close-ok (or the broker's connection.close) goes out
after the last slice, alone: nothing the channels not released yet are given meanwhile
reaches the client, and their unacknowledged deliveries are requeued as before.

The core with a recorded ``call_soon`` (each :meth:`Loop.turn` one turn of the loop, a
:class:`~common.slices.TurnBudget` of no CPU: a slice a turn), then the shell over real
sockets: 1,200 channels consuming, closed by the client, every message redelivered to
another connection's consumer while a third is answered throughout."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import uvloop
from pamqp import body, commands, frame

from broker.amqp import framing
from broker.amqp.client import AmqpClient, Delivery, connect
from broker.amqp.protocol import AmqpProtocol
from broker.core.errors import ReplyCode
from broker.core.queue import Queue
from broker.ha.delivery_watermark import DeliveryWatermark
from common.polling import poll_until_async
from common.slices import SLICE, TurnBudget, run_steps
from tests.amqp.helpers import Client, make_context
from tests.amqp.test_turn_budget import Loop, WorkClock

HOST = "127.0.0.1"
#: Channels of the closing connection: three slices (SLICE, SLICE, 100).
N = 2 * SLICE + 100


@dataclass
class Log:
    """The context's log, recorded."""

    lines: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def info(self, event: str, **fields: Any) -> None:
        self.lines.append((event, fields))

    warning = debug = error = info

    def events(self, name: str) -> list[dict[str, Any]]:
        return [fields for event, fields in self.lines if event == name]


class Broker:
    """A broker's core with a loop of recorded turns: a slice of a release a turn."""

    def __init__(self) -> None:
        self.ctx = make_context()
        self.loop = Loop()
        self.ctx.turns = TurnBudget(lambda: self.loop.call_soon, budget=0.0, cpu=WorkClock())
        self.log = Log()
        self.ctx.log = self.log

    def client(self, peer: str) -> Client:
        client = Client(self.ctx, peer)
        client.handshake()
        client.open_channel(1)
        return client

    def turns_until_quiet(self) -> int:
        turns = 0
        while self.loop.soon:
            self.loop.turn()
            turns += 1
        return turns


def _open_channels(client: Client, *methods: Callable[[int], Any]) -> None:
    """Channels 2..N (1 is open), then on each of 1..N ``method(number)`` for each."""
    data = b"".join(frame.marshal(commands.Channel.Open(), n) for n in range(2, N + 1))
    data += b"".join(frame.marshal(method(n), n) for n in range(1, N + 1) for method in methods)
    client.send_bytes(data)
    assert len(client.conn.channels) == N


def _deliveries(client: Client) -> list[tuple[bool, bytes]]:
    """(redelivered, body) of each delivery taken."""
    got: list[tuple[bool, bytes]] = []
    redelivered = False
    for _, value in client.take():
        if isinstance(value, commands.Basic.Deliver):
            redelivered = bool(value.redelivered)
        elif isinstance(value, body.ContentBody):
            got.append((redelivered, bytes(value.value)))
    return got


def _consuming(broker: Broker) -> tuple[Client, Client, Queue]:
    """A connection of N channels, each consuming ``q`` with one unacknowledged delivery;
    another connection that publishes. Returns (the consuming one, the publisher, q)."""
    publisher = broker.client("test:pub")
    publisher.send(1, commands.Queue.Declare(queue="q"))
    consumer = broker.client("test:many")
    _open_channels(
        consumer,
        lambda _n: commands.Basic.Qos(prefetch_count=1),
        lambda _n: commands.Basic.Consume(queue="q"),
    )
    consumer.take()
    for i in range(N):
        publisher.publish(1, b"m%d" % i, routing_key="q")
    publisher.take()
    queue = broker.ctx.vhost.queues["q"]
    assert len(_deliveries(consumer)) == N
    assert queue.unacked == N and queue.message_count == 0
    return consumer, publisher, queue


def test_a_clients_close_releases_a_slice_a_turn_then_answers_close_ok_alone() -> None:
    broker = Broker()
    closing, _publisher, queue = _consuming(broker)
    other = broker.client("test:other")
    other.send(1, commands.Basic.Consume(queue="q"))
    other.take()
    # connection.close, and frames after it that must never be handled
    closing.send_bytes(
        frame.marshal(
            commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0), 0
        )
        + frame.marshal(commands.Queue.Declare(queue="late"), 1)
    )
    closing.send(2, commands.Queue.Declare(queue="later"))
    assert closing.take() == [] and closing.conn.releasing and closing.conn.reading_paused
    redelivered = _deliveries(other)  # the first slice's deliveries, requeued, moved on
    assert len(redelivered) == SLICE
    broker.loop.turn()
    assert closing.take() == []
    redelivered += _deliveries(other)
    assert len(redelivered) == 2 * SLICE
    broker.loop.turn()  # the last slice, then close-ok
    assert [type(f).__name__ for _, f in closing.take()] == ["CloseOk"]
    redelivered += _deliveries(other)
    assert sorted(redelivered) == sorted((True, b"m%d" % i) for i in range(N))
    assert queue.unacked == N and queue.consumer_count == 1  # the other's, all N
    assert "late" not in broker.ctx.vhost.queues and "later" not in broker.ctx.vhost.queues
    assert not closing.conn.releasing and not closing.conn.reading_paused
    assert broker.turns_until_quiet() == 0
    closing.conn.connection_lost()  # the client closes the socket after close-ok
    assert closing.conn.id not in broker.ctx.connections
    [closed] = [f for f in broker.log.events("connection_closed") if "many" in f["peer"]]
    assert closed["reason"] == "client closed: 200 bye"


def test_without_a_loop_a_clean_close_is_one_step_as_before() -> None:
    broker = Broker()
    broker.ctx.turns = None  # a core test's context
    closing, _publisher, queue = _consuming(broker)
    closing.send(
        0, commands.Connection.Close(reply_code=200, reply_text="", class_id=0, method_id=0)
    )
    assert [type(f).__name__ for _, f in closing.take()] == ["CloseOk"]
    assert queue.message_count == N and queue.unacked == 0 and queue.consumer_count == 0


def test_a_socket_lost_mid_release_finishes_it_then_goes_and_is_logged_once() -> None:
    broker = Broker()
    closing, _publisher, queue = _consuming(broker)
    closing.send(
        0, commands.Connection.Close(reply_code=200, reply_text="", class_id=0, method_id=0)
    )
    assert closing.conn.releasing and queue.message_count == SLICE
    run_steps(closing.conn.connection_lost_steps())  # the shell's, all at once here
    assert queue.message_count == N and queue.unacked == 0 and queue.consumer_count == 0
    assert closing.conn.id not in broker.ctx.connections and not closing.conn.releasing
    broker.turns_until_quiet()  # the release's own turns find it done
    assert queue.message_count == N and queue.consumer_count == 0
    assert len([f for f in broker.log.events("connection_closed") if "many" in f["peer"]]) == 1


def test_a_socket_lost_mid_release_in_turns_goes_after_the_last_slice() -> None:
    broker = Broker()
    closing, _publisher, queue = _consuming(broker)
    closing.send(
        0, commands.Connection.Close(reply_code=200, reply_text="", class_id=0, method_id=0)
    )
    lost = closing.conn.connection_lost_steps()
    next(lost)  # a slice of the release, driven by the loss
    assert queue.message_count == 2 * SLICE and closing.conn.id in broker.ctx.connections
    broker.loop.turn()  # the release's own turn: its last slice, close-ok
    assert queue.message_count == N and closing.conn.id in broker.ctx.connections
    with pytest.raises(StopIteration):
        next(lost)  # the connection closed, gone, logged
    assert closing.conn.id not in broker.ctx.connections
    assert len([f for f in broker.log.events("connection_closed") if "many" in f["peer"]]) == 1


def test_a_broker_close_goes_out_after_the_release_and_answers_a_crossing_close() -> None:
    broker = Broker()
    closing, _publisher, queue = _consuming(broker)
    closing.conn.close(ReplyCode.CONNECTION_FORCED, "broker stopping")
    assert closing.take() == [] and queue.message_count == SLICE
    closing.conn.close(ReplyCode.CONNECTION_FORCED, "again")  # a close under way: nothing
    # the client closes too, its close crossing ours: kept, answered after ours
    closing.send(
        0, commands.Connection.Close(reply_code=200, reply_text="", class_id=0, method_id=0)
    )
    assert closing.take() == []
    assert broker.turns_until_quiet() == 2
    got = [f for _, f in closing.take()]
    assert [type(f).__name__ for f in got] == ["Close", "CloseOk"]
    assert got[0].reply_code == ReplyCode.CONNECTION_FORCED
    assert closing.conn.should_close and queue.message_count == N and queue.unacked == 0


def test_a_connection_error_closes_after_the_release() -> None:
    broker = Broker()
    closing, _publisher, queue = _consuming(broker)
    # a method frame whose end octet is wrong: 501 FRAME_ERROR closes the connection
    closing.send_bytes(struct.pack(">BHI", 1, 1, 4) + b"\x00\x3c\x00\x50" + b"\x00")
    assert closing.take() == [] and queue.message_count == SLICE
    assert broker.turns_until_quiet() == 2
    got = [f for _, f in closing.take()]
    assert [type(f).__name__ for f in got] == ["Close"]
    assert got[0].reply_code == ReplyCode.FRAME_ERROR
    assert queue.message_count == N and queue.unacked == 0


def test_a_held_no_ack_get_answered_mid_release_is_requeued() -> None:
    """A basic.get held by its queue's delivery gate, answered while the release runs and
    its channel is not released yet: the get-ok is never sent, the message stays."""
    broker = Broker()
    closing = broker.client("test:many")
    closing.send(1, commands.Queue.Declare(queue="g"))
    closing.publish(1, b"held", routing_key="g")
    _open_channels(closing)
    closing.take()
    queue = broker.ctx.vhost.queues["g"]
    gate = DeliveryWatermark.of(queue)
    guard = object()
    gate.join(guard)
    closing.send(N, commands.Basic.Get(queue="g", no_ack=True))  # the last slice's channel
    assert closing.take() == [] and queue.held_gets == 1
    closing.send(
        0, commands.Connection.Close(reply_code=200, reply_text="", class_id=0, method_id=0)
    )
    assert closing.conn.releasing
    gate.acknowledged(guard, gate.announced)  # the get is answered now, mid-release
    broker.turns_until_quiet()
    assert [type(f).__name__ for _, f in closing.take()] == ["CloseOk"]
    assert queue.message_count == 1 and queue.unacked == 0 and queue.held_gets == 0


# -- the shell, real sockets ------------------------------------------------------------
CHANNELS = 1200


def test_a_client_closing_1200_consuming_channels_has_every_message_redelivered() -> None:
    """1,200 channels, each consuming with an unacknowledged delivery; the client closes:
    close-ok comes (the close completes), every message is redelivered to another
    connection's consumer, and a third connection is answered while the release runs."""

    async def main() -> None:
        ctx = make_context()
        # a budget of nothing: a piece a turn (each slice, each socket's read)
        ctx.turns = TurnBudget(lambda: asyncio.get_running_loop().call_soon, budget=0.0)
        server = await asyncio.get_running_loop().create_server(lambda: AmqpProtocol(ctx), HOST, 0)
        port = server.sockets[0].getsockname()[1]
        clients: list[AmqpClient] = []
        try:
            closing, other, busy = [
                await connect(HOST, port, user="guest", password="guest") for _ in range(3)
            ]
            clients += [closing, other, busy]
            setup = await other.open_channel()
            await setup.declare_queue("q")
            held: list[Delivery] = []
            for _ in range(CHANNELS):
                channel = await closing.open_channel()
                await channel.qos(1)
                await channel.consume("q", held.append)
            for i in range(CHANNELS):
                await setup.publish("", "q", b"m%d" % i)
            await poll_until_async(lambda: len(held) == CHANNELS, timeout=60)
            redelivered: list[Delivery] = []
            await setup.consume("q", redelivered.append)
            # the closing connection's broker side, and what its client reads on channel 0
            [core] = [c for c in ctx.connections.values() if len(c.channels) == CHANNELS]
            seen: list[str] = []
            read_frame = closing._connection_frame

            def spy(ftype: int, payload: bytes) -> None:
                if ftype == framing.FRAME_METHOD:
                    seen.append(type(framing.unmarshal_method(payload)).__name__)
                read_frame(ftype, payload)

            closing._connection_frame = spy  # type: ignore[method-assign]
            busy_channel = await busy.open_channel()
            answered = 0

            async def keep_busy() -> None:
                nonlocal answered
                while True:
                    await busy_channel.declare_queue("q", passive=True)
                    answered += 1

            busy_task = asyncio.create_task(keep_busy())
            await poll_until_async(lambda: answered > 0, timeout=30)
            before = answered
            await asyncio.wait_for(closing.close(timeout=120), 150)
            assert seen == ["CloseOk"], seen
            assert answered > before  # answered while the release ran
            await poll_until_async(lambda: len(redelivered) == CHANNELS, timeout=60)
            busy_task.cancel()
            assert answered > before + 1  # and after
            assert sorted(d.body for d in redelivered) == sorted(
                b"m%d" % i for i in range(CHANNELS)
            )
            assert all(d.redelivered for d in redelivered)
            assert core.id not in ctx.connections or core.state.value == "closed"
            queue = ctx.vhost.queues["q"]
            assert queue.consumer_count == 1 and queue.unacked == CHANNELS
        finally:
            for client in clients:
                await client.close()
            server.close()
            await server.wait_closed()

    uvloop.run(main())
