"""The asyncio AMQP client (broker/amqp/client/) against a real qpidd, and scripted peers."""

from __future__ import annotations

import asyncio
import base64
import json
import time
import urllib.request
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from pamqp import commands

from broker.amqp import framing
from broker.amqp.client import (
    AmqpClient,
    CallbackError,
    ChannelClosedByBroker,
    ChannelClosedByClient,
    ConnectionClosedByBroker,
    ConnectionClosedByClient,
    ConnectionFailed,
    ConnectionRefusedByBroker,
    Delivery,
    connect,
)
from common.polling import free_port, poll_until_async
from tests.broker_process import BrokerProcess

HOST = "127.0.0.1"


def api(broker: BrokerProcess, path: str) -> Any:
    request = urllib.request.Request(f"http://{HOST}:{broker.mgmt_port}{path}")
    token = base64.b64encode(b"guest:guest").decode()
    request.add_header("Authorization", f"Basic {token}")
    with urllib.request.urlopen(request, timeout=5) as response:
        return json.load(response)


async def api_async(broker: BrokerProcess, path: str) -> Any:
    return await asyncio.to_thread(api, broker, path)


async def guest(broker: BrokerProcess, **kwargs: Any) -> AmqpClient:
    return await connect(HOST, broker.port, user="guest", password="guest", **kwargs)


def connection_named(broker: BrokerProcess, product: str) -> dict[str, Any] | None:
    for conn in api(broker, "/api/connections"):
        if conn["client_product"] == product:
            return dict(conn)
    return None


# -- against a real broker -----------------------------------------------------------------
def test_handshake_client_properties_and_mechanisms(broker: BrokerProcess) -> None:
    async def main() -> None:
        client = await guest(
            broker, client_properties={"product": "ha-link-test", "version": "9.9"}
        )
        assert client.server_properties["product"] == "qpidd"
        assert client.server_properties["capabilities"]["publisher_confirms"] is True
        assert client.frame_max == 131072 and client.channel_max == 2047
        assert client.heartbeat == 60  # heartbeat=0 takes the broker's offer
        seen = await asyncio.to_thread(connection_named, broker, "ha-link-test")
        assert seen is not None
        assert seen["client_version"] == "9.9" and seen["user"] == "guest"
        assert seen["heartbeat"] == 60 and seen["frame_max"] == 131072

        amqplain = await guest(
            broker, mechanism="AMQPLAIN", client_properties={"product": "amqplain-test"}
        )
        seen = await asyncio.to_thread(connection_named, broker, "amqplain-test")
        assert seen is not None and seen["user"] == "guest"

        started = time.monotonic()
        with pytest.raises(ConnectionFailed, match="not ANONYMOUS"):
            await connect(HOST, broker.port, user=None, password=None, mechanism="ANONYMOUS")
        assert time.monotonic() - started < 2

        async with amqplain:
            pass
        assert isinstance(await amqplain.wait_closed(), ConnectionClosedByClient)
        await client.close()
        reason = await client.wait_closed()
        assert isinstance(reason, ConnectionClosedByClient) and reason.reply_code == 200
        with pytest.raises(ConnectionClosedByClient):
            await client.open_channel()

        async def no_connections() -> bool:
            return not await api_async(broker, "/api/connections")

        await poll_until_async(no_connections, 5.0)

    asyncio.run(main())


def test_round_trip_large_body_with_small_frames(broker: BrokerProcess) -> None:
    async def main() -> None:
        client = await guest(broker, frame_max=4096, client_properties={"product": "small"})
        assert client.frame_max == 4096
        seen = await asyncio.to_thread(connection_named, broker, "small")
        assert seen is not None and seen["frame_max"] == 4096
        channel = await client.open_channel()
        assert await channel.declare_queue("rt") == ("rt", 0, 0)
        big = bytes(range(256)) * 4096  # 1 MiB
        props = b"\x80\x00\x0atext/plain"  # property flags (content-type) and its value
        await channel.publish("", "rt", b"small", props)
        await channel.publish("", "rt", big)
        await channel.publish("", "rt", b"")
        assert await channel.declare_queue("rt", passive=True) == ("rt", 3, 0)

        got: list[Delivery] = []

        def on_delivery(delivery: Delivery) -> None:
            got.append(delivery)
            channel.ack(delivery.delivery_tag)

        tag = await channel.consume("rt", on_delivery, consumer_tag="rt-consumer")
        assert tag == "rt-consumer"
        await poll_until_async(lambda: len(got) == 3, 5.0, interval=0.01)
        assert [d.body for d in got] == [b"small", big, b""]
        assert got[0].properties_raw == props
        assert got[1].properties_raw == b"\x00\x00"
        assert got[0].routing_key == "rt" and got[0].exchange == ""
        assert [d.delivery_tag for d in got] == [1, 2, 3]
        assert {d.consumer_tag for d in got} == {"rt-consumer"}
        assert not any(d.redelivered for d in got)

        async def settled() -> bool:
            queue = await api_async(broker, "/api/queues/rt")
            return bool(queue["messages"] == 0 and queue["messages_unacked"] == 0)

        await poll_until_async(settled, 5.0)

        # basic.get and publisher confirms on a second channel
        other = await client.open_channel()
        assert other.number != channel.number
        assert await other.get("rt") is None
        await other.confirm_select()
        await channel.cancel(tag)
        await other.publish("", "rt", big)
        delivery = await other.get("rt")
        assert delivery is not None and delivery.body == big and delivery.consumer_tag == ""
        other.ack(delivery.delivery_tag)
        await other.close()
        assert isinstance(other.close_reason, ChannelClosedByClient)
        with pytest.raises(ChannelClosedByClient):
            await other.get("rt")
        await client.close()

    asyncio.run(main())


def test_qos_prefetch_is_respected(broker: BrokerProcess) -> None:
    async def main() -> None:
        client = await guest(broker)
        channel = await client.open_channel()
        await channel.declare_queue("pf")
        for i in range(10):
            await channel.publish("", "pf", b"m%d" % i)
        await channel.qos(3)
        got: list[Delivery] = []
        await channel.consume("pf", got.append)  # never acks

        async def held() -> bool:
            queue = await api_async(broker, "/api/queues/pf")
            return bool(queue["messages_unacked"] == 3)

        await poll_until_async(held, 5.0)
        await poll_until_async(lambda: len(got) == 3, 5.0, interval=0.01)
        # a round trip on the channel: anything sent before its reply has arrived
        await channel.declare_queue("pf", passive=True)
        assert [d.body for d in got] == [b"m0", b"m1", b"m2"]
        channel.ack(got[-1].delivery_tag, multiple=True)
        await poll_until_async(lambda: len(got) == 6, 5.0, interval=0.01)
        await client.close()

    asyncio.run(main())


def test_wrong_password_is_refused_with_403(broker: BrokerProcess) -> None:
    async def main() -> None:
        with pytest.raises(ConnectionRefusedByBroker) as info:
            await connect(HOST, broker.port, user="guest", password="wrong", timeout=5)
        assert info.value.reply_code == 403
        assert "Login was refused" in info.value.reply_text

    asyncio.run(main())


def test_nothing_listening_fails_fast() -> None:
    async def main() -> None:
        started = time.monotonic()
        with pytest.raises(ConnectionFailed, match=r"127\.0\.0\.1"):
            await connect(HOST, free_port(), user="guest", password="guest", timeout=5)
        assert time.monotonic() - started < 1

    asyncio.run(main())


def test_channel_closed_by_broker_fails_the_call(broker: BrokerProcess) -> None:
    async def main() -> None:
        client = await guest(broker)
        channel = await client.open_channel()
        with pytest.raises(ChannelClosedByBroker) as info:
            await channel.declare_queue("missing", passive=True)
        assert info.value.reply_code == 404
        assert channel.is_closed
        reason = await channel.wait_closed()
        assert isinstance(reason, ChannelClosedByBroker) and reason.reply_code == 404
        with pytest.raises(ChannelClosedByBroker):
            await channel.publish("", "missing", b"x")
        with pytest.raises(ChannelClosedByBroker):
            channel.ack(1)
        # the connection carries on
        again = await client.open_channel()
        assert await again.declare_queue("present") == ("present", 0, 0)
        assert not client.is_closed
        await client.close()

    asyncio.run(main())


def test_an_ack_after_close_began_is_refused_and_never_written(broker: BrokerProcess) -> None:
    """An acknowledgement due when the channel's close was already sent (an HA backup's
    delayed batch acknowledgement on a queue stream it stopped): written after
    channel.close, the broker read it on a closed channel and closed the whole connection
    with 504 (the HA fuzzer saw 26 such link drops in 10 minutes, docs/reliability.md)."""

    async def main() -> None:
        client = await guest(broker)
        channel = await client.open_channel()
        await channel.declare_queue("late-ack")
        await channel.publish("", "late-ack", b"x")
        got: list[Delivery] = []
        await channel.consume("late-ack", got.append)
        await poll_until_async(lambda: got, 15.0, interval=0.01)
        closing = asyncio.ensure_future(channel.close())
        await asyncio.sleep(0)  # close() has written channel.close, awaits close-ok
        with pytest.raises(ChannelClosedByClient):
            channel.ack(got[0].delivery_tag)
        await closing
        other = await client.open_channel()  # the connection carries on
        assert await other.declare_queue("late-ack", passive=True) == ("late-ack", 1, 0)
        assert not client.is_closed
        await client.close()

    asyncio.run(main())


def test_consumer_cancelled_by_broker_and_raising_callback(broker: BrokerProcess) -> None:
    async def main() -> None:
        client = await guest(broker)
        channel = await client.open_channel()
        await channel.declare_queue("doomed")
        cancelled: list[str] = []
        tag = await channel.consume("doomed", lambda d: None, on_cancel=cancelled.append)
        admin = await client.open_channel()
        await admin.delete_queue("doomed")
        await poll_until_async(lambda: cancelled == [tag], 5.0, interval=0.01)

        await admin.declare_queue("boom")

        def explode(delivery: Delivery) -> None:
            raise RuntimeError("consumer bug")

        await channel.consume("boom", explode)
        await admin.publish("", "boom", b"x")
        reason = await asyncio.wait_for(client.wait_closed(), 5)
        assert isinstance(reason, CallbackError)
        assert isinstance(reason.__cause__, RuntimeError)
        with pytest.raises(CallbackError):
            await admin.declare_queue("boom", passive=True)

    asyncio.run(main())


def test_broker_shutdown_is_reported_as_320(broker: BrokerProcess) -> None:
    async def main() -> None:
        client = await guest(broker)
        channel = await client.open_channel()
        await channel.declare_queue("q")
        await channel.consume("q", lambda d: None)
        await asyncio.to_thread(broker.stop)  # SIGTERM
        reason = await asyncio.wait_for(client.wait_closed(), 5)
        assert isinstance(reason, ConnectionClosedByBroker)
        assert reason.reply_code == 320
        assert channel.close_reason is reason
        with pytest.raises(ConnectionClosedByBroker):
            await client.open_channel()
        await client.close()  # harmless once closed

    asyncio.run(main())


def test_heartbeats_keep_an_idle_connection_open(broker: BrokerProcess) -> None:
    async def main() -> None:
        client = await guest(broker, heartbeat=1, client_properties={"product": "hb"})
        assert client.heartbeat == 1
        seen = await asyncio.to_thread(connection_named, broker, "hb")
        assert seen is not None and seen["heartbeat"] == 1
        # idle for 3 s (more than 2 x heartbeat on both sides): nobody may give up
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(client.wait_closed(), 3.0)
        channel = await client.open_channel()
        await channel.declare_queue("alive")
        assert not any(e.get("event") == "heartbeat_timeout" for e in broker.events())
        await client.close()

    asyncio.run(main())


# -- against scripted peers ----------------------------------------------------------------
Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def read_method(reader: asyncio.StreamReader) -> Any:
    while True:
        head = await reader.readexactly(7)
        ftype = head[0]
        size = int.from_bytes(head[3:7], "big")
        payload = (await reader.readexactly(size + 1))[:-1]
        if ftype == framing.FRAME_METHOD:
            return framing.unmarshal_method(payload)


async def start_and_tune(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, heartbeat: int
) -> None:
    assert await reader.readexactly(8) == framing.PROTOCOL_HEADER
    writer.write(
        framing.marshal_method(
            commands.Connection.Start(
                server_properties={"product": "scripted"}, mechanisms="PLAIN", locales="en_US"
            ),
            0,
        )
    )
    assert isinstance(await read_method(reader), commands.Connection.StartOk)
    writer.write(
        framing.marshal_method(
            commands.Connection.Tune(channel_max=10, frame_max=8192, heartbeat=heartbeat), 0
        )
    )
    tune_ok = await read_method(reader)
    assert isinstance(tune_ok, commands.Connection.TuneOk)
    assert (tune_ok.frame_max, tune_ok.heartbeat) == (8192, heartbeat)
    assert isinstance(await read_method(reader), commands.Connection.Open)


async def with_peer(script: Script, body: Callable[[int], Awaitable[None]]) -> None:
    """Run ``body(port)`` against a listener that runs ``script`` per connection.

    Failures inside the script (its assertions) fail the test too.
    """
    tasks: list[asyncio.Task[None]] = []
    errors: list[BaseException] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        tasks.append(task)
        try:
            await script(reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except Exception as exc:
            errors.append(exc)
        finally:
            writer.close()

    server = await asyncio.start_server(handle, HOST, 0)
    port = server.sockets[0].getsockname()[1]
    try:
        await body(port)
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 5)
    finally:
        server.close()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    if errors:
        raise errors[0]


def test_backup_refusal_530_is_connection_refused() -> None:
    async def refuse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await start_and_tune(reader, writer, heartbeat=0)
        writer.write(
            framing.marshal_method(
                commands.Connection.Close(
                    reply_code=530,
                    reply_text="HA backup: not the primary",
                    class_id=10,
                    method_id=40,
                ),
                0,
            )
        )
        assert isinstance(await read_method(reader), commands.Connection.CloseOk)

    async def body(port: int) -> None:
        with pytest.raises(ConnectionRefusedByBroker) as info:
            await connect(HOST, port, user="u", password="p", timeout=5)
        assert info.value.reply_code == 530
        assert info.value.reply_text.startswith("HA backup: not the primary")

    asyncio.run(with_peer(refuse, body))


def test_silent_peer_times_out_heartbeats_and_handshake() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await start_and_tune(reader, writer, heartbeat=1)
        writer.write(framing.marshal_method(commands.Connection.OpenOk(), 0))
        data = b""
        while chunk := await reader.read(4096):  # until the client drops the socket
            data += chunk
        # the client sent heartbeats (every 0.5 s) and nothing else, then gave up
        assert data == framing.HEARTBEAT_FRAME * (len(data) // 8)
        assert len(data) // 8 >= 2

    async def body(port: int) -> None:
        client = await connect(HOST, port, user="u", password="p", heartbeat=5)
        assert client.heartbeat == 1 and client.frame_max == 8192 and client.channel_max == 10
        started = time.monotonic()
        reason = await asyncio.wait_for(client.wait_closed(), 5)
        assert isinstance(reason, ConnectionFailed) and "heartbeat" in str(reason)
        assert 1.5 <= time.monotonic() - started <= 3.5

    async def mute(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()

    async def handshake_timeout(port: int) -> None:
        started = time.monotonic()
        with pytest.raises(ConnectionFailed, match=r"within 0\.3 s"):
            await connect(HOST, port, user="u", password="p", timeout=0.3)
        assert time.monotonic() - started < 1

    async def both() -> None:
        await asyncio.gather(with_peer(silent, body), with_peer(mute, handshake_timeout))

    asyncio.run(both())
