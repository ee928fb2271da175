"""ConnectionTimeouts: the time-outs every broker connection keeps, whatever its protocol.

Both connections (AMQP 0-9-1's :class:`~broker.amqp.connection.Connection` and AMQP 1.0's
:class:`~broker.amqp10.connection.Connection`) own one, built with the connection as its
:class:`TimedConnection`, and call :meth:`ConnectionTimeouts.tick` at each of their ticks.
A tick carries out what is due (at most one thing):

- a close not answered within ``close_timeout``: the socket goes (``should_close``);
- a handshake not finished within ``handshake_timeout`` of the connection's start: logged
  here (``handshake_timeout``) and the socket goes, its ``close_reason``
  "handshake timeout";
- an open connection whose peer sent nothing for longer than the connection's receive
  time-out (0-9-1: two heartbeat intervals; 1.0: our idle time-out) while it was read,
  found so at two ticks with nothing read between: the connection's
  :meth:`~TimedConnection.peer_silent` (each protocol logs ``heartbeat_timeout`` and
  closes in its own words: 0-9-1 drops the socket with a reason, 1.0 closes with
  ``amqp:resource-limit-exceeded``). Why two: a loop that ran late (starved of CPU for
  2 s on a loaded machine) runs its timers before it reads its sockets (uvloop: timers,
  then the poll), so its first tick after the stall finds silent a peer whose frames wait
  unread in the socket: a primary at 10,000 queues closed a backup's replication link so,
  its grant lapsed and another broker took over (docs/reliability.md). The later tick
  comes after a poll: what waited has been read. It costs a genuinely silent peer one
  tick more;
- an open connection that wrote nothing for its send interval (0-9-1: half the heartbeat;
  1.0: half the peer's idle time-out): the connection's
  :meth:`~TimedConnection.send_heartbeat` (it writes one, or, with output waiting, lets
  that go first).

The connection tells it when it read (:meth:`read`), wrote (:meth:`wrote`) and began to close
(:meth:`closing`). Time is given, never read: no I/O, no clock, testable without a socket.

THREAD UNSAFE: the connection's event loop owns it.
"""

from __future__ import annotations

from typing import Any, Protocol

from broker.amqp.context import ConnectionSettings

__all__ = ["ConnectionTimeouts", "TimedConnection"]


class TimedConnection(Protocol):
    """The connection that owns the time-outs, as they see it (either protocol's)."""

    #: The shell closes the socket once this is set.
    should_close: bool
    #: Why the connection closed (logged with ``connection_closed``).
    close_reason: str | None
    #: For logs: ``"<peer> #<id>"``.
    name: str

    def peer_silent(self) -> None:
        """The peer sent nothing for the receive time-out: close in the protocol's words."""
        ...

    def send_heartbeat(self) -> None:
        """A heartbeat is due: write one, or let the output waiting go first."""
        ...


class ConnectionTimeouts:
    """See the module docstring."""

    __slots__ = (
        "_connection",
        "_settings",
        "closing_since",
        "created",
        "last_read",
        "last_write",
        "silence_seen",
    )

    def __init__(
        self, settings: ConnectionSettings, now: float, connection: TimedConnection
    ) -> None:
        self._settings = settings
        self._connection = connection
        #: When the connection started (its handshake's clock).
        self.created = now
        self.last_read = now
        self.last_write = now
        self.closing_since = 0.0
        #: when a tick first found the peer silent, nothing read since (None: not found so)
        self.silence_seen: float | None = None

    def read(self, now: float) -> None:
        """Bytes came from the peer (or reading resumed: what it sent meanwhile was not read)."""
        self.last_read = now
        self.silence_seen = None

    def wrote(self, now: float) -> None:
        """Bytes went to the peer."""
        self.last_write = now

    def closing(self, now: float) -> None:
        """The connection began to close (its close sent, or the client's answered)."""
        self.closing_since = now

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
        """Carry out what is due at ``now``: a closing connection is given
        ``close_timeout``, one in its handshake ``handshake_timeout`` (its time-out logged
        on ``log``, naming the connection and its ``state``); an open one is checked for a
        silent peer (``receive_timeout`` seconds, 0: never; not while the connection is not
        read; silent at an earlier tick too, nothing read since) and for a heartbeat to send
        (``send_interval`` seconds, 0: never)."""
        settings, connection = self._settings, self._connection
        if closing:
            if now - self.closing_since >= settings.close_timeout:
                connection.should_close = True
        elif handshaking:
            if now - self.created >= settings.handshake_timeout:
                if log is not None:
                    log.warning("handshake_timeout", connection=connection.name, state=state)
                connection.close_reason = "handshake timeout"
                connection.should_close = True
        else:
            if receive_timeout and now - self.last_read > receive_timeout and not reading_paused:
                seen = self.silence_seen
                if seen is not None and now > seen:  # a poll came between: nothing waited
                    connection.peer_silent()
                    return
                if seen is None:
                    self.silence_seen = now
            if send_interval and now - self.last_write >= send_interval:
                connection.send_heartbeat()
