"""A closed connection is freed by reference counting, with everything it owned: no
reference cycle is left for the cyclic collector, which never frees one whose objects
were frozen while the connection was open (``broker.collector``: a broker freezes its heap
as it grows; each connection open then and closed later stayed for good, about 7 KiB).

A real broker in this process (uvloop, real sockets) and real clients in a process of
their own: pika (0-9-1: confirms, a consumer with deliveries left unacknowledged, a
basic.get, a channel the client closes while its connection stays open) and Qpid Proton
(AMQP 1.0 on the same port: a sender, a receiver with a delivery left unsettled). The
collector is disabled while the clients go, cleanly or killed; every broker-side object of
theirs must be gone without it (weak references, polled with a deadline)."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import weakref
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import uvloop

from broker.amqp.connection import Connection
from broker.options import BrokerOptions
from broker.server import Broker
from common.polling import free_port

#: pika: a confirm channel publishing, a consumer leaving two deliveries unacknowledged, a
#: basic.get, and a channel closed by the client; then "ready" and a line from stdin:
#: "channel" closes one more channel and waits again, "close" closes the connection, "kill"
#: leaves without a word (the socket reset by the kernel).
PIKA = r"""
import os, sys, pika
port = int(sys.argv[1])
c = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
ch = c.channel(); ch.confirm_delivery()
ch.queue_declare("freed", auto_delete=True)
ch.basic_qos(prefetch_count=10)
for _ in range(5):
    ch.basic_publish("", "freed", b"x" * 100)
got = []
ch.basic_consume("freed", lambda _c, m, _p, _b: got.append(m.delivery_tag))
while len(got) < 5:
    c.process_data_events(0.05)
ch.basic_ack(got[2], multiple=True)
other = c.channel(); other.basic_get("freed"); other.close()
spare = c.channel(); spare.confirm_delivery(); spare.basic_publish("", "freed", b"y")
print("ready", flush=True)
for line in sys.stdin:
    what = line.strip()
    if what == "channel":
        spare.close()
        print("ready", flush=True)
    elif what == "kill":
        os._exit(0)
    else:
        c.close()
        break
"""

#: Qpid Proton: a sender, a receiver with one delivery accepted and one left unsettled.
PROTON = r"""
import os, sys
from proton import Message
from proton.utils import BlockingConnection
port = int(sys.argv[1])
c = BlockingConnection(f"amqp://guest:guest@127.0.0.1:{port}", allowed_mechs="PLAIN", timeout=10)
s = c.create_sender("/queues/freed-1.0")
for k in range(3):
    s.send(Message(body=f"m{k}"))
r = c.create_receiver("/queues/freed-1.0", credit=5)
r.receive(timeout=10); r.accept()
r.receive(timeout=10)
print("ready", flush=True)
if sys.stdin.readline().strip() == "kill":
    os._exit(0)
c.close()
"""


async def _started(tmp_path: Path) -> Broker:
    broker = Broker(
        BrokerOptions(
            port=free_port(),
            interface="127.0.0.1",
            mgmt_port=free_port(),
            mgmt_interface="127.0.0.1",
            node_name="freed",
            data_dir=str(tmp_path / "data"),
        )
    )
    await broker.start()
    return broker


async def _until(check: Any, what: str, timeout: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        if loop.time() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        await asyncio.sleep(0.02)


def _owned(connection: Any) -> dict[str, weakref.ref[Any]]:
    """Weak references to a connection and what it owns (the objects a cycle would keep)."""
    found: dict[str, Any] = {"connection": connection}
    for name in ("timeouts", "methods", "flow", "_held", "_dispatch", "_sasl", "session_table"):
        if hasattr(connection, name):
            found[name] = getattr(connection, name)
    channels = connection.channels if isinstance(connection, Connection) else {}
    for number, channel in channels.items():
        found[f"channel {number}"] = channel
        found[f"channel {number} deliveries"] = channel.deliveries
        found[f"channel {number} publisher"] = channel.publisher
        if channel.publisher.confirms is not None:
            found[f"channel {number} confirms"] = channel.publisher.confirms
    table = getattr(connection, "session_table", None)
    for number, session in getattr(table, "sessions", {}).items():
        found[f"session {number}"] = session
        found[f"session {number} transactions"] = session.transactions
        for handle, link in session.links.items():
            found[f"session {number} link {handle}"] = link
    refs: dict[str, weakref.ref[Any]] = {}
    for name, obj in found.items():
        if hasattr(type(obj), "__weakref__"):  # not a slotted part (freed with its owner)
            refs[name] = weakref.ref(obj)
    return refs


async def _client(script: str, port: int) -> asyncio.subprocess.Process:
    client = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        script,
        str(port),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert client.stdout is not None
    line = await asyncio.wait_for(client.stdout.readline(), 60)
    assert line == b"ready\n", line
    return client


async def _tell(client: asyncio.subprocess.Process, what: str) -> None:
    assert client.stdin is not None
    client.stdin.write(what.encode() + b"\n")
    await client.stdin.drain()


def _alive(refs: dict[str, weakref.ref[Any]]) -> list[str]:
    return sorted(name for name, ref in refs.items() if ref() is not None)


@contextlib.asynccontextmanager
async def _served(
    tmp_path: Path, script: str, queue: str | None = None
) -> AsyncIterator[tuple[Broker, asyncio.subprocess.Process]]:
    """A broker and a client of ``script`` connected to it; both ended by PID after."""
    broker = await _started(tmp_path)
    client: asyncio.subprocess.Process | None = None
    try:
        if queue is not None:
            broker.vhost.declare_queue(queue)
        client = await _client(script, broker.options.port)
        yield broker, client
    finally:
        if client is not None and client.returncode is None:
            client.kill()
            await client.wait()
        await broker.stop()


async def _gone_and_freed(
    broker: Broker, client: asyncio.subprocess.Process, how: str, refs: dict[str, Any]
) -> None:
    """The client goes (``how``); every object in ``refs`` is then freed, no collector."""
    await _tell(client, how)
    await asyncio.wait_for(client.wait(), 30)
    await _until(lambda: not broker.connections, "the connection gone")
    await _until(lambda: not _alive(refs), f"freed without the collector: {_alive(refs)}")


def _served_one(broker: Broker) -> tuple[Any, dict[str, weakref.ref[Any]]]:
    """The broker's one connection, and weak references to it, its shell and its parts."""
    (protocol,) = broker.connections
    connection = protocol.connection
    return connection, _owned(connection) | {"protocol": weakref.ref(protocol)}


@pytest.mark.parametrize("how", ["close", "kill"])
def test_a_closed_091_connection_leaves_no_cycle(
    tmp_path: Path, no_cyclic_collector: None, how: str
) -> None:
    async def main() -> None:
        async with _served(tmp_path, PIKA) as (broker, client):
            connection, refs = _served_one(broker)
            assert isinstance(connection, Connection)
            assert len(connection.channels) == 2  # the consumer's, the spare; one closed
            spare = max(connection.channels)
            del connection
            # (its confirms stay with the message it published, queued: not a cycle)
            spare_refs = {
                k: v
                for k, v in refs.items()
                if k.startswith(f"channel {spare}") and not k.endswith("confirms")
            }
            # a channel closed while its connection stays open is freed at once
            await _tell(client, "channel")
            assert client.stdout is not None
            assert await asyncio.wait_for(client.stdout.readline(), 30) == b"ready\n"
            await _until(lambda: not _alive(spare_refs), "the closed channel freed")
            await _gone_and_freed(broker, client, how, refs)

    uvloop.run(main())


@pytest.mark.parametrize("how", ["close", "kill"])
def test_a_closed_amqp10_connection_leaves_no_cycle(
    tmp_path: Path, no_cyclic_collector: None, how: str
) -> None:
    async def main() -> None:
        async with _served(tmp_path, PROTON, queue="freed-1.0") as (broker, client):
            connection, refs = _served_one(broker)
            assert type(connection).__module__ == "broker.amqp10.connection"
            assert any(name.startswith("session") for name in refs)
            del connection
            await _gone_and_freed(broker, client, how, refs)

    uvloop.run(main())
