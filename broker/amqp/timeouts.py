"""ConnectionTimeouts: the time-outs every broker connection keeps, whatever its protocol.

Both connections (AMQP 0-9-1's :class:`~broker.amqp.connection.Connection` and AMQP 1.0's
:class:`~broker.amqp10.connection.Connection`) own one, built with the connection as its
:class:`TimedConnection` and two callbacks, and call :meth:`ConnectionTimeouts.tick` at each
of their ticks; it finds what is due (:meth:`ConnectionTimeouts.due`, at most one thing)
and carries it out:

- a handshake not finished within ``handshake_timeout`` of the connection's start:
  :attr:`Due.HANDSHAKE_TIMEOUT` (logged here, ``handshake_timeout``; the connection drops,
  its ``close_reason`` "handshake timeout");
- a close not answered within ``close_timeout``: :attr:`Due.CLOSE` (the socket goes);
- an open connection whose peer sent nothing for longer than the connection's receive
  time-out (0-9-1: two heartbeat intervals; 1.0: our idle time-out) while it was read:
  :attr:`Due.PEER_SILENT`, the connection's ``peer_silent`` callback (each protocol logs
  ``heartbeat_timeout`` and closes in its own words: 0-9-1 drops the socket with a reason,
  1.0 closes with ``amqp:resource-limit-exceeded``);
- an open connection that wrote nothing for its send interval (0-9-1: half the heartbeat;
  1.0: half the peer's idle time-out): :attr:`Due.HEARTBEAT`, the connection's ``heartbeat``
  callback (it writes one, or, with output waiting, lets that go first).

The connection tells it when it read (:meth:`read`), wrote (:meth:`wrote`) and began to close
(:meth:`closing`). Time is given, never read: no I/O, no clock, testable without a socket.

THREAD UNSAFE: the connection's event loop owns it.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from typing import Any, Protocol

from broker.amqp.context import ConnectionSettings

__all__ = ["ConnectionTimeouts", "Due", "TimedConnection"]


class Due(Enum):
    """What a tick finds due (at most one thing)."""

    NOTHING = "nothing"
    CLOSE = "close"
    HANDSHAKE_TIMEOUT = "handshake_timeout"
    PEER_SILENT = "peer_silent"
    HEARTBEAT = "heartbeat"


class TimedConnection(Protocol):
    """What the time-outs drop: the connection that owns them (either protocol's)."""

    #: The shell closes the socket once this is set.
    should_close: bool
    #: Why the connection closed (logged with ``connection_closed``).
    close_reason: str | None
    #: For logs: ``"<peer> #<id>"``.
    name: str


class ConnectionTimeouts:
    """See the module docstring."""

    __slots__ = (
        "_connection",
        "_heartbeat",
        "_peer_silent",
        "_settings",
        "closing_since",
        "created",
        "last_read",
        "last_write",
    )

    def __init__(
        self,
        settings: ConnectionSettings,
        now: float,
        connection: TimedConnection,
        *,
        peer_silent: Callable[[], None],
        heartbeat: Callable[[], None],
    ) -> None:
        """``peer_silent()``: the peer sent nothing for too long (close in the protocol's
        words); ``heartbeat()``: a heartbeat is due (write one, or let waiting output go)."""
        self._settings = settings
        self._connection = connection
        self._peer_silent = peer_silent
        self._heartbeat = heartbeat
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

    def tick(
        self,
        now: float,
        *,
        closing: bool,
        handshaking: bool,
        receive_timeout: float,
        send_interval: float,
        reading_paused: bool = False,
        log: Any = None,
        state: str = "",
    ) -> None:
        """Carry out what is due at ``now`` (:meth:`due`, the same arguments; the
        connection named by its own name): the socket goes after an unanswered close or a
        handshake time-out; a silent peer and a heartbeat to send are the connection's
        callbacks."""
        connection = self._connection
        due = self.due(
            now,
            closing=closing,
            handshaking=handshaking,
            receive_timeout=receive_timeout,
            send_interval=send_interval,
            reading_paused=reading_paused,
            log=log,
            name=connection.name,
            state=state,
        )
        if due is Due.NOTHING:
            return
        if due is Due.HEARTBEAT:
            self._heartbeat()
        elif due is Due.PEER_SILENT:
            self._peer_silent()
        elif due is Due.HANDSHAKE_TIMEOUT:
            connection.close_reason = "handshake timeout"
            connection.should_close = True
        else:  # Due.CLOSE
            connection.should_close = True
