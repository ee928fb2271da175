"""Work in slices (common/slices.py) and JSON encoded in slices
(broker.management.responses.encode_slices): the same result as all at once, whatever the
data (hypothesis), with the slices where the big lists and objects are."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.management.responses import dumps, dumps_sliced, encode_slices, run_sliced
from common.slices import rows_in_slices, run_steps

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=12) | st.dictionaries(st.text(max_size=4), inner, max_size=12)
    ),
    max_leaves=60,
)


@settings(max_examples=40)
@given(JSON, st.integers(1, 6))
def test_the_pieces_make_the_text_of_one_dumps(data: Any, size: int) -> None:
    text = "".join(encode_slices(data, size))
    assert text == dumps(data)
    assert json.loads(text) == json.loads(dumps(data))


def test_a_big_list_inside_objects_is_cut_a_slice_a_piece() -> None:
    rows = [{"queue": f"q{i}", "lag": i} for i in range(1200)]
    status = {"state": "active", "backups": [{"id": "b1", "queues": rows}], "queues": rows}
    pieces = list(encode_slices(status, 500))
    assert "".join(pieces) == dumps(status)
    assert sum(piece.count('"queue"') == 500 for piece in pieces) == 4  # 2 lists x 2 full slices
    assert max(piece.count('"queue"') for piece in pieces) == 500


def test_rows_in_slices_yield_between_slices_and_return_every_row() -> None:
    steps = rows_in_slices(list(range(1001)), lambda i: i * 2, size=500)
    slices = 0
    while True:
        try:
            next(steps)
            slices += 1
        except StopIteration as done:
            assert done.value == [i * 2 for i in range(1001)]
            break
    assert slices == 2  # three slices, two pauses between them
    assert run_steps(rows_in_slices([], str)) == []


def test_the_loop_runs_other_work_between_slices() -> None:
    ran: list[str] = []

    async def scenario() -> None:
        async def other() -> None:
            ran.append("other")

        def row(i: int) -> int:
            ran.append("row")
            return i

        task = asyncio.ensure_future(other())
        rows = await run_sliced(rows_in_slices(list(range(1500)), row))
        await task
        assert rows == list(range(1500))
        text = await dumps_sliced({"rows": rows})
        assert json.loads(text) == {"rows": rows}

    asyncio.run(scenario())
    assert "other" in ran and ran.index("other") < len(ran) - 1  # before the last slice
    assert 0 < ran.index("other") < 1500
