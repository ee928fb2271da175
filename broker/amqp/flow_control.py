"""Whether a connection is read: :class:`FlowControl`, the one place its reading pauses.

Two reasons stop the shell reading a connection (``reading_paused``; TCP back-pressure
then holds the rest in the client), and it is read again only when neither holds:

- a resource alarm (``broker.core.alarms``) blocks publishers: a connection that has
  published stops being read (RabbitMQ's "blocked"), after connection.blocked when the
  client has the ``connection.blocked`` capability (connection.unblocked when the last
  alarm clears); one that has not published is blocked on its first publish
  (:meth:`FlowControl.after_read`);
- the frames kept behind held basic.gets reach their bound
  (:class:`~broker.amqp.held_frames.HeldFrames`' ``paused``).

The shell is told through ``on_reading_changed`` whenever ``reading_paused`` changes. Owned
by a :class:`~broker.amqp.connection.Connection` (one per connection), built with a
:class:`FlowHost` (the connection: is it open, has it published, its client's capabilities,
send a method, restart the heartbeat clock) and the held frames' :class:`HeldPause`.

THREAD UNSAFE: the connection's event loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from pamqp import commands
from pamqp.base import Frame as Method


class FlowHost(Protocol):
    """What :class:`FlowControl` needs of its connection."""

    @property
    def is_open(self) -> bool: ...

    @property
    def messages_published(self) -> int: ...

    def capability(self, name: str) -> bool: ...

    def send_method(self, channel: int, method: Method) -> None: ...

    def reading_resumed(self) -> None:
        """Reading resumes: the client's heartbeats were not read meanwhile."""
        ...


class HeldPause(Protocol):
    """The frames kept behind held basic.gets, as far as reading is concerned."""

    #: They reached their bound: the connection is not read for them.
    paused: bool


class FlowControl:
    """See the module docstring."""

    def __init__(self, host: FlowHost, held: HeldPause, blocked_by: str | None) -> None:
        self._host = host
        self._held = held
        #: A resource alarm's reason while publishers are blocked (RabbitMQ's "blocking");
        #: the shell stops reading while ``reading_paused`` (a publisher is "blocked").
        self.blocked_by = blocked_by
        #: Not to be read (the shell pauses the socket): blocked by an alarm, or too much
        #: kept behind held basic.gets; read again only when neither holds.
        self.reading_paused = False
        self._alarm_paused = False
        #: Called when ``reading_paused`` changes (the shell pauses or resumes the socket);
        #: also from a replay of kept frames, outside ``receive_data``.
        self.on_reading_changed: Callable[[], None] | None = None

    def after_read(self) -> None:
        """The frames of a read were handled on an open connection: one that published
        while an alarm blocks publishers stops being read now."""
        blocked = self.blocked_by is not None and not self._alarm_paused
        if blocked and self._host.messages_published:
            self._pause_reading()

    def publishers_blocked(self, reason: str | None) -> None:
        """A resource alarm was raised (``reason``) or the last one cleared (None)."""
        self.blocked_by = reason
        host = self._host
        if reason is not None:
            if host.messages_published and not self._alarm_paused:
                self._pause_reading()
        elif self._alarm_paused:
            self._alarm_paused = False
            self.reading_changed()
            if host.is_open and host.capability("connection.blocked"):
                host.send_method(0, commands.Connection.Unblocked())

    def _pause_reading(self) -> None:
        """Blocked by a resource alarm."""
        self._alarm_paused = True
        self.reading_changed()
        host = self._host
        if host.is_open and host.capability("connection.blocked"):
            host.send_method(0, commands.Connection.Blocked(reason=self.blocked_by or ""))

    def reading_changed(self) -> None:
        """``reading_paused`` from its two reasons; the shell is told when it changes."""
        paused = self._alarm_paused or self._held.paused
        if paused == self.reading_paused:
            return
        self.reading_paused = paused
        if not paused:
            self._host.reading_resumed()
        if self.on_reading_changed is not None:
            self.on_reading_changed()
