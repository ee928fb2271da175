"""common/slices.py's SliceQueue: pieces queued in one step run later, a slice a turn of a
real event loop, in order; at once where no loop runs."""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Any

from common.slices import SliceQueue


def test_without_a_loop_each_piece_runs_as_it_is_queued() -> None:
    done: list[int] = []
    pieces = SliceQueue(lambda: None, size=2)
    for i in range(5):
        pieces.add(partial(done.append, i))
        assert done == list(range(i + 1))
    assert len(pieces) == 0


def test_pieces_queued_in_one_step_run_a_slice_a_later_turn_in_order() -> None:
    done: list[int] = []
    count, size = 1050, 100
    # pieces done at each turn of the loop after the one that queued them all
    per_turn: list[int] = []

    async def main() -> int:
        pieces = SliceQueue(lambda: asyncio.get_running_loop().call_soon, size=size)
        for i in range(count):
            pieces.add(partial(done.append, i))
        in_the_step = len(done)
        while len(done) < count:
            before = len(done)
            await asyncio.sleep(0)
            per_turn.append(len(done) - before)
        assert len(pieces) == 0
        return in_the_step

    assert asyncio.run(main()) == 0  # none in the step that queued them
    assert done == list(range(count))
    assert max(per_turn) <= size and sum(per_turn) == count
    assert len([n for n in per_turn if n]) >= count // size  # 11 turns with work at least


def test_a_piece_that_raises_is_the_loops_to_report_and_the_rest_still_run() -> None:
    done: list[int] = []
    reported: list[Any] = []

    def fails() -> None:
        raise RuntimeError("a piece failed")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, context: reported.append(context["exception"]))
        pieces = SliceQueue(lambda: loop.call_soon, size=2)
        pieces.add(lambda: done.append(0))
        pieces.add(fails)
        for i in range(1, 4):
            pieces.add(partial(done.append, i))
        for _ in range(20):
            if len(done) == 4:
                break
            await asyncio.sleep(0)

    asyncio.run(main())
    assert done == [0, 1, 2, 3]
    assert [str(e) for e in reported] == ["a piece failed"]


def test_run_in_turns_leaves_no_reference_cycle() -> None:
    """Each slice at a later turn, in order; once the last has run, the steps and what
    their frame held are freed by reference counting (a closure naming itself was a
    cycle: kept for good in a frozen heap, broker.collector)."""
    import gc
    import weakref

    from common.slices import Steps, run_in_turns

    class Held:
        pass

    ran: list[int] = []
    soon: list[Any] = []

    def steps(held: Held) -> Steps[None]:
        for i in range(3):
            if i:
                yield
            ran.append(i)

    enabled = gc.isenabled()
    gc.disable()
    try:
        held = Held()
        work = steps(held)
        gone: list[weakref.ref[Any]] = [weakref.ref(held), weakref.ref(work)]
        run_in_turns(work, soon.append)
        del held, work
        assert ran == [0]
        while soon:
            soon.pop(0)()
        assert ran == [0, 1, 2]
        assert [ref() for ref in gone] == [None, None]
    finally:
        if enabled:
            gc.enable()


def test_weakly_is_the_owner_while_it_lives() -> None:
    import weakref

    from common.weakly import weakly

    class Owner:
        name = "owner"

    owner = Owner()
    held = weakly(owner)
    assert held.name == "owner"
    assert weakly(held) is held  # a proxy is not wrapped again
    gone = weakref.ref(owner)
    del owner
    assert gone() is None
