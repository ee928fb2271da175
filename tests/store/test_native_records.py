"""The native publish-path records (broker/store/_records.c) are byte for byte what the
Python encoders make, for any values the records can carry, and refuse what they cannot.
Sans-I/O: values in, bytes out."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.store import records
from broker.store.records import (
    Kind,
    encode_dequeue,
    encode_enqueue,
    encode_message,
    encode_message_with_enqueue,
    encode_queue_entry,
)

try:
    from broker.store import _records as native_records
except ImportError:  # the first test says so
    native_records = None  # type: ignore[assignment]

from .test_native_walk import can_compile

U64 = st.integers(0, 2**64 - 1)
SHORT = st.text(max_size=40).filter(lambda t: len(t.encode()) <= 255)
OUT_OF_RANGE = st.one_of(st.integers(max_value=-1), st.integers(min_value=2**64))


def test_the_native_records_are_built_where_they_can_be() -> None:
    """`pip install -e .` compiles them (setup.py) where a C compiler and Python's headers
    are; elsewhere the store encodes in Python (about 3x slower: docs/benchmarks.md)."""
    if not can_compile():
        assert native_records is None and records.native_records is None
        assert encode_dequeue is records._dequeue
        return
    assert native_records is not None, "broker/store/_records.c is not built: pip install -e ."
    assert encode_dequeue is native_records.encode_dequeue


needs_native = pytest.mark.skipif(
    native_records is None,
    reason="no native records on a machine without a compiler (the test above checks that)",
)


@settings(deadline=None)
@given(
    message_id=U64,
    exchange=SHORT,
    routing_key=SHORT,
    properties=st.binary(max_size=300),
    body=st.one_of(st.binary(max_size=5000), st.sampled_from([b"", b"x" * 131_072])),
    queue_id=U64,
    position=U64,
    expires_at_ms=U64,
)
def test_a_message_and_its_enqueue_are_the_reference_bytes(
    message_id: int,
    exchange: str,
    routing_key: str,
    properties: bytes,
    body: bytes,
    queue_id: int,
    position: int,
    expires_at_ms: int,
) -> None:
    expected = encode_message(message_id, exchange, routing_key, properties, body) + (
        encode_enqueue(queue_id, message_id, position, expires_at_ms)
    )
    args = (message_id, exchange, routing_key, properties, body, queue_id, position)
    assert encode_message_with_enqueue(*args, expires_at_ms) == expected
    route = records._ROUTES[(exchange, routing_key)]
    reference = records._message_with_enqueue(
        message_id, route, properties, body, queue_id, position, expires_at_ms
    )
    assert reference == expected
    if native_records is not None:
        native = native_records.encode_message_with_enqueue(
            message_id, route, properties, body, queue_id, position, expires_at_ms
        )
        assert native == expected
        # a body held in another buffer (a memoryview of a read) gives the same bytes
        assert (
            native_records.encode_message_with_enqueue(
                message_id, route, properties, memoryview(body), queue_id, position, expires_at_ms
            )
            == expected
        )


@settings(deadline=None)
@given(queue_id=U64, message_id=U64)
def test_a_dequeue_is_the_reference_bytes(queue_id: int, message_id: int) -> None:
    expected = encode_queue_entry(Kind.DEQUEUE, queue_id, message_id)
    assert encode_dequeue(queue_id, message_id) == expected
    assert records._dequeue(queue_id, message_id) == expected


@needs_native
@settings(deadline=None)
@given(bad=OUT_OF_RANGE, where=st.integers(0, 3))
def test_an_id_out_of_range_is_refused_by_both(bad: int, where: int) -> None:
    assert native_records is not None
    ids = [1, 2, 3, 4]
    ids[where] = bad
    message_id, queue_id, position, expires = ids
    with pytest.raises(struct.error):
        records._message_with_enqueue(
            message_id, b"\x00\x01q", b"", b"x", queue_id, position, expires
        )
    with pytest.raises(OverflowError):
        native_records.encode_message_with_enqueue(
            message_id, b"\x00\x01q", b"", b"x", queue_id, position, expires
        )
    if where < 2:
        with pytest.raises(struct.error):
            records._dequeue(*ids[:2])
        with pytest.raises(OverflowError):
            native_records.encode_dequeue(*ids[:2])


@needs_native
def test_what_is_not_an_int_or_a_buffer_is_a_type_error() -> None:
    native: Any = native_records
    with pytest.raises(TypeError):
        native.encode_message_with_enqueue(1.0, b"", b"", b"", 1, 1, 0)
    with pytest.raises(TypeError):
        native.encode_message_with_enqueue(1, "route", b"", b"", 1, 1, 0)
    with pytest.raises(TypeError):
        native.encode_message_with_enqueue(1, b"", b"", None, 1, 1, 0)
    with pytest.raises(TypeError):
        native.encode_message_with_enqueue(1, b"", b"", b"")
    with pytest.raises(TypeError):
        native.encode_dequeue("1", 2)
    with pytest.raises(TypeError):
        native.encode_dequeue(1)
