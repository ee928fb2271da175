"""The native delivery encoder (broker/amqp/_deliver.c) is byte for byte what the Python
encoder makes, for any values a delivery can carry, and refuses what it cannot. Sans-I/O:
values in, bytes out."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from broker.amqp import framing
from tests.store.test_native_walk import can_compile

native: Any
try:
    from broker.amqp import _deliver as native
except ImportError:  # the first test says so
    native = None

needs_native = pytest.mark.skipif(
    native is None,
    reason="no native encoder on a machine without a compiler (the test below checks that)",
)


def test_the_native_encoder_is_built_where_it_can_be() -> None:
    """`pip install -e .` compiles it (setup.py) where a C compiler and Python's headers
    are; elsewhere deliveries are encoded in Python (the same bytes, slower)."""
    if not can_compile():
        assert native is None and framing.deliver_frames is framing._deliver_frames
        return
    assert native is not None, "broker/amqp/_deliver.c is not built: pip install -e ."
    assert framing.deliver_frames is native.deliver_frames


@needs_native
@settings(deadline=None)
@given(
    channel=st.integers(0, 65535),
    tag=st.binary(max_size=256),
    delivery_tag=st.integers(0, 2**64 - 1),
    redelivered=st.booleans(),
    route=st.binary(max_size=512),
    raw=st.binary(max_size=300),
    body=st.one_of(st.binary(max_size=20000), st.sampled_from([b"", b"x" * 262_144])),
    frame_max=st.sampled_from([9, 10, 4096, 4097, 8192, 131072]),
)
@example(0, b"", 0, False, b"", b"", b"", 4096)  # no body: no body frame
@example(1, b"\x01c", 1, True, b"\x00\x01q", b"\x00\x00", b"x" * 4088, 4096)  # one full frame
@example(1, b"\x01c", 1, False, b"\x00\x01q", b"\x00\x00", b"x" * 4089, 4096)  # one byte over
@example(1, b"\x01c", 1, False, b"\x00\x01q", b"\x00\x00", b"x" * 8176, 4096)  # two full
def test_a_delivery_is_the_reference_bytes(
    channel: int,
    tag: bytes,
    delivery_tag: int,
    redelivered: bool,
    route: bytes,
    raw: bytes,
    body: bytes,
    frame_max: int,
) -> None:
    args = (channel, tag, delivery_tag, redelivered, route, raw)
    expected = framing._deliver_frames(*args, body, frame_max)
    assert native.deliver_frames(*args, body, frame_max) == expected
    # a body held in another buffer (a memoryview, a bytearray) gives the same bytes
    assert native.deliver_frames(*args, memoryview(body), frame_max) == expected
    assert native.deliver_frames(*args, bytearray(body), frame_max) == expected


@needs_native
def test_what_is_out_of_range_is_refused() -> None:
    route = b"\x00\x01q"
    with pytest.raises(OverflowError):
        native.deliver_frames(65536, b"\x01c", 1, False, route, b"", b"x", 4096)
    with pytest.raises(OverflowError):
        native.deliver_frames(1, b"\x01c", 2**64, False, route, b"", b"x", 4096)
    with pytest.raises(OverflowError):
        native.deliver_frames(1, b"\x01c", -1, False, route, b"", b"x", 4096)
    for frame_max in (0, 8, 2**32):  # no room for a body, or more than a frame can say
        with pytest.raises(ValueError):
            native.deliver_frames(1, b"\x01c", 1, False, route, b"", b"x", frame_max)


@needs_native
def test_what_is_not_an_int_or_a_buffer_is_a_type_error() -> None:
    route = b"\x00\x01q"
    with pytest.raises(TypeError):
        native.deliver_frames(1.0, b"\x01c", 1, False, route, b"", b"x", 4096)
    with pytest.raises(TypeError):
        native.deliver_frames(1, "c", 1, False, route, b"", b"x", 4096)
    with pytest.raises(TypeError):
        native.deliver_frames(1, b"\x01c", 1, False, route, b"", None, 4096)
    with pytest.raises(TypeError):
        native.deliver_frames(1, b"\x01c", 1, False, route, b"")
