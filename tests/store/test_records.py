"""The store's record format and recovery, sans-I/O: bytes in, records and state out."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.store.record_decode import decode_payload
from broker.store.records import (
    HEADER,
    RECORD_HEADER,
    BadRecord,
    BindingRecord,
    Deleted,
    EnqueueRecord,
    ExchangeBindingRecord,
    ExchangeRecord,
    FormatError,
    Kind,
    MessageRecord,
    QueueEntryEvent,
    QueueRecord,
    encode_binding,
    encode_deleted,
    encode_dequeue,
    encode_enqueue,
    encode_exchange,
    encode_exchange_binding,
    encode_message,
    encode_message_with_enqueue,
    encode_queue,
    encode_queue_entry,
    iter_records,
    read_header,
    segment_header,
)
from broker.store.recovery import CorruptStore, Recovery

Args = dict[str, Any]

names = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=40).filter(
    lambda s: len(s.encode()) <= 255
)
ids = st.integers(1, 2**64 - 1)
arguments = st.dictionaries(
    st.text(min_size=1, max_size=10), st.one_of(st.integers(-(2**31), 2**31 - 1), st.text())
)


def decoded(raw: bytes) -> object:
    items = list(iter_records(segment_header(1, 1) + raw))
    assert len(items) == 1, items
    item = items[0]
    assert not isinstance(item, BadRecord)
    offset, size, kind, payload = item
    assert (offset, size) == (HEADER.size, len(raw))
    return decode_payload(kind, payload)


@settings(deadline=None)  # the machine may be loaded: no per-example deadline
@given(ids, names, names, st.booleans(), st.booleans(), arguments)
def test_exchange_round_trip(
    i: int, name: str, type_: str, ad: bool, internal: bool, args: Args
) -> None:
    record = ExchangeRecord(i, name, type_, ad, internal, args)
    assert decoded(encode_exchange(record)) == record


@settings(deadline=None)  # the machine may be loaded: no per-example deadline
@given(ids, names, st.booleans(), arguments, st.uuids().map(lambda u: u.hex) | st.just(""))
def test_queue_round_trip(i: int, name: str, ad: bool, args: Args, uuid: str) -> None:
    record = QueueRecord(i, name, ad, args, uuid)
    assert decoded(encode_queue(record)) == record


def test_a_queue_record_without_a_uuid_still_reads() -> None:
    """Stores written before queues had a uuid: flag 4 clear, the name after the flags."""
    record = QueueRecord(3, "old", True, {"x-max-length": 5})
    assert decoded(encode_queue(record)) == record  # uuid ""
    with pytest.raises(ValueError, match="16 bytes"):
        encode_queue(QueueRecord(3, "q", False, {}, "abcd"))


@settings(deadline=None)  # the machine may be loaded: no per-example deadline
@given(ids, names, ids, names, arguments)
def test_binding_round_trip(i: int, ex: str, q: int, key: str, args: Args) -> None:
    record = BindingRecord(i, ex, q, key, args)
    assert decoded(encode_binding(record)) == record


@settings(deadline=None)  # the machine may be loaded: no per-example deadline
@given(ids, names, names, st.binary(max_size=64), st.binary(max_size=2048))
def test_message_round_trip(i: int, ex: str, key: str, props: bytes, body: bytes) -> None:
    assert decoded(encode_message(i, ex, key, props, body)) == MessageRecord(
        i, ex, key, props, body
    )


@settings(deadline=None)  # the machine may be loaded: no per-example deadline
@given(ids, ids, ids, st.integers(0, 2**64 - 1))
def test_enqueue_and_events_round_trip(q: int, m: int, pos: int, expires: int) -> None:
    assert decoded(encode_enqueue(q, m, pos, expires)) == EnqueueRecord(q, m, pos, expires)
    for kind in (Kind.DEQUEUE, Kind.DELIVERED):
        assert decoded(encode_queue_entry(kind, q, m)) == QueueEntryEvent(kind, q, m)
    assert encode_dequeue(q, m) == encode_queue_entry(Kind.DEQUEUE, q, m)  # the ack path's
    for kind in (Kind.EXCHANGE_DELETED, Kind.QUEUE_DELETED, Kind.UNBOUND):
        assert decoded(encode_deleted(kind, q)) == Deleted(kind, q)


def test_header_and_wrong_magic() -> None:
    header = read_header(segment_header(7, 42))
    assert (header.number, header.next_id) == (7, 42)
    with pytest.raises(FormatError, match="not a segment"):
        read_header(b"X" * HEADER.size)
    with pytest.raises(ValueError, match="longer than 255"):
        encode_queue(QueueRecord(1, "q" * 256, False, {}))


def some_records(n: int) -> list[bytes]:
    return [encode_message(i, "", "q", b"", b"body %d" % i) for i in range(1, n + 1)]


@settings(deadline=None)  # the machine may be loaded: no per-example deadline
@given(st.integers(1, 20), st.data())
def test_a_cut_anywhere_in_the_last_record_is_a_torn_tail(n: int, data: st.DataObject) -> None:
    records = some_records(n)
    whole = segment_header(1, 1) + b"".join(records)
    last_start = len(whole) - len(records[-1])
    cut = data.draw(st.integers(last_start + 1, len(whole) - 1))
    items = list(iter_records(whole[:cut]))
    assert len(items) == n  # n - 1 good ones, then the bad one
    bad = items[-1]
    assert isinstance(bad, BadRecord) and bad.offset == last_start and not bad.followed


@given(st.integers(2, 20), st.data())
@settings(max_examples=200, deadline=None)
def test_any_flipped_byte_is_found(n: int, data: st.DataObject) -> None:
    """A flipped byte never yields a wrong record: reading stops at (or before) the damaged
    record, and damage before the last record is seen as followed by a valid one."""
    records = some_records(n)
    whole = bytearray(segment_header(1, 1) + b"".join(records))
    index = data.draw(st.integers(HEADER.size, len(whole) - 1))
    whole[index] ^= data.draw(st.integers(1, 255))
    starts = [HEADER.size]
    for record in records:
        starts.append(starts[-1] + len(record))
    damaged = max(i for i, start in enumerate(starts[:-1]) if start <= index)
    items = list(iter_records(bytes(whole)))
    good = [item for item in items if not isinstance(item, BadRecord)]
    assert [bytes(p) for *_, p in good] == [r[RECORD_HEADER.size :] for r in records[:damaged]]
    bad = items[-1]
    assert isinstance(bad, BadRecord) and bad.offset == starts[damaged]
    in_payload = index >= starts[damaged] + 4  # the length field intact
    if damaged < n - 1 and in_payload:
        assert bad.followed


# -- recovery --------------------------------------------------------------------------------
def segment(number: int, *records: bytes, next_id: int = 1) -> bytes:
    return segment_header(number, next_id) + b"".join(records)


def test_recovery_folds_creations_and_deletions() -> None:
    recovery = Recovery()
    recovery.add_segment(
        1,
        segment(
            1,
            encode_exchange(ExchangeRecord(1, "x", "topic", False, False, {})),
            encode_queue(QueueRecord(2, "q", False, {"x-message-ttl": 5000})),
            encode_binding(BindingRecord(3, "x", 2, "a.#", {})),
            encode_queue(QueueRecord(4, "gone", False, {})),
            encode_message(5, "x", "a.b", b"", b"m5"),
            encode_enqueue(2, 5, 1, 0),
            encode_enqueue(4, 5, 1, 0),
            encode_message(6, "", "q", b"", b"m6"),
            encode_enqueue(2, 6, 2, 123),
        ),
        last=False,
    )
    recovery.add_segment(
        3,
        segment(
            3,
            encode_queue_entry(Kind.DELIVERED, 2, 5),
            encode_deleted(Kind.QUEUE_DELETED, 4),
            encode_message(7, "", "q", b"", b"m7"),
            encode_enqueue(2, 7, 3, 0),
            encode_queue_entry(Kind.DEQUEUE, 2, 6),
            next_id=9,
        ),
        last=True,
    )
    state = recovery.state()
    assert [e.name for e in state.exchanges] == ["x"]
    assert [q.record.name for q in state.queues] == ["q"]
    assert [(b.exchange, b.routing_key) for b in state.bindings] == [("x", "a.#")]
    (queue,) = state.queues
    assert [(m.message_id, m.position, m.delivered) for m in queue.messages] == [
        (5, 1, True),
        (7, 3, False),
    ]
    assert sorted(state.messages) == [5, 7]
    assert state.next_id == 9
    assert state.torn_tail is None


@settings(deadline=None)  # the machine may be loaded: no per-example deadline
@given(st.randoms(use_true_random=False))
def test_recovery_does_not_depend_on_the_order_of_live_records(rnd: random.Random) -> None:
    """Compaction copies live records to the tail in any order: same state."""
    live = [
        encode_exchange(ExchangeRecord(1, "x", "direct", False, False, {})),
        encode_queue(QueueRecord(2, "q", False, {})),
        encode_binding(BindingRecord(3, "x", 2, "k", {})),
        encode_message(4, "x", "k", b"", b"four"),
        encode_enqueue(2, 4, 10, 0),
        encode_message(5, "x", "k", b"", b"five"),
        encode_enqueue(2, 5, 11, 0),
    ]
    reference = Recovery()
    reference.add_segment(1, segment(1, *live), last=True)
    expected = reference.state()
    shuffled = list(live)
    rnd.shuffle(shuffled)
    recovery = Recovery()
    recovery.add_segment(1, segment(1, *shuffled), last=True)
    state = recovery.state()
    assert [m.message_id for m in state.queues[0].messages] == [4, 5]
    assert state.exchanges == expected.exchanges and state.bindings == expected.bindings


def test_torn_tail_only_in_the_last_segment() -> None:
    good = encode_message(1, "", "q", b"", b"x")
    torn = segment(1, good, encode_enqueue(1, 1, 1, 0))[:-3]
    recovery = Recovery()
    recovery.add_segment(1, torn, last=True)
    state = recovery.state()
    assert state.torn_tail is not None and state.torn_tail.offset == HEADER.size + len(good)
    with pytest.raises(CorruptStore, match=r"00000000000000000001\.seg"):
        Recovery().add_segment(1, torn, last=False)


def test_corruption_inside_the_last_segment_stops_recovery() -> None:
    first = encode_message(1, "", "q", b"", b"x" * 50)
    data = bytearray(segment(1, first, encode_message(2, "", "q", b"", b"y")))
    data[HEADER.size + RECORD_HEADER.size + 20] ^= 0xFF  # inside the first payload
    with pytest.raises(CorruptStore, match="checksum mismatch") as caught:
        Recovery().add_segment(1, bytes(data), last=True)
    assert caught.value.offset == HEADER.size


def test_segment_numbers_must_rise_and_match() -> None:
    recovery = Recovery()
    recovery.add_segment(2, segment(2), last=False)
    with pytest.raises(CorruptStore, match="not above"):
        recovery.add_segment(2, segment(2), last=True)
    with pytest.raises(CorruptStore, match="header says segment 5"):
        Recovery().add_segment(4, segment(5), last=True)


def test_an_enqueue_without_its_content_is_corruption() -> None:
    recovery = Recovery()
    recovery.add_segment(
        1,
        segment(1, encode_queue(QueueRecord(1, "q", False, {})), encode_enqueue(1, 9, 1, 0)),
        last=True,
    )
    with pytest.raises(CorruptStore, match="content is missing"):
        recovery.state()


@settings(deadline=None)  # the machine may be loaded: no per-example deadline
@given(ids, names, names, st.binary(max_size=64), st.binary(max_size=2048), ids, ids)
def test_message_with_enqueue_is_the_two_records(
    i: int, ex: str, key: str, props: bytes, body: bytes, q: int, pos: int
) -> None:
    joined = encode_message_with_enqueue(i, ex, key, props, body, q, pos, 7)
    assert joined == encode_message(i, ex, key, props, body) + encode_enqueue(q, i, pos, 7)


@settings(deadline=None)
@given(ids, names, names, names, arguments)
def test_exchange_binding_round_trip(i: int, src: str, dst: str, key: str, args: Args) -> None:
    record = ExchangeBindingRecord(i, src, dst, key, args)
    assert decoded(encode_exchange_binding(record)) == record
