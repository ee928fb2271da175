"""The native segment walker (broker/store/_walk.c) recovers what the pure-Python one does
(issue 12): same state, same torn tail, same damage report, for any records cut or damaged
anywhere. Sans-I/O: bytes in, recovered state out."""

from __future__ import annotations

import itertools
import shutil
import sysconfig
from pathlib import Path
from typing import Any

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.core.vhost import VirtualHost
from broker.store.journal import Journal
from broker.store.message_store import MessageStore
from broker.store.records import (
    HEADER,
    RECORD_HEADER,
    BindingRecord,
    ExchangeRecord,
    Kind,
    QueueRecord,
    encode_binding,
    encode_deleted,
    encode_enqueue,
    encode_exchange,
    encode_message,
    encode_message_with_enqueue,
    encode_queue,
    encode_queue_entry,
    encode_tx,
    segment_header,
)
from broker.store.recovery import WALKER, CorruptStore, Recovery

try:
    from broker.store import _walk as native_walk
except ImportError:  # the first test says so
    native_walk = None  # type: ignore[assignment]


def can_compile() -> bool:
    """A C compiler and Python's headers: what setup.py needs to build the walker."""
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
    return shutil.which(compiler) is not None and headers.exists()


def test_the_native_walker_is_built_where_it_can_be() -> None:
    """`pip install -e .` compiles it (setup.py) where a C compiler and Python's headers
    are; elsewhere the install goes on and recovery uses the Python walker (about 2x
    slower: docs/benchmarks.md)."""
    if not can_compile():
        assert native_walk is None and WALKER == "python"
        assert not Recovery().native
        return
    assert native_walk is not None, "broker/store/_walk.c is not built: pip install -e ."
    assert WALKER == "native"
    assert Recovery().native and not Recovery(native=False).native


@pytest.mark.skipif(
    native_walk is None,
    reason="no C walker on a machine without a compiler (the test above checks that is so)",
)
@settings(deadline=None)
@given(st.binary(max_size=3000), st.integers(0, 2**32 - 1))
def test_crc32c_is_the_packages(data: bytes, start: int) -> None:
    assert native_walk is not None
    assert native_walk.crc32c(data, start) == crc32c.crc32c(data, start)
    assert native_walk.crc32c(data) == crc32c.crc32c(data)


QUEUES = (1, 2)
#: Content header properties: none, delivery mode 2, a TTL, headers (decoded lazily).
PROPERTIES = [
    b"\x00\x00",
    b"\x10\x00\x02",
    b"\x11\x00\x02\x03100",
    b"\x30\x00\x00\x00\x00\x04\x01at\x01\x02",
]
names = st.sampled_from(["", "q", "amq.direct", "ex", "k.ey", "é"])


@st.composite
def records(draw: st.DrawFn) -> list[bytes]:
    """A log: two queues and an exchange, then messages, enqueues, dequeues, deliveries,
    deletions and transactions in any order (ids from 10 up)."""
    out = [
        encode_queue(QueueRecord(1, "q1", False, {}, "ab" * 16)),
        encode_queue(QueueRecord(2, "q2", False, {"x-max-length": 5})),
        encode_exchange(ExchangeRecord(3, "x", "direct", False, False, {})),
        encode_binding(BindingRecord(4, "x", 1, "k", {})),
    ]
    next_id = 10
    enqueued: list[tuple[int, int]] = []
    for _ in range(draw(st.integers(0, 40))):
        choice = draw(st.integers(0, 9))
        if choice <= 3 or not enqueued:
            body = draw(st.binary(max_size=300))
            props = draw(st.sampled_from(PROPERTIES))
            queue = draw(st.sampled_from(QUEUES))
            exchange, key = draw(names), draw(names)
            if choice == 0:
                out.append(encode_message(next_id, exchange, key, props, body))
            else:
                position = draw(st.integers(0, 2**63))
                expires = draw(st.sampled_from([0, 1, 2**62]))
                out.append(
                    encode_message_with_enqueue(
                        next_id, exchange, key, props, body, queue, position, expires
                    )
                )
                enqueued.append((queue, next_id))
            next_id += 1
        elif choice == 4:
            queue, message = draw(st.sampled_from(enqueued))
            other = 3 - queue
            out.append(encode_enqueue(other, message, draw(st.integers(0, 99)), 0))
            enqueued.append((other, message))
        elif choice == 5:
            out.append(encode_queue_entry(Kind.DEQUEUE, *draw(st.sampled_from(enqueued))))
        elif choice == 6:
            out.append(encode_queue_entry(Kind.DELIVERED, *draw(st.sampled_from(enqueued))))
        elif choice == 7:
            inner = encode_message_with_enqueue(
                next_id, "", "q1", b"\x00\x00", b"tx", 1, next_id, 0
            )
            inner += encode_queue_entry(Kind.DEQUEUE, *draw(st.sampled_from(enqueued)))
            out.append(encode_tx(inner))
            enqueued.append((1, next_id))
            next_id += 1
        elif choice == 8:
            out.append(encode_deleted(Kind.UNBOUND, 4))
        else:
            out.append(encode_queue_entry(Kind.DEQUEUE, 99, draw(st.integers(0, 2**64 - 1))))
    return out


def recover(segments: list[bytes], native: bool) -> Any:
    """The recovered state as plain values, or the damage reported."""
    recovery = Recovery(native=native)
    try:
        for i, data in enumerate(segments):
            recovery.add_segment(i + 1, data, last=i == len(segments) - 1)
        state = recovery.state()
    except CorruptStore as exc:
        return ("corrupt", exc.segment, exc.offset, exc.reason)
    ledger = state.ledger
    return (
        state.exchanges,
        [(q.record, q.messages) for q in state.queues],
        state.bindings,
        state.exchange_bindings,
        state.messages,
        state.next_id,
        state.torn_tail,
        state.record_count,
        state.segments,
        {n: (u.records, u.live) for n, u in ledger.segments.items()},
        ledger._config,
        {message_id: ledger._messages[message_id] for message_id in ledger._messages},
        {key: ledger._enqueues.get(key) for key in ledger._enqueues},
        ledger.delivered,
    )


def split(log: list[bytes], cuts: list[int]) -> list[bytes]:
    bounds = sorted({min(c, len(log)) for c in cuts} | {0, len(log)})
    return [
        segment_header(i + 1, 5) + b"".join(log[a:b])
        for i, (a, b) in enumerate(itertools.pairwise(bounds))
    ] or [segment_header(1, 5)]


@settings(deadline=None, max_examples=300)
@given(records(), st.lists(st.integers(0, 50), max_size=3), st.data())
def test_native_and_python_walkers_recover_the_same(
    log: list[bytes], cuts: list[int], data: st.DataObject
) -> None:
    """Whole, cut short (a crash at any byte of the last segment), or with a byte flipped
    anywhere: the same state, torn tail or damage report."""
    segments = split(log, cuts)
    damage = data.draw(st.sampled_from(["none", "cut", "flip"]))
    if damage != "none":
        which = data.draw(st.integers(0, len(segments) - 1))
        target = bytearray(segments[which])
        at = data.draw(st.integers(0, max(0, len(target) - 1)))
        if damage == "cut":
            which = len(segments) - 1
            target = bytearray(segments[which][: HEADER.size + at])
        elif target:
            target[at] ^= data.draw(st.integers(1, 255))
        segments[which] = bytes(target)
    assert recover(segments, native=True) == recover(segments, native=False)


@settings(deadline=None, max_examples=200)
@given(records(), st.lists(st.integers(0, 50), max_size=3), st.booleans())
def test_each_recovered_queue_is_in_position_order(
    log: list[bytes], cuts: list[int], native: bool
) -> None:
    """Only the queues whose enqueues were read out of position order are sorted (the
    others are already): every queue comes back in position order all the same, ties in the
    order read, as one stable sort of each would give."""
    recovery = Recovery(native=native)
    for i, data in enumerate(split(log, cuts)):
        recovery.add_segment(i + 1, data, last=False)
    try:
        state = recovery.state()
    except CorruptStore:
        return  # an enqueue whose content is missing: not this test's case
    for queue in state.queues:
        in_order = sorted(queue.messages, key=lambda m: m.position)
        assert queue.messages == in_order


def test_a_record_the_native_walker_cannot_decode_is_damage() -> None:
    """A checksum-valid record too short for its kind (written by no broker) is damage
    reported where it is, as the Python walker reports it."""
    short = b"\x00" * 8  # an ENQUEUE payload needs 32 bytes
    record = RECORD_HEADER.pack(8, crc32c.crc32c(short, crc32c.crc32c(b"\x08")), 8) + short
    data = segment_header(1, 1) + encode_queue(QueueRecord(1, "q", False, {})) + record
    for native in (True, False):
        with pytest.raises(CorruptStore) as caught:
            Recovery(native=native).add_segment(1, data, last=True)
        assert caught.value.offset == len(data) - len(record)


def slots(obj: Any) -> dict[str, Any]:
    return {name: getattr(obj, name, "<unset>") for name in type(obj).__slots__}


@settings(deadline=None, max_examples=150)
@given(records(), st.booleans())
def test_native_and_python_entries_are_the_same_objects(log: list[bytes], crashed: bool) -> None:
    """The native ``entries`` (copies of the first Message of each distinct properties)
    makes what Message() and Entry() make: every slot equal, a message on two queues one
    object, no dict shared between two messages."""
    recovery = Recovery()
    recovery.add_segment(1, segment_header(1, 5) + b"".join(log), last=True)
    try:
        state = recovery.state()
    except CorruptStore:
        return  # an enqueue of a message deleted with its queue's record: not this test's
    made = []
    contents = dict(state.messages)
    lists = [list(q.messages) for q in state.queues]
    for native in (True, False):
        vhost = VirtualHost(clock=lambda: 100.0)
        state.messages = dict(contents)
        for queue, recovered in zip(state.queues, lists, strict=True):
            queue.messages = list(recovered)
        MessageStore(Journal(Path("/nonexistent")), vhost).recover_into(
            state, crashed=crashed, native=native
        )
        made.append({name: q.snapshot() for name, q in sorted(vhost.queues.items())})
        # The contents it re-created messages of were taken out as it went (nothing else
        # keeps them: each is freed then), the others left.
        placed = {e.message.store_id for q in vhost.queues.values() for e in q.snapshot()}
        assert state.messages == {i: c for i, c in contents.items() if i not in placed}
        assert all(not q.messages for q in state.queues)  # every queue is re-created here
    native_queues, python_queues = made
    assert native_queues.keys() == python_queues.keys()
    for name, entries in native_queues.items():
        reference = python_queues[name]
        assert len(entries) == len(reference)
        for entry, expected in zip(entries, reference, strict=True):
            got, want = slots(entry), slots(expected)
            got_at, want_at = got.pop("expires_at"), want.pop("expires_at")
            assert (got_at is None) == (want_at is None)
            assert got_at is None or abs(got_at - want_at) < 5  # wall clock read twice
            got_message, want_message = got.pop("message"), want.pop("message")
            assert got == want
            assert slots(got_message) == slots(want_message)
    ids: dict[int, list[Any]] = {}
    for entries in native_queues.values():
        for entry in entries:
            ids.setdefault(entry.message.store_id, []).append(entry.message)
    for same in ids.values():
        assert all(message is same[0] for message in same)
    # headers are decoded from the property bytes at each read (no dict is kept that two
    # messages could share): a mutated copy is never seen again
    for same in ids.values():
        same[0].headers["x-touched"] = 1
        assert "x-touched" not in same[0].headers
