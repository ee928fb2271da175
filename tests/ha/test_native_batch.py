"""The native decoder of a replication batch's common events (broker/ha/_batch.c) gives what
the Python decoder gives (broker/ha/wire_batch.py), for any batch (hypothesis): the same
events, the same pieces shared between them, and None, never another answer or a crash,
for whatever it leaves to Python (transactions, anything malformed), which then names the
problem. Sans-I/O: bytes in, events out."""

from __future__ import annotations

from collections import deque
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.core.message import Entry, Message, TxMark
from broker.ha import wire_batch, wire_writers
from broker.ha.id_set import MAX_ID, IdSet
from broker.ha.wire_batch import (
    Dequeue,
    Enqueue,
    QueueCaughtUp,
    StreamEvent,
    Tx,
    TxBase,
    Watermark,
    decode_batch,
    encode_batch,
)
from broker.ha.wire_writers import EnqueuePacker

from ..store.test_native_walk import can_compile

try:
    from broker.ha import _batch as native_batch
except ImportError:  # the first test says so
    native_batch = None  # type: ignore[assignment]


def test_the_native_decoder_is_built_where_it_can_be() -> None:
    """`pip install -e .` compiles it (setup.py) where a C compiler and Python's headers
    are; elsewhere every batch is decoded in Python."""
    if not can_compile():
        assert native_batch is None and vars(wire_batch)["native_batch"] is None
        return
    assert native_batch is not None, "broker/ha/_batch.c is not built: pip install -e ."
    assert vars(wire_batch)["native_batch"] is native_batch


needs_native = pytest.mark.skipif(
    native_batch is None,
    reason="no native decoder on a machine without a compiler (the test above checks that)",
)

# A few routes and property blocks, so that neighbours share them (and some do not).
routes = st.sampled_from([("", "q"), ("", "q2"), ("amq.direct", "q"), ("ex\u00e9", "k\u4e2d")])
blocks = st.sampled_from([b"", b"\x10\x00\x02", b"\x90\x00\x0atext/plain\x02", b"\x10\x00\x01"])
ids = st.one_of(st.integers(0, 1000), st.just(MAX_ID))
enqueues = st.builds(
    lambda i, route, block, body: Enqueue(i, route[0], route[1], block, body),
    ids,
    routes,
    blocks,
    st.binary(max_size=300),
)
id_sets = st.lists(st.tuples(ids, st.integers(0, 50)), max_size=4).map(
    lambda spans: IdSet.from_ranges([(a, min(a + n, MAX_ID)) for a, n in spans])
)
events = st.one_of(
    enqueues,
    enqueues,
    id_sets.map(Dequeue),
    st.just(QueueCaughtUp()),
    ids.map(Watermark),
)
batches = st.lists(events, max_size=30)


def _native(data: bytes) -> list[StreamEvent] | None:
    assert native_batch is not None
    return native_batch.decode_simple(
        data,
        Enqueue,
        wire_batch._ENQUEUE_SLOTS,
        Dequeue,
        IdSet.decode,
        QueueCaughtUp,
        Watermark,
    )


def _sharing(events: list[StreamEvent]) -> list[tuple[bool, bool, bool]]:
    """For each pair of neighbouring enqueues: do they share exchange, routing key and
    properties objects?"""
    enqueued = [e for e in events if isinstance(e, Enqueue)]
    return [
        (a.exchange is b.exchange, a.routing_key is b.routing_key, a.properties is b.properties)
        for a, b in pairwise(enqueued)
    ]


@needs_native
@settings(max_examples=300)
@given(batches)
def test_native_decoding_gives_the_python_events(batch: list[StreamEvent]) -> None:
    data = encode_batch(batch)
    native = _native(data)
    python = wire_batch._decode_batch(data)
    assert native is not None
    assert native == python == batch
    assert _sharing(native) == _sharing(python)
    assert decode_batch(data) == batch


@needs_native
@settings(max_examples=200)
@given(batches.filter(bool), st.data())
def test_what_python_refuses_the_native_decoder_leaves_to_it(
    batch: list[StreamEvent], data: st.DataObject
) -> None:
    """Truncated or corrupted batches: the native answer is None or Python's events."""
    encoded = bytearray(encode_batch(batch))
    cut = data.draw(st.integers(1, len(encoded)))
    for _ in range(data.draw(st.integers(0, 3))):
        index = data.draw(st.integers(0, len(encoded) - 1))
        encoded[index] = data.draw(st.integers(0, 255))
    _check_left_or_same(bytes(encoded[:cut]))


@needs_native
@given(st.binary(max_size=200))
def test_random_bytes_give_none_or_the_python_events(data: bytes) -> None:
    _check_left_or_same(data)
    _check_left_or_same(b"\x01" + data)


def _check_left_or_same(candidate: bytes) -> None:
    """The native answer is None where Python refuses ``candidate``, else None or Python's
    events."""
    native = _native(candidate)
    try:
        python = wire_batch._decode_batch(candidate)
    except ValueError:
        assert native is None
        return
    assert native is None or native == python


@needs_native
def test_transactions_and_bad_batches_are_left_to_python() -> None:
    tx = encode_batch([TxBase(1), Tx(1, 1, 1), Enqueue(1, "", "q", b"", b"x")])
    assert _native(tx) is None
    assert decode_batch(tx) == wire_batch._decode_batch(tx)
    bad_utf8 = b"\x01\x01" + b"\x00" * 8 + b"\x01\x00" + b"\x00" * 8 + b"\xff"
    assert _native(bad_utf8) is None
    with pytest.raises(ValueError, match="not valid UTF-8"):
        decode_batch(bad_utf8)
    bad_ids = b"\x01\x02\x00\x00\x00\x02\x01\x05"
    assert _native(bad_ids) is None
    with pytest.raises(ValueError, match="dequeue: id set truncated"):
        decode_batch(bad_ids)
    assert _native(b"") is None and _native(b"\x02") is None
    with pytest.raises(TypeError):
        native_batch.decode_simple(b"\x01")  # type: ignore[call-arg]


@needs_native
@pytest.mark.parametrize(
    "data",
    [
        b"\x01\x01" + b"\x00" * 10,  # truncated header
        b"\x01\x01" + b"\x00" * 8 + b"\xc8\x00" + b"\x00" * 8,  # a route past the end
        b"\x01\x01" + b"\x00" * 8 + b"\x01\x00" + b"\x00" * 8,  # one byte of it past
        b"\x01\x01" + b"\x00" * 8 + b"\x00\x00" + b"\xff" * 4 + b"\x00" * 4,  # properties past
        b"\x01\x01" + b"\x00" * 8 + b"\x00\x00" + b"\x00" * 4 + b"\x00\x00\x00\x05abc",  # body
        b"\x01\x01" + b"\x80" + b"\x00" * 7 + b"\x00" * 10,  # id 2**63
        b"\x01\x06" + b"\x80" + b"\x00" * 7,  # watermark 2**63
        b"\x01\x06" + b"\x00" * 7,  # truncated watermark
        b"\x01\x02\x00\x00",  # truncated dequeue header
        b"\x01\x02\x00\x00\x00\x05\x00",  # truncated dequeue
        b"\x01\x02\x00\x00\x00\x02\x00\x00",  # trailing bytes in the ids
        b"\x01\x03\x09",  # an unknown event after a good one
    ],
)
def test_each_malformed_event_is_left_to_python(data: bytes) -> None:
    """None for each, and decode_batch's ValueError (Python's, naming it)."""
    assert _native(data) is None
    with pytest.raises(ValueError, match="replication batch: event"):
        decode_batch(data)


# -- packing a primary's plain messages (pack_enqueues) -------------------------------------

properties_blocks = st.sampled_from([b"\x00\x00", b"\x10\x00\x02", b"\x90\x00\x0atext/plain\x02"])


@st.composite
def backlogs(draw: st.DrawFn) -> list[Entry]:
    """Entries as a primary's backlog holds them: mostly plain messages on one route, some of
    a transaction, on another route, or with what the format cannot carry."""
    entries = []
    for n in range(draw(st.integers(0, 25))):
        route = draw(st.sampled_from([("", "q"), ("", "q"), ("", "q"), ("amq.direct", "q")]))
        message = Message(route[0], route[1], draw(properties_blocks), draw(st.binary(max_size=64)))
        odd = draw(st.sampled_from(["plain"] * 8 + ["tx", "position", "body"]))
        position: int = n + draw(st.integers(0, 3))
        if odd == "tx":
            message.tx = TxMark()
        elif odd == "position":
            position = draw(st.sampled_from([-1, 2**63]))
        elif odd == "body":
            message.body = bytearray(message.body)  # type: ignore[assignment]
        entries.append(Entry(message, position, None))
    return entries


def _packer(route: tuple[str, str] | None) -> EnqueuePacker:
    packer = EnqueuePacker()
    if route is not None:
        packer.pack(0, route[0], route[1], b"", b"")  # the route it packs with
    return packer


@needs_native
@settings(max_examples=300)
@given(
    backlogs(),
    st.sampled_from([None, ("", "q"), ("amq.direct", "q")]),
    st.integers(0, 2000),
    st.integers(0, 30),
    st.integers(0, 100),
)
def test_native_packing_packs_what_python_packs(
    entries: list[Entry], route: tuple[str, str] | None, budget: int, max_events: int, size: int
) -> None:
    answers = []
    for pack in (native_batch.pack_enqueues, wire_writers._pack_enqueues):
        packer = _packer(route)
        backlog = deque(entries)
        parts: list[bytes] = [b"\x01"]
        ids: list[int] = []
        new_size = pack(packer, backlog, parts, ids, size, budget, max_events)
        answers.append(
            (
                new_size,
                parts,
                [id(p) for p in parts[1:]][1::3] + [id(p) for p in parts[1:]][2::3],
                ids,
                list(backlog),
                (packer._exchange, packer._routing_key, packer._route, packer._lengths),
            )
        )
    assert answers[0] == answers[1]
    new_size, parts, _, ids, left, _ = answers[0]
    assert new_size == size + sum(map(len, parts[1:]))
    assert left == entries[len(ids) :]
    if ids:  # what it packed decodes to the messages it took
        decoded = decode_batch(b"".join(parts))
        assert all(isinstance(e, Enqueue) for e in decoded)
        assert [e.id for e in decoded if isinstance(e, Enqueue)] == ids
        assert [e.body for e in decoded if isinstance(e, Enqueue)] == [
            e.message.body for e in entries[: len(ids)]
        ]


@needs_native
def test_native_packing_refuses_what_it_is_not_given() -> None:
    with pytest.raises(TypeError):
        native_batch.pack_enqueues(_packer(None), deque(), (), [], 0, 1, 1)  # type: ignore[arg-type]
    with pytest.raises(AttributeError):
        native_batch.pack_enqueues(object(), deque(), [], [], 0, 1, 1)
