"""ConnectionTimeouts: the time-outs every broker connection keeps, whatever its protocol.

Both connections (AMQP 0-9-1's :class:`~broker.amqp.connection.Connection` and AMQP 1.0's
:class:`~broker.amqp10.connection.Connection`) own one and ask it at each tick what is due:

- a handshake not finished within ``handshake_timeout`` of the connection's start:
  :attr:`Due.HANDSHAKE_TIMEOUT` (logged here, ``handshake_timeout``; the connection drops);
- a close not answered within ``close_timeout``: :attr:`Due.CLOSE` (the socket goes);
- an open connection whose peer sent nothing for longer than the connection's receive
  time-out (0-9-1: two heartbeat intervals; 1.0: our idle time-out) while it was read:
  :attr:`Due.PEER_SILENT` (each protocol logs ``heartbeat_timeout`` and closes in its own
  words);
- an open connection that wrote nothing for its send interval (0-9-1: half the heartbeat;
  1.0: half the peer's idle time-out): :attr:`Due.HEARTBEAT` (the connection writes one, or,
  with output waiting, lets that go first).

The connection tells it when it read (:meth:`read`), wrote (:meth:`wrote`) and began to close
(:meth:`closing`). Time is given, never read: no I/O, no clock, testable without a socket.

THREAD UNSAFE: the connection's event loop owns it.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from broker.amqp.context import ConnectionSettings

__all__ = ["ConnectionTimeouts", "Due"]


class Due(Enum):
    """What a tick finds due (at most one thing)."""

    NOTHING = "nothing"
    CLOSE = "close"
    HANDSHAKE_TIMEOUT = "handshake_timeout"
    PEER_SILENT = "peer_silent"
    HEARTBEAT = "heartbeat"


class ConnectionTimeouts:
    """See the module docstring."""

    __slots__ = ("_settings", "closing_since", "created", "last_read", "last_write")

    def __init__(self, settings: ConnectionSettings, now: float) -> None:
        self._settings = settings
        #: When the connection started (its handshake's clock).
        self.created = now
        self.last_read = now
        self.last_write = now
        self.closing_since = 0.0

    def read(self, now: float) -> None:
        """Bytes came from the peer (or reading resumed: what it sent meanwhile was not read)."""
        self.last_read = now

    def wrote(self, now: float) -> None:
        """Bytes went to the peer."""
        self.last_write = now

    def closing(self, now: float) -> None:
        """The connection began to close (its close sent, or the client's answered)."""
        self.closing_since = now

    def due(
        self,
        now: float,
        *,
        closing: bool,
        handshaking: bool,
        receive_timeout: float,
        send_interval: float,
        reading_paused: bool = False,
        log: Any = None,
        name: str = "",
        state: str = "",
    ) -> Due:
        """What is due at ``now``: a closing connection is given ``close_timeout``, one in
        its handshake ``handshake_timeout``; an open one is checked for a silent peer
        (``receive_timeout`` seconds, 0: never; not while the connection is not read) and
        for a heartbeat to send (``send_interval`` seconds, 0: never). A handshake time-out
        is logged on ``log`` (``handshake_timeout``, naming the connection and its state)."""
        settings = self._settings
        if closing:
            return Due.CLOSE if now - self.closing_since >= settings.close_timeout else Due.NOTHING
        if handshaking:
            if now - self.created < settings.handshake_timeout:
                return Due.NOTHING
            if log is not None:
                log.warning("handshake_timeout", connection=name, state=state)
            return Due.HANDSHAKE_TIMEOUT
        if receive_timeout and now - self.last_read > receive_timeout and not reading_paused:
            return Due.PEER_SILENT
        if send_interval and now - self.last_write >= send_interval:
            return Due.HEARTBEAT
        return Due.NOTHING
