"""The HA replication stream formats (broker/ha/wire.py): batches, BatchWriter, config events."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import decimal
import struct
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import decode as pamqp_decode
from pamqp import encode as pamqp_encode

from broker.ha.id_set import MAX_ID, IdSet
from broker.ha.wire import (
    VERSION,
    VERSION_TX,
    BatchWriter,
    Dequeue,
    Enqueue,
    EnqueuePacker,
    QueueCaughtUp,
    StreamEvent,
    Tx,
    TxBase,
    decode_batch,
    decode_config_event,
    encode_batch,
    encode_config_event,
)

# -- strategies ---------------------------------------------------------------------------------

# Short strings whose UTF-8 always fits a short string (60 chars * 4 bytes <= 255).
names = st.text(max_size=60)  # no surrogates by default
replication_ids = st.one_of(st.integers(0, 1000), st.integers(0, MAX_ID), st.just(MAX_ID))
enqueues = st.builds(
    Enqueue,
    id=replication_ids,
    exchange=names,
    routing_key=names,
    properties=st.binary(max_size=64),
    body=st.binary(max_size=2048),
)
id_sets = st.lists(
    st.tuples(replication_ids, st.integers(0, 50)).map(lambda t: (t[0], min(t[0] + t[1], MAX_ID))),
    max_size=6,
).map(IdSet.from_ranges)
events = st.one_of(enqueues, id_sets.map(Dequeue), st.just(QueueCaughtUp()))
batches = st.lists(events, max_size=20)


def _event_sizes(batch: list[StreamEvent]) -> list[int]:
    return [len(encode_batch([event])) - 1 for event in batch]


# -- round trips --------------------------------------------------------------------------------


@given(batches)
def test_batch_round_trip(batch: list[StreamEvent]) -> None:
    data = encode_batch(batch)
    assert data[0] == 1
    assert decode_batch(data) == batch
    assert decode_batch(bytearray(data)) == batch
    assert decode_batch(memoryview(data)) == batch


def test_edge_values_round_trip() -> None:
    batch: list[StreamEvent] = [
        Enqueue(0, "", "", b"", b""),
        Enqueue(MAX_ID, "x" * 255, "é" * 127, b"\x00" * 70_000, b"\xff" * (1 << 20)),
        Enqueue(2**32, "amq.topic", "ключ.🐇.键", b"props", b"body"),
        Dequeue(IdSet()),
        Dequeue(IdSet.from_ranges([(0, MAX_ID)])),
        Dequeue(IdSet.from_ranges([(1, 1_000_000), (2**40, 2**40 + 5)])),
        QueueCaughtUp(),
        QueueCaughtUp(),
    ]
    assert decode_batch(encode_batch(batch)) == batch
    assert decode_batch(encode_batch([])) == []
    assert encode_batch([]) == b"\x01"


def test_format_is_pinned() -> None:
    data = encode_batch(
        [Enqueue(7, "ex", "rk", b"P", b"body"), Dequeue(IdSet([5])), QueueCaughtUp()]
    )
    assert data == (
        b"\x01"  # version
        + b"\x01"  # ENQUEUE
        + (7).to_bytes(8, "big")
        + b"\x02\x02"  # exchange, routing key lengths
        + (1).to_bytes(4, "big")  # properties length
        + (4).to_bytes(4, "big")  # body length
        + b"exrkPbody"
        + b"\x02"  # DEQUEUE
        + (3).to_bytes(4, "big")
        + b"\x01\x05\x00"  # IdSet([5])
        + b"\x03"  # CAUGHT_UP
    )


def test_events_are_frozen_slotted_dataclasses() -> None:
    event = Enqueue(1, "e", "k", b"p", b"b" * 5000)
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.id = 2  # type: ignore[misc]
    assert not hasattr(event, "__dict__")
    assert "body=<5000 bytes>" in repr(event)  # bodies are not dumped into logs
    assert QueueCaughtUp() == QueueCaughtUp()
    assert Dequeue(IdSet([1])) == Dequeue(IdSet([1]))


# -- encoding errors ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("event", "error", "problem"),
    [
        (Enqueue(1, "x" * 256, "", b"", b""), ValueError, "exchange is 256 bytes"),
        (Enqueue(1, "", "é" * 128, b"", b""), ValueError, "routing_key is 256 bytes"),
        (Enqueue(-1, "", "", b"", b""), ValueError, "out of range"),
        (Enqueue(MAX_ID + 1, "", "", b"", b""), ValueError, "out of range"),
        (Enqueue(1, "\ud800", "", b"", b""), ValueError, "UTF-8"),
        (Enqueue(1, "", "", b"", "body"), TypeError, "body must be bytes"),  # type: ignore[arg-type]
        (Enqueue(1, "", "", bytearray(), b""), TypeError, "properties must be bytes"),  # type: ignore[arg-type]
        (Enqueue(1.0, "", "", b"", b""), TypeError, "id must be an int"),  # type: ignore[arg-type]
        (Enqueue(1, None, "", b"", b""), TypeError, "exchange must be a str"),  # type: ignore[arg-type]
        (Dequeue({1, 2}), TypeError, "must be an IdSet"),  # type: ignore[arg-type]
        ("READY", TypeError, "not an Enqueue, Dequeue, QueueCaughtUp, Tx, TxBase or Watermark"),
    ],
)
def test_encode_refuses_bad_events(event: Any, error: type[Exception], problem: str) -> None:
    with pytest.raises(error, match=problem):
        encode_batch([QueueCaughtUp(), event])
    with pytest.raises(error, match=problem):
        BatchWriter().add(event)


def test_encode_error_names_the_event_index() -> None:
    with pytest.raises(ValueError, match="event 2"):
        encode_batch([QueueCaughtUp(), QueueCaughtUp(), Enqueue(1, "x" * 300, "", b"", b"")])


# -- decoding errors ----------------------------------------------------------------------------


def _must_fail(data: bytes) -> None:
    """decode_batch either succeeds or raises ValueError: never anything else."""
    with contextlib.suppress(ValueError):
        decode_batch(data)


@given(st.binary(max_size=200))
def test_random_bytes_raise_only_value_error(data: bytes) -> None:
    _must_fail(data)
    _must_fail(b"\x01" + data)


@settings(max_examples=50)
@given(batches)
def test_every_truncation_raises_value_error(batch: list[StreamEvent]) -> None:
    data = encode_batch(batch)
    boundaries = {1}
    offset = 1
    for size in _event_sizes(batch):
        offset += size
        boundaries.add(offset)
    for cut in range(len(data)):
        if cut in boundaries:  # a shorter but valid batch
            decoded = decode_batch(data[:cut])
            assert decoded == batch[: len(decoded)]
        else:
            with pytest.raises(ValueError):
                decode_batch(data[:cut])


@settings(max_examples=50)
@given(batches.filter(bool), st.data())
def test_corrupted_batches_raise_only_value_error(
    batch: list[StreamEvent], data: st.DataObject
) -> None:
    encoded = bytearray(encode_batch(batch))
    for _ in range(3):
        index = data.draw(st.integers(0, len(encoded) - 1))
        encoded[index] = data.draw(st.integers(0, 255))
        _must_fail(bytes(encoded))


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"", "empty batch"),
        (b"\x03", "unsupported batch version 3"),
        (b"\x01\x04" + b"\x00" * 16, "event 0 at byte 1: unknown event type 4"),
        (b"\x02\x04" + b"\x00" * 10, "truncated tx header"),
        (b"\x02\x04" + b"\x00" * 8 + b"\x00\x00\x00\x01" * 2, "more ENQUEUE"),
        (b"\x02\x04" + b"\x00" * 8 + b"\x00\x00\x00\x01\x00\x00\x00\x02", "tx count 2 not"),
        (b"\x02\x05\x00", "truncated txbase"),
        (b"\x01\x03\x09", "event 1 at byte 2: unknown event type 9"),
        (b"\x01\x01" + b"\x00" * 10, "truncated enqueue header"),
        (
            b"\x01\x01" + b"\x00" * 8 + b"\x00\x00" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x05abc",
            "truncated enqueue: needs 24 bytes, 22 left",
        ),
        (b"\x01\x01" + b"\x80" + b"\x00" * 7 + b"\x00" * 10, "enqueue id 9223372036854775808"),
        (b"\x01\x01" + b"\x00" * 8 + b"\x01\x00" + b"\x00" * 8 + b"\xff", "not valid UTF-8"),
        (b"\x01\x02\x00\x00", "truncated dequeue header"),
        (b"\x01\x02\x00\x00\x00\x05\x00", "truncated dequeue: needs 10 bytes, 6 left"),
        (b"\x01\x02\x00\x00\x00\x02\x01\x05", "dequeue: id set truncated"),
        (b"\x01\x02\x00\x00\x00\x02\x00\x00", "dequeue: id set has 1 trailing bytes"),
    ],
)
def test_decode_names_the_problem(data: bytes, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        decode_batch(data)


def test_decode_refuses_non_bytes() -> None:
    with pytest.raises(ValueError, match="must be bytes"):
        decode_batch("\x01")  # type: ignore[arg-type]


# -- BatchWriter --------------------------------------------------------------------------------


def _drain(writer: BatchWriter, batch: list[StreamEvent]) -> list[bytes]:
    """Add every event, taking a batch whenever the writer is full; then flush."""
    out: list[bytes] = []
    for event in batch:
        while writer.full:  # a carried event may fill the next batch on its own
            out.append(writer.take())
        writer.add(event)
    while len(writer):
        out.append(writer.take())
    return out


@given(batches, st.integers(2, 5000), st.integers(1, 8))
def test_batch_writer_respects_its_budget(
    batch: list[StreamEvent], max_bytes: int, max_events: int
) -> None:
    writer = BatchWriter(max_bytes=max_bytes, max_events=max_events)
    taken = _drain(writer, batch)
    decoded = [decode_batch(data) for data in taken]
    assert [event for events in decoded for event in events] == batch  # all, in order
    for data, events in zip(taken, decoded, strict=True):
        assert 1 <= len(events) <= max_events
        assert len(data) <= max_bytes or len(events) == 1  # only a lone big event may exceed
    # Batches are packed: the next batch's first event would not have fitted.
    for data, events, following in zip(taken, decoded, decoded[1:], strict=False):
        if len(events) < max_events:
            assert len(data) + _event_sizes(following[:1])[0] > max_bytes
    assert len(writer) == 0
    assert writer.size == 1
    assert not writer.full


def test_batch_writer_carries_an_event_that_does_not_fit() -> None:
    writer = BatchWriter(max_bytes=100, max_events=10)
    small = Enqueue(1, "", "", b"", b"x" * 40)  # 19 + 40 = 59 bytes
    writer.add(small)
    assert len(writer) == 1
    assert writer.size == 60
    assert not writer.full
    big = Enqueue(2, "", "", b"", b"y" * 500)
    writer.add(big)  # does not fit: set aside
    assert writer.full
    assert len(writer) == 1
    with pytest.raises(RuntimeError, match="full"):
        writer.add(QueueCaughtUp())
    assert decode_batch(writer.take()) == [small]
    assert len(writer) == 1  # the carried event starts the next batch
    assert writer.full  # and alone exceeds the budget
    assert decode_batch(writer.take()) == [big]
    assert len(writer) == 0
    assert writer.take() == b"\x01"  # an empty batch


def test_batch_writer_full_on_event_count() -> None:
    writer = BatchWriter(max_events=3)
    for _ in range(3):
        assert not writer.full
        writer.add(QueueCaughtUp())
    assert writer.full
    assert writer.take() == b"\x01\x03\x03\x03"
    assert (writer.max_bytes, writer.max_events) == (65536, 3)


def test_batch_writer_bad_event_leaves_it_unchanged() -> None:
    writer = BatchWriter()
    writer.add(QueueCaughtUp())
    with pytest.raises(ValueError):
        writer.add(Enqueue(1, "x" * 256, "", b"", b""))
    assert writer.take() == b"\x01\x03"


def test_batch_writer_rejects_bad_limits() -> None:
    with pytest.raises(ValueError):
        BatchWriter(max_bytes=1)
    with pytest.raises(ValueError):
        BatchWriter(max_events=0)


def test_batch_writer_packs_1kib_messages() -> None:
    writer = BatchWriter(max_bytes=65536, max_events=1000)
    taken = _drain(writer, [Enqueue(i, "", "q", b"", b"x" * 1024) for i in range(1000)])
    sizes = [len(decode_batch(data)) for data in taken]
    assert sum(sizes) == 1000
    assert sizes[0] == 65535 // (19 + 1 + 1024)  # 62 to a 64 KiB batch


# -- configuration stream -----------------------------------------------------------------------

config_keys = st.text(max_size=20).filter(lambda k: len(k.encode()) <= 128)
config_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.text(max_size=30),
    st.binary(max_size=30).map(bytearray),
)
config_values = st.recursive(
    config_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(config_keys, inner, max_size=4),
    max_leaves=20,
)
config_events = st.builds(
    lambda kind, rest: {**rest, "type": kind},
    st.sampled_from(["snapshot", "queue-declared", "bound", "membership", "epoch"]),
    st.dictionaries(config_keys, config_values, max_size=5),
)


@given(config_events)
def test_config_event_round_trip_and_matches_pamqp(event: dict[str, Any]) -> None:
    data = encode_config_event(event)
    assert data == pamqp_encode.field_table(event)
    decoded = decode_config_event(data)
    assert decoded == event
    assert decoded == pamqp_decode.field_table(data)[1]


def test_config_event_other_pamqp_types_decode_as_pamqp_does() -> None:
    event = {
        "type": "x",
        "when": datetime.datetime(2024, 5, 1, 12, 0, tzinfo=datetime.UTC),
        "price": decimal.Decimal("12.25"),
        "ratio": 0.5,
        "uint": 40_000,
        "int32": -70_000,
        "uint32": 3_000_000_000,
    }
    data = encode_config_event(event)
    assert decode_config_event(data) == pamqp_decode.field_table(data)[1] == event
    # Types pamqp never writes but reads: d (double), B (uint8), L, NUL void.
    raw = b"\x01ad" + struct.pack(">d", 0.1) + b"\x01bB\xff\x01cL" + struct.pack(">q", -5)
    raw += b"\x01d\x00" + b"\x04type" + b"S" + struct.pack(">I", 1) + b"y"
    data = struct.pack(">I", len(raw)) + raw
    assert decode_config_event(data) == pamqp_decode.field_table(data)[1]


def test_snapshot_decodes_in_linear_time() -> None:
    # pamqp.decode.field_table copies the rest of the buffer per value: minutes for this.
    queues = [
        {"name": f"queue-{i}", "durable": True, "arguments": {"qpid.replicate": "all"}}
        for i in range(20_000)
    ]
    data = encode_config_event({"type": "snapshot", "queues": queues, "bindings": []})
    start = time.process_time()
    decoded = decode_config_event(data)
    assert time.process_time() - start < 5  # ~0.1 s
    assert decoded["queues"] == queues


@pytest.mark.parametrize(
    ("event", "problem"),
    [
        ({"queue": "q"}, "needs a str 'type'"),
        ({"type": 1}, "needs a str 'type'"),
        ([("type", "x")], "must be a dict"),
        ({"type": "x", "k" * 129: 1}, "more than 128"),
        ({"type": "x", 1: 1}, "is not a str"),
        ({"type": "x", "v": object()}, "not encodable"),
        ({"type": "x", "v": b"bytes"}, "not encodable"),
        ({"type": "x", "v": 2**64}, "not encodable"),
        ({"type": "x", "v": ("tuple",)}, "not encodable"),
        ({"type": "x", "v": "\udc80"}, "not UTF-8"),
        ({"type": "x", "v": 1e300}, "not encodable"),
    ],
)
def test_encode_config_event_refuses(event: Any, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        encode_config_event(event)


def test_encode_config_event_refuses_deep_nesting() -> None:
    value: Any = 1
    for _ in range(40):
        value = [value]
    with pytest.raises(ValueError, match="nested"):
        encode_config_event({"type": "x", "v": value})


def _table(raw: bytes) -> bytes:
    return struct.pack(">I", len(raw)) + raw


TYPE_X = b"\x04typeS\x00\x00\x00\x01x"


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"", "truncated field table length"),
        (b"\x00\x00\x00\x00", "no str 'type'"),
        (_table(b"\x04typeI\x00\x00\x00\x01"), "no str 'type'"),
        (_table(TYPE_X) + b"\x00", "1 trailing bytes"),
        (b"\x00\x00\x00\x09" + TYPE_X[:5], "runs past its container"),
        (_table(TYPE_X + b"\x01aQ"), "unknown field type b'Q'"),
        (_table(TYPE_X + b"\x01a"), "missing field value"),
        (_table(TYPE_X + b"\x01aI\x00"), "truncated 'I' value"),
        (_table(TYPE_X + b"\x09a"), "field name at byte 15 runs past its table"),
        (_table(TYPE_X + b"\x01\xffV"), "field name at byte 15 is not UTF-8"),
        (_table(TYPE_X + b"\x01aS\x00\x00\x00\x01\xff"), "string at byte 18 is not UTF-8"),
        (_table(TYPE_X + b"\x04typeV"), "duplicate field 'type'"),
        (_table(TYPE_X + b"\x01aA\x00\x00\x00\x05S\x00\x00\x00\x09abcdefghi"), "runs past"),
        (_table(TYPE_X + b"\x01aT" + b"\xff" * 8), "timestamp out of range"),
        (_table(TYPE_X + b"\x01aD\x02"), "truncated decimal"),
        (_table(TYPE_X + b"\x01at"), "truncated boolean"),
    ],
)
def test_decode_config_event_names_the_problem(data: bytes, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        decode_config_event(data)


def test_decode_config_event_refuses_deep_nesting() -> None:
    inner = b"\x00\x00\x00\x00"
    for _ in range(40):
        inner = _table(b"\x01aF" + inner)
    with pytest.raises(ValueError, match="nested more than 32"):
        decode_config_event(inner)
    with pytest.raises(ValueError, match="must be bytes"):
        decode_config_event("{}")  # type: ignore[arg-type]


@given(st.binary(max_size=120))
def test_decode_config_event_random_bytes_raise_only_value_error(data: bytes) -> None:
    for candidate in (data, _table(data), _table(TYPE_X + data)):
        with contextlib.suppress(ValueError):
            decode_config_event(candidate)


@settings(max_examples=40)
@given(config_events)
def test_decode_config_event_every_truncation_raises_value_error(event: dict[str, Any]) -> None:
    data = encode_config_event(event)
    for cut in range(len(data)):
        with pytest.raises(ValueError):
            decode_config_event(data[:cut])


# -- transactions (TX and TXBASE, batch version 2) ----------------------------------------------

tx_ids = st.one_of(st.integers(0, 1000), st.just(2**64 - 1))


@st.composite
def tx_runs(draw: st.DrawFn) -> list[StreamEvent]:
    """A Tx event and its ENQUEUEs."""
    run = draw(st.lists(enqueues, min_size=1, max_size=4))
    total = draw(st.integers(len(run), 2**32 - 1))
    return [Tx(draw(tx_ids), total, len(run)), *run]


tx_segments = st.one_of(
    events.map(lambda event: [event]),
    tx_ids.map(lambda first: [TxBase(first)]),
    tx_runs(),
)
tx_batches = st.lists(tx_segments, max_size=8).map(
    lambda segments: [event for segment in segments for event in segment]
)


@given(tx_batches)
@settings(max_examples=200)
def test_tx_batches_round_trip(batch: list[StreamEvent]) -> None:
    data = encode_batch(batch)
    has_tx = any(type(event) in (Tx, TxBase) for event in batch)
    assert data[0] == (VERSION_TX if has_tx else VERSION)
    assert decode_batch(data) == batch
    writer = BatchWriter(max_bytes=2**31, max_events=10_000)
    for event in batch:
        writer.add(event)
    assert writer.take() == data


@given(st.lists(enqueues, min_size=1, max_size=5), tx_ids, st.integers(0, 3))
def test_enqueue_packer_tx_parts_match_encode_batch(
    run: list[Enqueue], tx_id: int, extra: int
) -> None:
    packer = EnqueuePacker()
    parts = [EnqueuePacker.VERSION_TX_BYTE, EnqueuePacker.tx_base(7)]
    parts.append(EnqueuePacker.tx(tx_id, len(run) + extra, len(run)))
    for event in run:
        parts.extend(
            packer.pack(event.id, event.exchange, event.routing_key, event.properties, event.body)[
                :3
            ]
        )
    expected = encode_batch([TxBase(7), Tx(tx_id, len(run) + extra, len(run)), *run])
    assert b"".join(parts) == expected


def test_a_batch_without_transactions_keeps_version_1() -> None:
    data = encode_batch([Enqueue(1, "", "q", b"", b"x"), QueueCaughtUp()])
    assert data[0] == VERSION == 1


@pytest.mark.parametrize(
    ("batch", "error"),
    [
        ([Tx(1, 2, 3), *[Enqueue(i, "", "q", b"", b"") for i in range(3)]], r"Tx\.count 3"),
        ([Tx(1, 2, 0)], r"Tx\.count 0"),
        ([Tx(1, 2, 2), Enqueue(1, "", "q", b"", b""), QueueCaughtUp()], "more ENQUEUE"),
        ([Tx(1, 2, 2), Enqueue(1, "", "q", b"", b"")], "at the end of the batch"),
        ([Tx(2**64, 2, 1), Enqueue(1, "", "q", b"", b"")], r"Tx\.id"),
        ([TxBase(-1)], r"TxBase\.first"),
    ],
)
def test_encode_refuses_bad_tx_events(batch: list[StreamEvent], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        encode_batch(batch)


def test_packer_refuses_a_bad_tx_count() -> None:
    with pytest.raises(ValueError, match=r"Tx\.count 3"):
        EnqueuePacker.tx(1, 2, 3)
