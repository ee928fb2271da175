"""A listener takes a storm of connections waiting in the kernel's queue within a few turns
of its loop (broker/accept.py): uvloop's own servers take one connection a poll, so a loop
whose turns took 20-40 ms on loaded cores accepted 25-50 a second, and 2,000 reconnecting
clients waited up to 30 s for their connection.start (2026-12-01). Real sockets, uvloop;
what is counted is the loop's turns, not seconds."""

from __future__ import annotations

import asyncio
import resource
import socket

import pytest
import uvloop

from broker.listen import serve
from tests.dialling import start_connects

CLIENTS = 600


def _connect_all(port: int) -> list[socket.socket]:
    """CLIENTS connections the kernel completed (the loop that listens is held meanwhile)."""
    socks, pending, poller = start_connects(port, CLIENTS)
    while pending:
        events = poller.poll(10_000)
        assert events, "the kernel completed no connection within 10 s"
        for fd, _event in events:
            sock = pending.pop(fd)
            poller.unregister(fd)
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
    return socks


@pytest.mark.skipif(
    resource.getrlimit(resource.RLIMIT_NOFILE)[0] < 2 * CLIENTS + 100, reason="too few files"
)
def test_a_storm_in_the_kernels_queue_is_accepted_within_a_few_turns() -> None:
    made: list[asyncio.BaseTransport] = []
    turns = 0

    async def main() -> None:
        nonlocal turns
        loop = asyncio.get_running_loop()
        all_made = asyncio.Event()

        class Counted(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                made.append(transport)
                if len(made) == CLIENTS:
                    all_made.set()

        def turn() -> None:
            nonlocal turns
            turns += 1
            if not all_made.is_set():
                loop.call_soon(turn)

        listener = await serve(Counted, "test", "--interface", "127.0.0.1", 0)
        socks = _connect_all(listener.port)  # the loop held: all wait in the kernel's queue
        try:
            loop.call_soon(turn)
            await asyncio.wait_for(all_made.wait(), 60)
        finally:
            listener.close()
            for transport in made:
                transport.close()
            for sock in socks:
                sock.close()

    uvloop.run(main())
    assert len(made) == CLIENTS
    assert turns <= 20, f"{CLIENTS} connections took {turns} turns of the loop"


def test_a_closed_listener_accepts_nothing_more() -> None:
    async def main() -> None:
        listener = await serve(asyncio.Protocol, "test", "--interface", "127.0.0.1", 0)
        port = listener.port
        _reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 5)
        writer.close()
        listener.close()
        await listener.wait_closed()
        assert listener.port == 0
        with pytest.raises(ConnectionRefusedError):
            await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 5)

    uvloop.run(main())
