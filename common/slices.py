"""Work over thousands of objects in slices, without asyncio (issue 25, "no long stalls").

A computation that may walk thousands of objects (a status of every queue, every backup's
stream positions) is written as a generator that yields between slices and returns its
result (:data:`Steps`). A core stays free of I/O and of the event loop: the asyncio shell
runs one slice a turn of the loop (``broker.management.responses.run_sliced``, or
:func:`run_in_turns` with the loop's ``call_soon`` where no one awaits the result), and
:func:`run_steps` runs them all at once where no one waits (a test, a log line).

What a sliced computation promises is its own to state: typically, the set of objects is
taken when the first slice runs, and each object is read when its slice runs.

Where the pieces come one at a time from many callers in one step (a link's thousands of
streams closed by one connection's end), a :class:`SliceQueue` takes them and runs them
later, a slice a turn of the loop, in the order they came.

Where they come from the loop itself, each a callback of its own that the loop runs in one
turn (thousands of sockets read in one turn when their clients all come or go at once), a
:class:`TurnBudget` lets them run at once while the turn has CPU left and queues the rest
for later turns, a budget's worth a turn.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Generator, Sequence
from typing import TypeVar, cast

__all__ = [
    "SLICE",
    "TURN_BUDGET",
    "CallSoon",
    "SliceQueue",
    "Steps",
    "TurnBudget",
    "rows_in_slices",
    "run_in_turns",
    "run_steps",
]

#: Objects handled in one slice: a few milliseconds of work.
SLICE = 500
#: CPU a turn of the loop spends on the pieces of a :class:`TurnBudget` (seconds).
TURN_BUDGET = 0.02

T = TypeVar("T")
R = TypeVar("R")
#: A computation in slices: a generator that yields between slices and returns the result.
Steps = Generator[None, None, T]
#: An event loop's ``call_soon``: runs a callback at a later turn of the loop.
CallSoon = Callable[[Callable[[], None]], object]


def run_steps(steps: Steps[T]) -> T:
    """The result of ``steps``, all at once."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return cast(T, done.value)


def run_in_turns(steps: Steps[object], call_soon: CallSoon | None) -> None:
    """Run ``steps`` for their effect: the first slice now, each next one in a callback
    ``call_soon`` schedules (an event loop's: one slice a turn); all at once without one."""
    if call_soon is None:
        run_steps(steps)
        return

    def turn() -> None:
        try:
            next(steps)
        except StopIteration:
            return
        call_soon(turn)

    turn()


def rows_in_slices(items: Sequence[T], row: Callable[[T], R], size: int = SLICE) -> Steps[list[R]]:
    """``[row(item) for item in items]``, ``size`` items a slice."""
    rows: list[R] = []
    for start in range(0, len(items), size):
        if start:
            yield
        rows.extend(row(item) for item in items[start : start + size])
    return rows


class SliceQueue:
    """Small pieces of work queued now and run later, ``size`` a turn of the loop, in the
    order they were queued: thousands queued in one step never make one long step.
    ``call_soon`` is asked, at each piece queued while none waits, for the running loop's
    ``call_soon`` (None: no loop runs, a test driving a core: the piece runs at once, as
    it is queued)."""

    __slots__ = ("_call_soon", "_size", "_soon", "_work")

    def __init__(self, call_soon: Callable[[], CallSoon | None], size: int = SLICE) -> None:
        self._call_soon = call_soon
        self._size = size
        self._work: deque[Callable[[], None]] = deque()
        #: The loop's call_soon while pieces wait for a turn (None: none waits).
        self._soon: CallSoon | None = None

    def __len__(self) -> int:
        """Pieces waiting for a turn."""
        return len(self._work)

    def add(self, work: Callable[[], None]) -> None:
        """Run ``work`` at a later turn, after every piece queued before it."""
        if self._soon is None:
            soon = self._call_soon()
            if soon is None:
                work()
                return
            self._soon = soon
            soon(self._turn)
        self._work.append(work)

    def _pieces(self) -> None:
        """This turn's pieces: ``size`` of them."""
        work = self._work
        for _ in range(min(self._size, len(work))):
            work.popleft()()

    def _turn(self) -> None:
        work, soon = self._work, self._soon
        try:
            self._pieces()
        finally:  # a piece that raised is the loop's to report; the rest still run
            if work and soon is not None:
                soon(self._turn)
            else:
                self._soon = None


class TurnBudget(SliceQueue):
    """Pieces of work that come from the loop's own callbacks, many in one turn: each runs
    at once while the turn has CPU left, else waits in a queue for later turns, run in the
    order they came, :data:`TURN_BUDGET` of CPU a turn (the first piece of a turn runs
    whatever it costs: the queue always moves).

    The caller asks :meth:`spent` first and, when it is, hands the piece to :meth:`later`
    (and keeps what the piece needs: a socket's read is kept, reading paused, until its
    piece runs); else it runs the piece itself. A turn's CPU is counted from the queue's
    last turn (``cpu``: the loop thread's CPU clock, ``time.thread_time``; idle time
    counts nothing): with nothing queued for a while, that may be some turns ago, and
    one piece then waits a turn that needed not, a pause of one turn in each
    :data:`TURN_BUDGET` of the loop's CPU. While pieces wait, :meth:`spent` holds for
    everyone: a newcomer never overtakes them.

    A new socket's first piece (:meth:`later_new`: its connection made, its protocol
    header read, connection.start sent) waits in a queue of its own, behind every piece of
    the sockets already served: in a storm of thousands of clients a handshake once begun
    is finished (its start-ok, its login, its open) before more are begun. In one queue,
    each step of every handshake waited behind all the storm's new sockets, longer than
    the clients wait for an answer (pika gives up after 15 s): they gave up, dialled
    again, and the broker began handshakes and finished none (soak39: 500 abandoned
    handshakes in 20 s, none opened, 3 minutes after a fail-over). Each turn runs one
    piece of each queue whatever it costs: both always move.

    A :class:`SliceQueue` whose turn is a CPU budget instead of a count (``call_soon`` as
    there). THREAD UNSAFE: the loop's thread.
    """

    __slots__ = ("_budget", "_cpu", "_new", "_since")

    def __init__(
        self,
        call_soon: Callable[[], CallSoon | None],
        budget: float = TURN_BUDGET,
        cpu: Callable[[], float] = time.thread_time,
    ) -> None:
        super().__init__(call_soon)
        self._budget = budget
        self._cpu = cpu
        self._since = cpu()
        #: the new sockets' first pieces, behind every other piece
        self._new: deque[Callable[[], None]] = deque()

    def __len__(self) -> int:
        return len(self._work) + len(self._new)

    def spent(self) -> bool:
        """Whether a piece must wait: others wait, or this turn's CPU is spent."""
        return bool(self._work or self._new) or self._cpu() - self._since >= self._budget

    def later(self, work: Callable[[], None]) -> None:
        """Run ``work`` at a later turn, after every piece queued before it (a new
        socket's first piece aside: :meth:`later_new`)."""
        self.add(work)

    def later_new(self, work: Callable[[], None]) -> None:
        """Run a new socket's first piece at a later turn, after every piece of the others
        queued before or meanwhile (one new socket a turn at least)."""
        if self._soon is None:
            soon = self._call_soon()
            if soon is None:
                work()
                return
            self._soon = soon
            soon(self._turn)
        self._new.append(work)

    def _pieces(self) -> None:
        """This turn's pieces: one new socket's first and one of the others, whatever
        they cost (both queues always move), then while its CPU lasts the others' and
        then more new sockets'."""
        work, new, cpu = self._work, self._new, self._cpu
        self._since = since = cpu()
        if new:
            new.popleft()()
        if work:
            work.popleft()()
        while (work or new) and cpu() - since < self._budget:
            (work or new).popleft()()

    def _turn(self) -> None:
        soon = self._soon
        try:
            self._pieces()
        finally:  # a piece that raised is the loop's to report; the rest still run
            if (self._work or self._new) and soon is not None:
                soon(self._turn)
            else:
                self._soon = None
