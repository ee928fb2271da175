"""IdSet (broker/ha/id_set.py): behaviour against Python's set as the model, and its encoding."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from broker.ha.id_set import MAX_ID, IdSet

# Ids clustered so that adds, discards and ranges touch and overlap, plus the top of the range.
small_ids = st.integers(0, 80)
ids = st.one_of(small_ids, st.integers(MAX_ID - 80, MAX_ID), st.integers(0, MAX_ID))
spans = st.integers(0, 30)


def _range(first: int, span: int) -> tuple[int, int]:
    return first, min(first + span, MAX_ID)


id_sets = st.lists(st.tuples(ids, spans).map(lambda t: _range(*t)), max_size=8).map(
    IdSet.from_ranges
)


def _model(ranges: list[tuple[int, int]]) -> set[int]:
    return {i for first, last in ranges for i in range(first, last + 1)}


def _assert_canonical(s: IdSet) -> None:
    ranges = s.ranges()
    for first, last in ranges:
        assert 0 <= first <= last <= MAX_ID
    for (_, last), (first, _) in itertools.pairwise(ranges):
        assert first >= last + 2, f"ranges overlap or touch: {ranges}"


# -- the model-based state machine ------------------------------------------------------------


class IdSetMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.ids = IdSet()
        self.model: set[int] = set()

    @rule(i=ids)
    def add(self, i: int) -> None:
        self.ids.add(i)
        self.model.add(i)

    @rule(first=ids, span=spans)
    def add_range(self, first: int, span: int) -> None:
        first, last = _range(first, span)
        self.ids.add_range(first, last)
        self.model.update(range(first, last + 1))

    @rule(i=ids)
    def discard(self, i: int) -> None:
        self.ids.discard(i)
        self.model.discard(i)

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def discard_present(self, data: st.DataObject) -> None:
        i = data.draw(st.sampled_from(sorted(self.model)))
        self.ids.discard(i)
        self.model.discard(i)

    @rule(i=ids)
    def contains(self, i: int) -> None:
        assert (i in self.ids) == (i in self.model)

    @rule(other=id_sets)
    def algebra(self, other: IdSet) -> None:
        other_model = set(other)
        for result, expected in (
            (self.ids.union(other), self.model | other_model),
            (self.ids.intersection(other), self.model & other_model),
            (self.ids.difference(other), self.model - other_model),
            (other.difference(self.ids), other_model - self.model),
        ):
            _assert_canonical(result)
            assert set(result) == expected
            assert len(result) == len(expected)
        assert self.ids | other == self.ids.union(other)
        assert self.ids & other == self.ids.intersection(other)
        assert self.ids - other == self.ids.difference(other)

    @rule(other=id_sets)
    def update_in_place_by_union(self, other: IdSet) -> None:
        self.model |= set(other)
        self.ids = self.ids.union(other)

    @invariant()
    def matches_model(self) -> None:
        _assert_canonical(self.ids)
        assert len(self.ids) == len(self.model)
        assert list(self.ids) == sorted(self.model)
        assert bool(self.ids) == bool(self.model)
        if self.model:
            assert self.ids.min() == min(self.model)
            assert self.ids.max() == max(self.model)
        assert self.ids == IdSet(self.model)

    @invariant()
    def encoding_round_trips(self) -> None:
        data = self.ids.encode()
        assert IdSet.decode(data) == self.ids
        assert IdSet.decode(data).ranges() == self.ids.ranges()
        assert len(IdSet.decode(data)) == len(self.ids)


TestIdSetMachine = IdSetMachine.TestCase
TestIdSetMachine.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)


# -- properties ---------------------------------------------------------------------------------


@given(st.lists(st.tuples(ids, spans).map(lambda t: _range(*t)), max_size=10))
def test_from_ranges_matches_model(ranges: list[tuple[int, int]]) -> None:
    s = IdSet.from_ranges(ranges)
    _assert_canonical(s)
    assert set(s) == _model(ranges)
    assert len(s) == len(_model(ranges))
    assert IdSet(s) == s  # copy constructor
    assert s.copy() == s


@given(id_sets, id_sets)
def test_algebra_laws(a: IdSet, b: IdSet) -> None:
    assert a | b == b | a
    assert a & b == b & a
    assert (a - b) | (a & b) == a
    assert (a - b) & b == IdSet()
    assert len(a | b) == len(a) + len(b) - len(a & b)


@given(id_sets)
def test_encode_round_trip_and_bytes_likes(s: IdSet) -> None:
    data = s.encode()
    assert IdSet.decode(data) == s
    assert IdSet.decode(bytearray(data)) == s
    assert IdSet.decode(memoryview(data)) == s


@given(st.binary(max_size=40))
def test_decode_random_bytes_raises_only_value_error(data: bytes) -> None:
    try:
        decoded = IdSet.decode(data)
    except ValueError:
        return
    _assert_canonical(decoded)
    assert decoded.encode() == data  # the encoding is canonical: accepted bytes re-encode same


@given(id_sets, st.data())
def test_decode_every_truncation_raises_value_error(s: IdSet, data: st.DataObject) -> None:
    encoded = s.encode()
    for cut in range(len(encoded)):
        with pytest.raises(ValueError):
            IdSet.decode(encoded[:cut])
    with pytest.raises(ValueError, match="trailing"):
        IdSet.decode(encoded + data.draw(st.binary(min_size=1, max_size=4)))


@given(id_sets)
def test_of_sorted_reads_the_keys_of_ascending_items(s: IdSet) -> None:
    """A queue's snapshot by position: the same set as from its ids, and (in runs) with far
    fewer keys read than there are items."""
    items = [(i, "entry") for i in s]
    read: list[int] = []

    def key(item: tuple[int, str]) -> int:
        read.append(item[0])
        return item[0]

    assert IdSet.of_sorted(items, key) == s == IdSet.from_ascending(list(s))
    assert len(read) <= 4 * len(s.ranges()) * (len(items).bit_length() + 1)


def test_of_sorted_reads_few_keys_of_a_big_queue() -> None:
    positions = [*range(1, 40_001), *range(40_101, 90_001)]  # 89,900 entries, 2 runs
    read = 0

    def key(position: int) -> int:
        nonlocal read
        read += 1
        return position

    assert IdSet.of_sorted(positions, key).ranges() == [(1, 40_000), (40_101, 90_000)]
    assert read < 200


# -- examples -----------------------------------------------------------------------------------


def test_a_million_consecutive_ids_is_one_range() -> None:
    s = IdSet()
    for i in range(1, 1_000_001):
        s.add(i)
    assert s.ranges() == [(1, 1_000_000)]
    assert len(s) == 1_000_000
    assert len(s.encode()) == 1 + 1 + 3  # count, gap 1, span 999_999 (3 varint bytes)
    assert IdSet(range(1, 1_000_001)) == s
    assert IdSet.from_ranges([(1, 1_000_000)]) == s


def test_descending_and_out_of_order_adds_coalesce() -> None:
    s = IdSet()
    for i in range(10_000, 0, -1):
        s.add(i)
    assert s.ranges() == [(1, 10_000)]
    s = IdSet()
    for i in [*range(0, 100, 2), *range(1, 100, 2)]:
        s.add(i)
    assert s.ranges() == [(0, 99)]


def test_add_range_merges_overlapping_and_touching() -> None:
    s = IdSet.from_ranges([(1, 3), (10, 12), (20, 22)])
    s.add_range(4, 9)  # touches both neighbours
    assert s.ranges() == [(1, 12), (20, 22)]
    s.add_range(11, 30)
    assert s.ranges() == [(1, 30)]
    assert len(s) == 30
    s.add_range(40, 40)
    assert s.ranges() == [(1, 30), (40, 40)]


def test_discard_splits_and_trims() -> None:
    s = IdSet.from_ranges([(1, 10)])
    s.discard(5)
    assert s.ranges() == [(1, 4), (6, 10)]
    s.discard(1)
    s.discard(10)
    s.discard(99)  # absent: no-op
    assert s.ranges() == [(2, 4), (6, 9)]
    for i in (2, 3, 4):
        s.discard(i)
    assert s.ranges() == [(6, 9)]
    assert len(s) == 4


def test_extremes() -> None:
    s = IdSet([0, MAX_ID])
    assert s.min() == 0
    assert s.max() == MAX_ID
    assert MAX_ID in s
    assert IdSet.decode(s.encode()) == s
    s.add_range(0, MAX_ID)
    assert s.ranges() == [(0, MAX_ID)]
    assert IdSet.decode(s.encode()) == s
    with pytest.raises(OverflowError):  # 2**63 ids: more than len() can return
        len(s)
    s.discard(0)
    assert len(s) == MAX_ID


def test_bad_ids() -> None:
    s = IdSet()
    for bad in (-1, MAX_ID + 1, 2**64):
        with pytest.raises(ValueError, match="out of range"):
            s.add(bad)
        with pytest.raises(ValueError):
            s.discard(bad)
    for wrong in ("1", 1.0, True, None):
        with pytest.raises(TypeError):
            s.add(wrong)  # type: ignore[arg-type]
        assert wrong not in s
    with pytest.raises(ValueError, match="empty range"):
        s.add_range(5, 4)
    with pytest.raises(ValueError):
        IdSet([1, -2])
    assert len(s) == 0


def test_min_max_of_empty() -> None:
    with pytest.raises(ValueError, match="empty"):
        IdSet().min()
    with pytest.raises(ValueError, match="empty"):
        IdSet().max()


def test_equality_hash_and_repr() -> None:
    s = IdSet.from_ranges([(1, 3), (7, 7)])
    assert s == IdSet([1, 2, 3, 7])
    assert s != IdSet([1, 2, 3])
    assert s != {1, 2, 3, 7}  # not a set
    assert eval(repr(s)) == s  # our own repr
    with pytest.raises(TypeError):
        hash(s)
    big = IdSet(range(0, 100, 2))
    assert "50 ids in 50 ranges" in repr(big)


def test_encoding_is_pinned() -> None:
    assert IdSet().encode() == b"\x00"
    assert IdSet([5]).encode() == b"\x01\x05\x00"
    # ranges (0, 0), (2, 129): gap 0 span 0; gap 2 - (0 + 2) = 0, span 127
    assert IdSet.from_ranges([(0, 0), (2, 129)]).encode() == b"\x02\x00\x00\x00\x7f"
    # 300 = 0b10_0101100 -> ac 02
    assert IdSet([300]).encode() == b"\x01\xac\x02\x00"
    assert IdSet([MAX_ID]).encode() == b"\x01" + b"\xff" * 8 + b"\x7f" + b"\x00"


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"", "truncated: no range count"),
        (b"\x01", "truncated"),
        (b"\x01\x05", "1 ranges announced, only 1 bytes follow"),
        (b"\x02\x85\x01\x00\x00", "truncated: missing range 1 length"),
        (b"\x01\x85", "truncated"),
        (b"\x03\x00\x00", "3 ranges announced"),
        (b"\x01\x85\x00\x00", "non-minimal"),
        (b"\x01" + b"\xff" * 9 + b"\x01\x00", "longer than 63 bits"),
        (b"\x02\x00\x00" + b"\xff" * 8 + b"\x7f\x00", "above the maximum id"),
        (b"\x01\x05\x00\x00", "1 trailing bytes"),
    ],
)
def test_decode_names_the_problem(data: bytes, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        IdSet.decode(data)


def test_decode_refuses_non_bytes() -> None:
    with pytest.raises(ValueError, match="must be bytes"):
        IdSet.decode("\x00")  # type: ignore[arg-type]


@settings(max_examples=300)
@given(st.lists(st.tuples(ids, spans).map(lambda t: _range(*t)), max_size=12))
def test_from_ascending_of_a_list_finds_the_same_ranges_as_the_loop(
    ranges: list[tuple[int, int]],
) -> None:
    """A list takes the fast path (C-speed checks, then halving until each piece is one
    range): the same set, canonical, as the element-by-element loop over a generator."""
    model = sorted(_model(ranges))
    fast = IdSet.from_ascending(model)
    assert fast == IdSet.from_ascending(i for i in model) == IdSet(model)
    assert len(fast) == len(model)
    _assert_canonical(fast)


@pytest.mark.parametrize(
    "bad", [[1, 1], [2, 1], [0, 5, 3], [-1, 0], [0, MAX_ID + 1], [1, 2.0], [True, 2]]
)
def test_from_ascending_of_a_bad_list_raises_as_the_loop_does(bad: list[object]) -> None:
    with pytest.raises((ValueError, TypeError)) as fast:
        IdSet.from_ascending(bad)  # type: ignore[arg-type]
    with pytest.raises(fast.type):
        IdSet.from_ascending(iter(bad))  # type: ignore[arg-type]


def test_from_ascending_of_a_million_positions_in_two_ranges() -> None:
    positions = [*range(10_001, 600_000), *range(600_001, 1_010_001)]
    ids = IdSet.from_ascending(positions)
    assert ids.ranges() == [(10_001, 599_999), (600_001, 1_010_000)]
    assert len(ids) == len(positions)
