"""The delta feed's core without sockets: for any sequence of adds, changes and removes,
applying what changed since version V to the lists as they were at V gives the lists now;
a version the journal cannot tell about needs a snapshot."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.management.deltas import DeltaJournal, ListUpdate, apply

LISTS = ("queues", "bindings")
KEYS = st.sampled_from([f"k{i}" for i in range(6)])
# one operation: (list, key, value): value None removes, else adds or changes the row
OPERATION = st.tuples(st.sampled_from(LISTS), KEYS, st.none() | st.integers(0, 3))
TICKS = st.lists(st.lists(OPERATION, max_size=6), min_size=1, max_size=12)
#: examples a property is tried on (about a second each on an idle machine)
EXAMPLES = settings(max_examples=60)


def _run(ticks: list[list[tuple[str, str, int | None]]], partial: bool) -> Any:
    """Drive a journal through ``ticks``; the lists after each version."""
    journal = DeltaJournal(LISTS, kept=8)
    truth: dict[str, dict[str, dict[str, Any]]] = {name: {} for name in LISTS}
    history: dict[int, dict[str, dict[str, Any]]] = {0: {name: {} for name in LISTS}}
    for operations in ticks:
        touched: dict[str, set[str]] = {name: set() for name in LISTS}
        for name, key, value in operations:
            touched[name].add(key)
            if value is None:
                truth[name].pop(key, None)
            else:
                truth[name][key] = {"name": key, "messages": value}
        updates = {}
        for name in LISTS:
            rows = truth[name]
            # a shell may rebuild only the rows it knows moved (here: those touched)
            rebuilt = {k: dict(rows[k]) for k in rows if not partial or k in touched[name]}
            updates[name] = ListUpdate(set(rows), rebuilt)
        delta = journal.since(journal.advance(updates) - 1)
        assert delta is not None and delta.version == journal.version
        assert delta.totals == {name: len(truth[name]) for name in LISTS}
        history[journal.version] = {name: dict(rows) for name, rows in truth.items()}
    return journal, history


@EXAMPLES
@given(TICKS, st.booleans())
def test_applying_the_deltas_to_an_old_snapshot_gives_the_new_one(ticks, partial) -> None:
    journal, history = _run(ticks, partial)
    now = history[journal.version]
    assert journal.snapshot() == now
    for version, then in history.items():
        delta = journal.since(version)
        if journal.version - version > 8:
            assert delta is None  # older than the ticks kept: a snapshot
            continue
        assert delta is not None
        assert apply(then, delta) == now
        for name in LISTS:  # nothing in a delta that did not change
            change = delta.lists[name]
            assert set(change.added).isdisjoint(then[name])
            assert set(change.changed) <= set(then[name])
            assert set(change.removed) <= set(then[name]) - set(now[name])


@EXAMPLES
@given(TICKS)
def test_one_tick_at_a_time_gives_the_same_lists(ticks) -> None:
    """A viewer that applies each tick's delta in turn holds the lists."""
    journal = DeltaJournal(LISTS)
    held: dict[str, dict[str, Any]] = {name: {} for name in LISTS}
    truth: dict[str, dict[str, Any]] = {name: {} for name in LISTS}
    for operations in ticks:
        for name, key, value in operations:
            if value is None:
                truth[name].pop(key, None)
            else:
                truth[name][key] = {"messages": value}
        version = journal.advance({n: ListUpdate.whole(dict(truth[n])) for n in LISTS})
        delta = journal.since(version - 1)
        assert delta is not None
        held = apply(held, delta)
        assert held == truth


def test_unchanged_rows_are_not_sent_and_versions_out_of_range_need_a_snapshot() -> None:
    journal = DeltaJournal(["queues"])
    journal.advance({"queues": ListUpdate.whole({"a": {"m": 1}, "b": {"m": 2}})})
    delta = journal.since(
        journal.advance({"queues": ListUpdate.whole({"a": {"m": 1}, "b": {"m": 3}})}) - 1
    )
    assert delta is not None and delta.view() == {
        "since": 1,
        "version": 2,
        "lists": {"queues": {"added": {}, "changed": {"b": {"m": 3}}, "removed": []}},
        "totals": {"queues": 2},
    }
    assert journal.row_versions["queues"] == {"a": 1, "b": 2}
    assert journal.membership["queues"] == 1
    assert journal.since(3) is None  # not handed out yet
    journal.forget()
    assert journal.since(1) is None  # not followed since: a snapshot
    assert journal.since(2) is not None
    with pytest.raises(ValueError, match="no row for the new key"):
        journal.advance({"queues": ListUpdate({"a", "b", "c"}, {})})


def test_a_cleared_journal_keeps_its_version_and_starts_again() -> None:
    journal = DeltaJournal(["queues"])
    journal.advance({"queues": ListUpdate.whole({"a": {"m": 1}})})
    journal.clear()
    assert journal.snapshot() == {"queues": {}} and journal.since(1) is None
    delta = journal.since(journal.advance({"queues": ListUpdate.whole({"a": {"m": 1}})}) - 1)
    assert (
        delta is not None and delta.version == 3 and delta.lists["queues"].added == {"a": {"m": 1}}
    )
