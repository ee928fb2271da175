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
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator, Sequence
from typing import TypeVar, cast

__all__ = [
    "SLICE",
    "CallSoon",
    "SliceQueue",
    "Steps",
    "rows_in_slices",
    "run_in_turns",
    "run_steps",
]

#: Objects handled in one slice: a few milliseconds of work.
SLICE = 500

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

    def _turn(self) -> None:
        work, soon = self._work, self._soon
        try:
            for _ in range(min(self._size, len(work))):
                work.popleft()()
        finally:  # a piece that raised is the loop's to report; the rest still run
            if work and soon is not None:
                soon(self._turn)
            else:
                self._soon = None
