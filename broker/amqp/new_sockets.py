"""New client sockets waiting for a turn of the loop to be made: oldest first while the
broker keeps up, newest first once it does not (issue 25: a storm of reconnecting clients).

When the loop's turn is spent (:class:`common.slices.TurnBudget`), a new socket is not made
at once: it waits, and its place in the turns is a ticket (:meth:`NewSockets.arrive` returns
it) that the turn budget runs in arrival order with the open connections' reads. A ticket
makes one waiting socket, not necessarily its own:

- the **oldest** waiting, while that one has waited less than :data:`SOCKET_PATIENCE`
  (the broker keeps up: first come, first served);
- else the **newest** (the broker is behind: the oldest have waited long enough that their
  clients are about to give up; made now, their handshakes would end unanswered).

In a storm longer than the clients' patience, first come first served makes every socket
at the end of its client's patience: the client leaves while its handshake is under way,
dials again at the back of the queue, and the broker begins handshakes and finishes none
(soak44, 2026-12-01, at load 16: after a fail-over 5,597 handshakes abandoned at
connection.start's answer, none opened for five minutes; the clients' patience 30 s; but
soak45 collapsed the same way with this rule in and no socket waited 3 s: there, the
handshakes stopped after connection.start, not before it, a cause still to be found). The
newest first, the handshakes begun are those of clients still waiting, and every one made
is opened: the broker's whole rate goes to clients that stay. The ones that waited longest
leave and dial again, and are then the newest (no client waits for ever while the storm
lasts: each dial is as likely as any to be made). A socket whose client left while it
waited is dropped as it is found (its protocol cancels its place: it costs nothing).

Sans I/O: the clock is given; THREAD UNSAFE (the loop's thread).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["SOCKET_PATIENCE", "NewSockets", "Shift", "Waiting"]

#: A new socket that has waited this long for its turn means the broker is behind: the
#: newest are made first (seconds). Well within clients' patience for a handshake (pika
#: 15 s, RabbitMQ's own handshake timeout 10 s), so that a socket made at the end of its
#: wait still has time for its handshake.
SOCKET_PATIENCE = 3.0


@dataclass(slots=True, eq=False)
class Waiting:
    """One socket's wait: when it came and how it is made; ``gone`` once its client left."""

    at: float
    make: Callable[[], None]
    gone: bool = False

    def cancel(self) -> None:
        """The socket is gone: it is dropped where it is found, never made."""
        self.gone = True


@dataclass(frozen=True, slots=True)
class Shift:
    """The order changed: ``newest_first`` from now on; ``waited_s``: the oldest's wait, and
    ``waiting``: how many sockets wait (live or not yet found gone)."""

    newest_first: bool
    waited_s: float
    waiting: int


@dataclass(slots=True)
class NewSockets:
    """The sockets waiting to be made, and the rule of which one a ticket makes."""

    clock: Callable[[], float] = time.monotonic
    patience: float = SOCKET_PATIENCE
    #: Told each change of order (a log line for the operator), or None.
    on_shift: Callable[[Shift], None] | None = None
    _waiting: deque[Waiting] = field(default_factory=deque)
    _newest_first: bool = False
    made_newest_first: int = 0

    def __len__(self) -> int:
        return len(self._waiting)

    @property
    def newest_first(self) -> bool:
        return self._newest_first

    def arrive(self, make: Callable[[], None]) -> tuple[Callable[[], None], Waiting]:
        """A socket begins to wait; returns its ticket (for the turn budget) and its wait
        (the protocol cancels it when the socket goes)."""
        waiting = Waiting(self.clock(), make)
        self._waiting.append(waiting)
        return self.make_one, waiting

    def make_one(self) -> None:
        """A ticket's turn: make one waiting socket by the rule (none if none waits)."""
        waiting = self._waiting
        while waiting and waiting[0].gone:
            waiting.popleft()
        while waiting and waiting[-1].gone:
            waiting.pop()
        if not waiting:
            self._shift(False, 0.0)
            return
        waited = self.clock() - waiting[0].at
        behind = waited >= self.patience
        self._shift(behind, waited)
        if behind:
            chosen = waiting.pop()
            self.made_newest_first += 1
        else:
            chosen = waiting.popleft()
        chosen.make()

    def _shift(self, newest_first: bool, waited: float) -> None:
        if newest_first == self._newest_first:
            return
        self._newest_first = newest_first
        if self.on_shift is not None:
            self.on_shift(Shift(newest_first, round(waited, 3), len(self._waiting)))
