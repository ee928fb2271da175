"""The native delivery encoder (broker/amqp/_deliver.c) is built where it can be and refuses
what a delivery cannot carry; that it makes the Python encoder's bytes for any values is
tests/amqp/test_framing.py's ``test_deliver_frames_are_deliver_method_then_content_frames``.
Sans-I/O: values in, bytes out."""

from __future__ import annotations

from typing import Any

import pytest

from broker.amqp import framing
from tests.store.test_native_walk import can_compile

native: Any
try:
    from broker.amqp import _deliver as native
except ImportError:  # the first test says so
    native = None

needs_native = pytest.mark.skipif(
    native is None,
    reason="no native encoder on a machine without a compiler (the first test checks that)",
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
