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
    "HANDSHAKE",
    "SLICE",
    "TRAFFIC",
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
    _Turns(steps, call_soon)()


class _Turns:
    """The slices of :func:`run_in_turns`: an object, not a closure that names itself (a
    reference cycle, with the finished generator and what its frame held, that only the
    cyclic collector frees: never, in a frozen heap, ``broker.collector``)."""

    __slots__ = ("_call_soon", "_steps")

    def __init__(self, steps: Steps[object], call_soon: CallSoon) -> None:
        self._steps = steps
        self._call_soon = call_soon

    def __call__(self) -> None:
        try:
            next(self._steps)
        except StopIteration:
            return
        self._call_soon(self)


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
        self._queue(work, self._work)

    def _queue(self, work: Callable[[], None], queue: deque[Callable[[], None]]) -> None:
        """``work`` onto ``queue``, a turn asked for if none is; at once without a loop."""
        if self._soon is None:
            soon = self._call_soon()
            if soon is None:
                work()
                return
            self._soon = soon
            soon(self._turn)
        queue.append(work)

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


#: The ranks of :class:`TurnBudget`'s queues, first served first: a handshake under way
#: (its start-ok, its login, its open), then everything else (the open connections'
#: reads, new sockets, lost ones) in the order it came.
HANDSHAKE, TRAFFIC = 0, 1


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

    Two queues, by rank: the pieces of a handshake under way (:data:`HANDSHAKE`: a
    start-ok read, a login decided, an open) before everything else (:data:`TRAFFIC`:
    the open connections' reads, a new socket's ticket (the broker's new sockets: which one
    it makes is theirs to say, ``broker.amqp.new_sockets``), a lost one's release, in the
    order they came). Each turn runs one piece of each queue that has one, whatever it
    costs (both always move), then, while its CPU lasts, the first-ranked queue's. In one
    queue, in a storm of thousands of clients reconnecting after a fail-over, each step of
    a handshake waited behind the storm's new sockets and the open clients'
    acknowledgements, longer than a client waits for its handshake (pika: 15 s): clients
    gave up and dialled again, and the broker began handshakes and finished none (soak39,
    2026-12-01: 1,265 handshakes abandoned a minute at connection.start's answer, none
    opened for 4.5 minutes). A handshake's pieces are few (a socket reaches the other rank
    once open), so the handshakes begun are finished, while new sockets keep their share
    of the turns in arrival order: ranked last (soak40, soak41), behind open clients'
    steady acknowledgements, they were begun one a turn, 8 a second at load 15, and a
    client's redials waited past its 30 s.

    A :class:`SliceQueue` whose turn is a CPU budget instead of a count (``call_soon`` as
    there). THREAD UNSAFE: the loop's thread.
    """

    __slots__ = ("_budget", "_cpu", "_queues", "_since")

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
        #: by rank; the last is the SliceQueue's own
        self._queues: tuple[deque[Callable[[], None]], ...] = (deque(), self._work)

    def __len__(self) -> int:
        return sum(len(queue) for queue in self._queues)

    def _waiting(self) -> bool:
        return any(self._queues)

    def spent(self) -> bool:
        """Whether a piece must wait: others wait, or this turn's CPU is spent."""
        return self._waiting() or self._cpu() - self._since >= self._budget

    def later(self, work: Callable[[], None], rank: int = TRAFFIC) -> None:
        """Run ``work`` at a later turn, after every piece of its ``rank`` queued before
        it, and of the ranks before it (one piece of each queue a turn at least)."""
        self._queue(work, self._queues[rank])

    def _pieces(self) -> None:
        """This turn's pieces: one of each queue that has one, whatever they cost (every
        queue always moves), then while its CPU lasts the first-ranked queue's."""
        queues, cpu = self._queues, self._cpu
        self._since = since = cpu()
        for queue in queues:
            if queue:
                queue.popleft()()
        while cpu() - since < self._budget:
            for queue in queues:
                if queue:
                    queue.popleft()()
                    break
            else:
                return

    def _turn(self) -> None:
        soon = self._soon
        try:
            self._pieces()
        finally:  # a piece that raised is the loop's to report; the rest still run
            if self._waiting() and soon is not None:
                soon(self._turn)
            else:
                self._soon = None
