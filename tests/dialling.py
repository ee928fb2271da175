"""Many TCP connects at once, non-blocking, for the tests of a listener's queue."""

from __future__ import annotations

import select
import socket


def start_connects(
    port: int, count: int
) -> tuple[list[socket.socket], dict[int, socket.socket], select.poll]:
    """``count`` connects to ``127.0.0.1:port`` started at once: the sockets, those not yet
    completed by file descriptor, and a poller waiting for each to become writable
    (completed, or failed: its ``SO_ERROR`` says which)."""
    socks = []
    for _ in range(count):
        sock = socket.socket()
        sock.setblocking(False)
        sock.connect_ex(("127.0.0.1", port))
        socks.append(sock)
    pending = {s.fileno(): s for s in socks}
    poller = select.poll()
    for fd in pending:
        poller.register(fd, select.POLLOUT)
    return socks, pending, poller
