"""How ``bench/scale_soak.py`` counts a liveness read left unanswered: unknown, not "no primary".

Its 30-minute run of 2026-11-30 (seventh, docs/reliability.md) counted 2.2 s without a
primary that was one read of the primary's liveness port unanswered within 1 s at load 23,
while the drill's confirms went on. A sample now says the primary, none (each broker
answered, or nothing listened) or unknown (one did not answer in time); an unknown stretch
counts as without a primary except where the drill's confirms went on (a frozen or starved
primary confirms nothing: its time still counts). Sans I/O: answers and events in.
"""

from __future__ import annotations

import importlib
import json
import urllib.error
from datetime import UTC, datetime
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tests.ha.scale_soak_module import scale_soak

soak = scale_soak()
clusters = importlib.import_module("soak_clusters")
UNKNOWN = clusters.UNKNOWN
T0 = 1_800_000_000.0


def _live(state: str, epoch: int = 1) -> dict[str, Any]:
    return {"alive": True, "ha_state": state, "epoch": epoch, "fenced": False, "pid": 10}


def _gap(end: float, gap_s: float) -> dict[str, Any]:
    """The drill's ``confirm_gap``: no confirm from ``end - gap_s`` until ``end``."""

    def ts(at: float) -> str:
        return datetime.fromtimestamp(T0 + at, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    return {
        "ts": ts(end), "event": "confirm_gap", "gap_ms": gap_s * 1000, "stall_ms": 100.0,
        "last_confirm_ts": ts(end - gap_s), "first_confirm_ts": ts(end),
    }  # fmt: skip


def _samples(*said: str | None) -> list[tuple[float, str | None, float]]:
    """One sample a second from ``T0``."""
    return [(T0 + k, p, 20.0) for k, p in enumerate(said)]


def test_a_sample_says_unknown_only_when_no_primary_answered_and_one_node_did_not() -> None:
    assert clusters.sample_of({"n1": _live("active"), "n2": UNKNOWN}) == "n1"
    assert clusters.sample_of({"n1": UNKNOWN, "n2": _live("ready")}) == UNKNOWN
    assert clusters.sample_of({"n1": None, "n2": _live("ready")}) is None  # refused: definite
    assert clusters.sample_of({}) is None


def test_the_reader_tells_a_timeout_from_a_refusal() -> None:
    def fetch(node: str, port: int | None, path: str, timeout: float) -> bytes:
        if node == "n1":
            raise TimeoutError("timed out")  # its liveness thread late (or frozen)
        if node == "n2":
            raise urllib.error.URLError(ConnectionRefusedError(111, "refused"))
        return json.dumps(_live("ready")).encode()

    reader = clusters.LivenessReader(fetch, 8673)
    assert reader.read("n1") == UNKNOWN
    assert reader.read("n2") is None
    assert reader.sample(["n1", "n2", "n3"]) == UNKNOWN
    assert reader.primary(["n1", "n2", "n3"]) is None  # what the faults and the viewer see
    assert reader.sample(["n2", "n3"]) is None


def test_an_unanswered_read_while_the_confirms_went_on_is_unknown_but_served() -> None:
    """The seventh run's miss: no primary named for a sample, confirms never stopped."""
    samples = _samples("n3", "n3", UNKNOWN, UNKNOWN, "n3", "n3")
    gaps, span = soak.confirm_gaps([_gap(0.5, 0.6), _gap(5.5, 0.6)])
    (stretch,) = soak.without_primary(samples, [], gaps, span)
    assert (stretch["s"], stretch["unknown_s"], stretch["served_s"]) == (2.0, 2.0, 2.0)
    assert stretch["without_s"] == 0.0 and not stretch["failover"]


def test_a_frozen_primary_is_without_a_primary() -> None:
    """SIGSTOPped: its liveness unanswered and no confirm: the confirm gap covers it."""
    samples = _samples("n1", UNKNOWN, UNKNOWN, UNKNOWN, "n1")
    gaps, span = soak.confirm_gaps([_gap(0.5, 0.6), _gap(4.2, 3.4)])
    (stretch,) = soak.without_primary(samples, [], gaps, span)
    assert (stretch["unknown_s"], stretch["served_s"], stretch["without_s"]) == (3.0, 0.0, 3.0)


def test_unknown_beyond_the_confirms_the_log_names_is_without_a_primary() -> None:
    """Before the first confirm the drill's log names (or with no log) there is no proof."""
    samples = _samples("n1", UNKNOWN, UNKNOWN, "n1", UNKNOWN, "n1")
    gaps, span = soak.confirm_gaps([_gap(2.5, 0.6)])
    stretches = soak.without_primary(samples, [], gaps, span)
    assert [s["served_s"] for s in stretches] == [0.0, 0.0]  # 1.9..2.5 is a gap
    assert [s["without_s"] for s in stretches] == [2.0, 1.0]
    assert soak.without_primary(samples, [])[0]["without_s"] == 2.0


def test_a_definite_none_is_without_a_primary_and_a_fail_over_takes_its_slot() -> None:
    samples = _samples("n1", None, UNKNOWN, "n2", UNKNOWN, "n2")
    gaps, span = soak.confirm_gaps([_gap(0.2, 0.6), _gap(2.5, 1.6), _gap(6.0, 0.6)])
    first, second = soak.without_primary(samples, [(T0 + 0.9, "kill", "n1")], gaps, span)
    assert (first["without_s"], first["served_s"], first["failover"]) == (1.5, 0.5, True)
    assert (second["without_s"], second["failover"]) == (0.0, False)
    assert soak.failovers(samples, [(T0 + 0.9, "kill", "n1")])[0]["s"] == 2.1


said = st.sampled_from(["n1", "n2", None, UNKNOWN])
gap = st.tuples(st.floats(0, 20), st.floats(0.5, 10))


@given(st.lists(said, min_size=2, max_size=20), st.lists(gap, max_size=5))
def test_every_second_of_a_stretch_is_served_or_without(
    sequence: list[str | None], gap_list: list[tuple[float, float]]
) -> None:
    samples = _samples(*sequence)
    gaps, span = soak.confirm_gaps([_gap(end, length) for end, length in gap_list])
    stretches = soak.without_primary(samples, [], gaps, span)
    for stretch in stretches:
        assert 0 <= stretch["served_s"] <= stretch["unknown_s"] <= stretch["s"]
        assert abs(stretch["served_s"] + stretch["without_s"] - stretch["s"]) <= 0.15
    nones = sum(1 for p in sequence[:-1] if p is None)
    assert sum(s["without_s"] for s in stretches) >= nones - 0.05 * len(stretches)
    covered = soak.without_primary(samples, [], [(T0 - 1, T0 + 30)], (T0 - 1, T0 + 30))
    assert all(s["served_s"] == 0 for s in covered)  # a gap over all: a frozen primary
    flowing = soak.without_primary(samples, [], [], (T0 - 1, T0 + 30))
    assert all(s["served_s"] == s["unknown_s"] for s in flowing)  # confirms all along
