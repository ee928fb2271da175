"""Accepting a listening socket's connections: many each time the loop polls, not one.

uvloop (libuv) takes one connection from a listening socket each time its loop polls
(seen with strace at load 16: one ``accept4`` after each ``epoll_pwait``, whatever was
waiting; 2026-12-01). A loop whose turns take 20-40 ms on loaded cores accepted 25-50
connections a second; after a restart 2,000 reconnecting clients waited in the kernel's
queue, 800-1,800 deep, and half of them got their connection.start 5-30 s after their
dial, though the broker made each socket within a turn of its accept (the storms of
soak44 and soak45: clients gave up at 30 s and dialled again, and the new primaries
stopped opening connections). An :class:`Acceptor` reads its listening socket itself
(``loop.add_reader``): each time it is readable it accepts up to :data:`ACCEPT_BATCH`
connections and hands each to the loop (``connect_accepted_socket``, with TLS when the
listener has it), so the kernel's queue empties within a few turns and the broker's own
rule for new sockets (:mod:`broker.amqp.new_sockets`) decides which is served first.

Out of file descriptors (or kernel memory), it stops reading the socket for
:data:`RETRY_AFTER` seconds, as asyncio's own servers do (the connections left waiting are
the kernel's); another failure of accept does the same and is raised to the loop's
exception handler, once a second at most. THREAD UNSAFE: the loop's thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket
import ssl as ssl_module
from collections.abc import Callable

__all__ = ["ACCEPT_BATCH", "RETRY_AFTER", "Acceptor"]

#: Connections accepted each time the listening socket is readable (the rest at the
#: loop's next poll): enough that a storm leaves the kernel's queue within a few turns, few
#: enough that accepting never makes a long step (an accept and its hand-over: tens of us).
ACCEPT_BATCH = 256

#: Seconds without accepting after the process ran out of file descriptors or memory.
RETRY_AFTER = 1.0

#: accept() failures that mean "out of resources": wait, then try again.
_EXHAUSTED = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


class Acceptor:
    """One listening socket (bound by :func:`broker.listen.open_sockets`), its connections
    accepted here and served by ``factory``'s protocols; listening from :meth:`start` to
    :meth:`close`."""

    def __init__(
        self,
        sock: socket.socket,
        factory: Callable[[], asyncio.Protocol],
        *,
        backlog: int,
        ssl: ssl_module.SSLContext | None = None,
    ) -> None:
        self.sock: socket.socket | None = sock
        self._factory = factory
        self._backlog = backlog
        self._ssl = ssl
        self._loop = asyncio.get_running_loop()
        self._reading = False
        self._retry: asyncio.TimerHandle | None = None
        #: hand-overs under way (the loop keeps only weak references to tasks)
        self._handing: set[asyncio.Task[object]] = set()

    def start(self) -> None:
        """Listen and accept."""
        sock = self.sock
        if sock is None or self._reading:
            return
        sock.setblocking(False)
        sock.listen(self._backlog)
        self._read()

    def _read(self) -> None:
        self._retry = None
        sock = self.sock
        if sock is not None and not self._reading:
            self._reading = True
            self._loop.add_reader(sock.fileno(), self._accept)

    def _unread(self) -> None:
        sock = self.sock
        if sock is not None and self._reading:
            self._reading = False
            self._loop.remove_reader(sock.fileno())

    def _accept(self) -> None:
        """The socket is readable: up to :data:`ACCEPT_BATCH` connections accepted and
        handed over."""
        sock = self.sock
        if sock is None:
            return
        for _ in range(ACCEPT_BATCH):
            try:
                connection, _address = sock.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return  # nothing more waits (or the one that did was reset meanwhile)
            except OSError as exc:
                self._unread()  # an hour's worth of the same error is not logged each poll
                self._retry = self._loop.call_later(RETRY_AFTER, self._read)
                if exc.errno in _EXHAUSTED:
                    return
                raise  # the loop's exception handler reports it (common/loop_errors.py)
            self._hand_over(connection)

    def _hand_over(self, connection: socket.socket) -> None:
        connection.setblocking(False)
        if connection.family in (socket.AF_INET, socket.AF_INET6):
            with contextlib.suppress(OSError):
                connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        task: asyncio.Task[object] = self._loop.create_task(
            self._loop.connect_accepted_socket(self._factory, connection, ssl=self._ssl)
        )
        self._handing.add(task)
        task.add_done_callback(lambda done: self._settled(done, connection))

    def _settled(self, task: asyncio.Task[object], connection: socket.socket) -> None:
        """A hand-over ended: a failed one (a TLS handshake refused, the peer gone) closes
        its socket; the protocol has seen nothing of it, or its connection_lost."""
        self._handing.discard(task)
        if task.cancelled() or task.exception() is not None:
            connection.close()

    def close(self) -> None:
        """Stop accepting and close the listening socket (connections accepted stay)."""
        self._unread()
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        sock, self.sock = self.sock, None
        if sock is not None:
            sock.close()
