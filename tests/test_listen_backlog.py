"""A listener keeps a fail-over's reconnection storm in its backlog while its loop is
stalled (broker/listen.py ``BACKLOG``): at 1,024 the kernel dropped 1,747 SYNs on a starved
new primary, and another node's takeover probe, unanswered, took it for gone. Real sockets,
a real loop stalled in a callback; 1,500 clients connect meanwhile, each answered by the
kernel at once (nothing sent, nothing read)."""

from __future__ import annotations

import asyncio
import resource
import socket
import threading
import time

import pytest

from broker.listen import BACKLOG, serve
from tests.dialling import start_connects

CLIENTS = 1_500


def _connect_all(port: int, answered: list[int], done: threading.Event) -> None:
    """Start CLIENTS connects at once; count those the kernel completed within 2 s."""
    socks: list[socket.socket] = []
    try:
        socks, pending, poller = start_connects(port, CLIENTS)
        deadline = time.monotonic() + 2.0
        while pending and (left := deadline - time.monotonic()) > 0:
            for fd, _event in poller.poll(left * 1000):
                sock = pending.pop(fd)
                poller.unregister(fd)
                if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
                    answered[0] += 1
    finally:
        done.set()
        for sock in socks:
            sock.close()


@pytest.mark.skipif(
    resource.getrlimit(resource.RLIMIT_NOFILE)[0] < 2 * CLIENTS + 100, reason="too few files"
)
def test_a_storm_of_connections_waits_in_the_backlog_of_a_stalled_loop() -> None:
    assert BACKLOG > CLIENTS
    answered = [0]
    done = threading.Event()

    async def main() -> None:
        listener = await serve(asyncio.Protocol, "test", "--interface", "127.0.0.1", 0)
        try:
            port = listener.port
            thread = threading.Thread(target=_connect_all, args=(port, answered, done))
            thread.start()
            done.wait(30)  # the loop's thread held: it accepts nothing meanwhile
            thread.join(30)
        finally:
            listener.close()

    asyncio.run(main())
    assert answered[0] == CLIENTS
