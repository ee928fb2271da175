"""ConfigGuard: withholds a replicated change's reply until one backup has the change.

Seed 001 lists "configuration changes are asynchronous" among Qpid HA's limitations; here
they are synchronous (issue 10): the reply to queue.declare, exchange.declare, queue.bind,
queue.unbind, queue.delete, exchange.delete and queue.purge goes to the client only after
every backup the primary guards holds the configuration as it was when the reply was
ready. That is the same set of backups a publisher confirm waits for (:mod:`queue_guard`),
so a declare-ok is a promise of the same strength: the queue survives a fail-over.

A :class:`ReplyHandle` counts holds on one reply and sends it when the last is released.
One :class:`ConfigGuard` per guarded backup (:class:`~broker.ha.remote_backup.RemoteBackup`)
keeps the holds taken for it, each at a position of one of its configuration streams
(the number of events pushed on it so far). It releases a hold

- when that stream's backup has acknowledged every event up to the position
  (:meth:`ConfigGuard.acknowledged`), or when a *newer* stream of the same backup has
  acknowledged its snapshot, which carries every change made before it;
- when the backup is dropped (:meth:`ConfigGuard.cancel`, from ReleaseGuards of the role
  machine: a backup that went away is released only once its removal from the in-sync
  set is committed, exactly as its held confirms).

A backup the primary guards but that has no open configuration stream (an expected backup
not back yet, or one whose link dropped) is held at :data:`NEXT_STREAM` of its last stream
(0 when it had none): only a newer stream's snapshot releases it.

:meth:`hold_next` holds a reply until the backup has the *next* event its newest stream
will carry (:meth:`pushed` keeps count): a queue's deletion, when replies held on the
queue's own stream (purge-ok) lose that stream (:meth:`QueueGuard.take_removals
<broker.ha.queue_guard.QueueGuard.take_removals>`); the deletion is that next event,
because the primary's guards hear of it before the configuration streams.

THREAD UNSAFE: the primary's event loop owns it. Sans-I/O: no socket, no clock.
"""

from __future__ import annotations

from collections.abc import Callable

#: The position of a hold only a newer stream can release.
NEXT_STREAM = 2**62


class ReplyHandle:
    """One reply held by any number of backups; sent once, when the last hold goes."""

    __slots__ = ("_armed", "_holds", "_reply", "sent")

    def __init__(self, reply: Callable[[], None]) -> None:
        self._reply = reply
        self._holds = 0
        self._armed = False
        self.sent = False

    def hold(self) -> None:
        self._holds += 1

    def release(self) -> None:
        self._holds -= 1
        self._maybe_send()

    def arm(self) -> None:
        """Every hold is taken: send now if nothing holds the reply."""
        self._armed = True
        self._maybe_send()

    @property
    def held(self) -> bool:
        return self._holds > 0

    def _maybe_send(self) -> None:
        if self._armed and self._holds <= 0 and not self.sent:
            self.sent = True
            self._reply()


class ConfigGuard:
    """The replies held for one backup's configuration (see the module docstring)."""

    def __init__(self) -> None:
        #: (stream key, position, handle), oldest first.
        self._holds: list[tuple[int, int, ReplyHandle]] = []
        self.cancelled = False
        #: The newest configuration stream's key and the events pushed on it so far.
        self.stream = 0
        self.stream_pushed = 0

    @property
    def held(self) -> int:
        return len(self._holds)

    def hold(self, stream: int, position: int, handle: ReplyHandle) -> None:
        """Hold ``handle`` until ``stream`` is acknowledged up to ``position``."""
        if self.cancelled:
            return
        handle.hold()
        self._holds.append((stream, position, handle))

    def pushed(self, stream: int, position: int) -> None:
        """``stream`` carries events up to ``position`` (1: its snapshot)."""
        if stream >= self.stream:
            self.stream, self.stream_pushed = stream, position

    def hold_next(self, handle: ReplyHandle) -> None:
        """Hold ``handle`` until the backup has the next event pushed on its newest stream
        (or a newer stream's snapshot)."""
        self.hold(self.stream, self.stream_pushed + 1, handle)

    def acknowledged(self, stream: int, position: int) -> None:
        """The backup holds the events of ``stream`` up to ``position`` (1: its snapshot)."""
        if not self._holds or position < 1:
            return
        kept: list[tuple[int, int, ReplyHandle]] = []
        released: list[ReplyHandle] = []
        for entry in self._holds:
            key, at, handle = entry
            # Stream keys grow: a newer stream's snapshot covers every older stream's hold.
            if (key == stream and at <= position) or key < stream:
                released.append(handle)
            else:
                kept.append(entry)
        self._holds = kept
        for handle in released:
            handle.release()

    def cancel(self) -> None:
        """The backup is dropped: release every reply held for it."""
        self.cancelled = True
        held, self._holds = self._holds, []
        for _key, _at, handle in held:
            handle.release()
