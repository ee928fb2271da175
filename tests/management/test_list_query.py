"""The lists' query core without sockets: in slices (small ones here, so that the chunked
sort and its merge are walked), it keeps, orders and pages rows as a plain filter and a
stable sort would; the regular-expression guard."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.management import list_query
from broker.management.list_query import (
    ListQuery,
    QueryError,
    answer_steps,
    compile_pattern,
    select_steps,
    sort_key,
)
from common.slices import run_steps

ROWS = st.lists(
    st.fixed_dictionaries(
        {"name": st.sampled_from(["a", "ab", "B", "ba", "c"]), "n": st.none() | st.integers(0, 3)}
    ),
    max_size=40,
)


@settings(max_examples=60)
@given(
    ROWS,
    st.none() | st.sampled_from(["a", "B"]),
    st.booleans(),
    st.integers(1, 4),
    st.integers(1, 7),
)
def test_a_query_in_slices_is_a_filter_a_stable_sort_and_a_page(
    rows: list[Mapping[str, Any]], name: str | None, reverse: bool, page: int, size: int
) -> None:
    chunk, piece = list_query.SORT_CHUNK, list_query.SLICE
    list_query.SORT_CHUNK, list_query.SLICE = 3, 2
    try:
        query = ListQuery(
            paged=True, page=page, page_size=size, name=name, sort=("n",), sort_reverse=reverse
        )
        kept = [r for r in rows if name is None or name.casefold() in r["name"].casefold()]
        ordered = sorted(kept, key=lambda r: sort_key(r["n"]), reverse=reverse)
        last = max(1, -(-len(ordered) // size))
        if page > last:
            with pytest.raises(QueryError, match="out of range"):
                run_steps(select_steps(rows, query, lambda r: r, lambda r: [r["name"]]))
            return
        selection = run_steps(select_steps(rows, query, lambda r: r, lambda r: [r["name"]]))
        body = run_steps(answer_steps(selection, query))
    finally:
        list_query.SORT_CHUNK, list_query.SLICE = chunk, piece
    assert [id(r) for r in body["items"]] == [id(r) for r in ordered[(page - 1) * size :][:size]]
    assert body["filtered_count"] == len(kept) and body["total_count"] == len(rows)
    assert body["page_count"] == last and body["item_count"] == len(body["items"])


@pytest.mark.parametrize(
    ("pattern", "fine"),
    [
        ("^orders-\\d+$", True),
        ("foo.*bar", True),
        ("^q.*-.*", True),
        ("(?:eu|us)-.*", True),
        ("(a+)+", False),
        ("(a|ab)*c", False),
        ("(a)\\1", False),
        (".*.*x", False),
        ("a{1,100}b{1,100}", False),
        ("(?=.*a)(?=.*b)", False),
    ],
)
def test_the_guard_refuses_what_could_backtrack(pattern: str, fine: bool) -> None:
    if fine:
        compile_pattern(pattern)
    else:
        with pytest.raises(QueryError):
            compile_pattern(pattern)
