"""Recovery reads the segments through a map of each file (broker/store/journal.py, _map),
not a read() into memory (issue 12, item 2): the same state as from the bytes, for both
walkers, torn or damaged anywhere; no segment stays mapped once recovery is over (a torn
tail is cut, a damaged segment moved aside, after the walk); an empty newest segment (a
crash before its header was written) is a torn tail as before."""

from __future__ import annotations

import mmap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.store import recovery
from broker.store.journal import Journal
from broker.store.records import (
    Kind,
    QueueRecord,
    encode_message_with_enqueue,
    encode_queue,
    encode_queue_entry,
    segment_header,
)
from broker.store.recovery import CorruptStore, Recovery, native_walk
from broker.store.segment_files import list_segments, map_segment, segment_path

WALKERS = [False] if native_walk is None else [False, True]


def _store(directory: Path, messages: int, dequeued: int, per_segment: int) -> list[Path]:
    """A store of one queue: ``messages`` messages, ``per_segment`` a segment, the first
    ``dequeued`` dequeued in the last one."""
    store = directory / "store"
    store.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    data = bytearray(segment_header(1, 1)) + encode_queue(QueueRecord(1, "q", False, {}))
    number = 1
    for i in range(messages):
        if i and i % per_segment == 0:
            paths.append(segment_path(store, number))
            paths[-1].write_bytes(data)
            number += 1
            data = bytearray(segment_header(number, 2 + i))
        body = b"%06d" % i * (1 + i % 5)
        data += encode_message_with_enqueue(2 + i, "", "q", b"\x10\x00\x02", body, 1, i + 1, 0)
    for i in range(dequeued):
        data += encode_queue_entry(Kind.DEQUEUE, 1, 2 + i)
    paths.append(segment_path(store, number))
    paths[-1].write_bytes(data)
    return paths


def _state(numbers: list[int], datas: list[bytes | mmap.mmap], native: bool) -> object:
    recovery = Recovery(native=native)
    try:
        for i, (number, data) in enumerate(zip(numbers, datas, strict=True)):
            recovery.add_segment(number, data, last=i == len(numbers) - 1)
    except CorruptStore as exc:
        return ("corrupt", exc.segment, exc.offset, exc.reason)
    state = recovery.state()
    return (
        [(q.record, q.messages) for q in state.queues],
        state.messages,
        state.next_id,
        state.torn_tail,
        state.record_count,
        state.ledger.segments,
    )


def _mapped(path: Path) -> bool:
    """Is ``path`` mapped into this process (Linux: /proc/self/maps)?"""
    return str(path) in Path("/proc/self/maps").read_text()


@pytest.mark.parametrize("native", WALKERS)
@settings(
    deadline=None, max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    messages=st.integers(1, 40),
    dequeued=st.integers(0, 40),
    cut=st.integers(0, 2000),
    flip=st.one_of(st.none(), st.integers(0, 10_000)),
)
def test_a_mapped_segment_recovers_what_its_bytes_do(
    tmp_path_factory: pytest.TempPathFactory,
    native: bool,
    messages: int,
    dequeued: int,
    cut: int,
    flip: int | None,
) -> None:
    directory = tmp_path_factory.mktemp("store")
    paths = _store(directory, messages, min(dequeued, messages), per_segment=7)
    last = paths[-1]
    data = bytearray(last.read_bytes())
    if flip is not None:  # damage anywhere in the newest segment
        data[flip % len(data)] ^= 0x41
    last.write_bytes(bytes(data[: max(0, len(data) - cut)]))
    numbers = list_segments(directory / "store")
    from_bytes = _state(
        numbers, [segment_path(directory / "store", n).read_bytes() for n in numbers], native
    )
    maps = [map_segment(segment_path(directory / "store", n)) for n in numbers]
    try:
        assert _state(numbers, maps, native) == from_bytes
    finally:
        for m in maps:
            if isinstance(m, mmap.mmap):
                m.close()


@pytest.fixture(params=WALKERS, ids=lambda native: "native" if native else "python")
def walker(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Journal.recover with each walker (the Python one as without a C compiler)."""
    if not request.param:
        monkeypatch.setattr(recovery, "native_walk", None)
    assert Recovery().native is bool(request.param)
    return bool(request.param)


def test_no_segment_stays_mapped_after_recovery(tmp_path: Path, walker: bool) -> None:
    paths = _store(tmp_path, 50, 10, per_segment=10)
    journal = Journal(tmp_path)
    state = journal.recover()
    assert state.message_count == 40
    assert not any(_mapped(p) for p in paths)


def test_a_torn_tail_is_cut_once_its_map_is_closed(tmp_path: Path, walker: bool) -> None:
    paths = _store(tmp_path, 30, 0, per_segment=10)
    whole = paths[-1].stat().st_size
    with open(paths[-1], "ab") as file:
        file.write(encode_message_with_enqueue(99, "", "q", b"", b"half", 1, 99, 0)[:20])
    state = Journal(tmp_path).recover()
    assert state.torn_tail is not None and state.message_count == 30
    assert paths[-1].stat().st_size == whole
    assert not _mapped(paths[-1])


def test_an_empty_newest_segment_is_a_torn_tail(tmp_path: Path, walker: bool) -> None:
    """A crash right after the segment's file was created, before its header was written:
    a file of 0 bytes, which cannot be mapped."""
    paths = _store(tmp_path, 20, 0, per_segment=10)
    empty = segment_path(tmp_path / "store", 99)
    empty.write_bytes(b"")
    state = Journal(tmp_path).recover()
    assert state.torn_tail is not None and state.torn_tail.segment == 99
    assert state.message_count == 20
    assert not empty.exists()
    assert not any(_mapped(p) for p in paths)


@pytest.mark.parametrize("torn", [False, True])
def test_files_ahead_of_the_writer_are_removed_behind_a_torn_tail(
    tmp_path: Path, walker: bool, torn: bool
) -> None:
    """The loop creates a segment's file before the writer reaches it (broker/store/journal.py,
    _switch_file): a crash may leave newer files shorter than a header behind the segment
    being written. They are removed; the torn tail, if any, is cut in that segment."""
    paths = _store(tmp_path, 20, 0, per_segment=10)
    whole = paths[-1].read_bytes()
    if torn:
        paths[-1].write_bytes(whole + encode_queue_entry(Kind.DEQUEUE, 1, 2)[:-3])
    store = tmp_path / "store"
    ahead = [segment_path(store, 3), segment_path(store, 4), segment_path(store, 5)]
    ahead[0].write_bytes(b"QPIDSEG1\x00")  # its header was being written
    ahead[1].write_bytes(b"")
    ahead[2].write_bytes(b"")
    state = Journal(tmp_path).recover()
    assert state.message_count == 20 and state.torn_tail is not None
    assert not any(p.exists() for p in ahead)
    assert paths[-1].read_bytes() == whole
    assert not any(_mapped(p) for p in paths)


def test_an_empty_segment_before_one_with_records_is_damage(tmp_path: Path, walker: bool) -> None:
    paths = _store(tmp_path, 20, 0, per_segment=10)
    paths[0].write_bytes(b"")
    with pytest.raises(CorruptStore, match=paths[0].name):
        Journal(tmp_path).recover()
    assert paths[0].exists()


def test_damage_is_moved_aside_once_its_map_is_closed(tmp_path: Path, walker: bool) -> None:
    paths = _store(tmp_path, 40, 0, per_segment=10)
    data = bytearray(paths[1].read_bytes())
    data[200] ^= 0x55
    paths[1].write_bytes(bytes(data))
    with pytest.raises(CorruptStore):
        Journal(tmp_path).recover()
    assert not any(_mapped(p) for p in paths)
    state = Journal(tmp_path).recover(cut_damaged=True)
    assert 10 <= state.message_count < 20
    assert not any(_mapped(p) for p in paths)
    assert list((tmp_path / "store.damaged.0001").iterdir())
