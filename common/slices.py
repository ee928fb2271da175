"""Work over thousands of objects in slices, without asyncio (issue 25, "no long stalls").

A computation that may walk thousands of objects (a status of every queue, every backup's
stream positions) is written as a generator that yields between slices and returns its
result (:data:`Steps`). A core stays free of I/O and of the event loop: the asyncio shell
runs one slice a turn of the loop (``broker.management.responses.run_sliced``, or
:func:`run_in_turns` with the loop's ``call_soon`` where no one awaits the result), and
:func:`run_steps` runs them all at once where no one waits (a test, a log line).

What a sliced computation promises is its own to state: typically, the set of objects is
taken when the first slice runs, and each object is read when its slice runs.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import TypeVar, cast

__all__ = ["SLICE", "Steps", "rows_in_slices", "run_in_turns", "run_steps"]

#: Objects handled in one slice: a few milliseconds of work.
SLICE = 500

T = TypeVar("T")
R = TypeVar("R")
#: A computation in slices: a generator that yields between slices and returns the result.
Steps = Generator[None, None, T]


def run_steps(steps: Steps[T]) -> T:
    """The result of ``steps``, all at once."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return cast(T, done.value)


def run_in_turns(
    steps: Steps[object], call_soon: Callable[[Callable[[], None]], object] | None
) -> None:
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
