"""The 0-9-1 wire's native part (broker/amqp/_wire.c) is built where it can be; its
delivery encoder refuses what a delivery cannot carry (that it makes the Python encoder's
bytes for any values is tests/amqp/test_framing.py's
``test_deliver_frames_are_deliver_method_then_content_frames``); its publish scanner splits
a whole publish into its parts and anything else into None, never raising for what a read
holds (that the broker does the same with it as without it is tests/amqp/
test_publish_whole.py's). Sans-I/O: values in, bytes out."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.amqp import framing
from tests.store.test_native_walk import can_compile

native: Any
try:
    from broker.amqp import _wire as native
except ImportError:  # the first test says so
    native = None

needs_native = pytest.mark.skipif(
    native is None,
    reason="no native part on a machine without a compiler (the first test checks that)",
)


def test_the_native_part_is_built_where_it_can_be() -> None:
    """`pip install -e .` compiles it (setup.py) where a C compiler and Python's headers
    are; elsewhere deliveries are encoded and publishes split in Python (the same bytes and
    outcomes, slower)."""
    if not can_compile():
        assert native is None and framing.deliver_frames is framing._deliver_frames
        assert framing.scan_publish is None
        return
    assert native is not None, "broker/amqp/_wire.c is not built: pip install -e ."
    assert framing.deliver_frames is native.deliver_frames
    assert framing.scan_publish is native.scan_publish


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


def _publish(channel: int = 1, body: bytes = b"hello", raw: bytes = b"\x10\x00\x02") -> bytes:
    """A publish's three frames (raw: delivery-mode 2) as a client writes them."""
    return framing.marshal_publish(channel, "amq.direct", "key", True) + framing.content_frames(
        channel, raw, body, 131072
    )


_ARGUMENTS = ("amq.direct", "key", True, False)


def _decoded(data: bytes) -> dict[bytes, tuple[str, str, bool, bool]]:
    """The publish payload at data's start, as framing.py remembers it once decoded."""
    size = int.from_bytes(data[3:7], "big")
    return {data[7 : 7 + size]: _ARGUMENTS}


@needs_native
def test_a_whole_publish_is_split_into_its_parts() -> None:
    first, second = _publish(3, b"one"), _publish(3, b"x" * 5000, b"\x00\x00")
    data = b"junk" + first + second
    decoded = _decoded(first)
    method_end = 4 + len(framing.marshal_publish(3, "amq.direct", "key", True))
    assert native.scan_publish(data, 4, 131064, decoded) == (
        3,
        method_end,
        4 + len(first),
        _ARGUMENTS,
        b"\x10\x00\x02",
        b"one",
    )
    _, _, end, arguments, raw, body = native.scan_publish(data, 4 + len(first), 131064, decoded)
    assert (end, arguments, raw, body) == (len(data), _ARGUMENTS, b"\x00\x00", b"x" * 5000)
    assert native.scan_publish(data, 4 + len(first), 4999, decoded) is None  # over max payload


@needs_native
def test_anything_but_a_whole_publish_decoded_before_is_none() -> None:
    data = _publish()
    decoded = _decoded(data)
    for end in range(len(data)):  # each read that stops short of its last octet
        assert native.scan_publish(data[:end], 0, 131064, decoded) is None
    assert native.scan_publish(data, 0, 131064, {}) is None  # its arguments not decoded yet
    assert native.scan_publish(data, 1, 131064, decoded) is None
    assert native.scan_publish(data, len(data), 131064, decoded) is None
    assert native.scan_publish(data, -1, 131064, decoded) is None
    for at in range(len(data)):  # any one octet changed (but the body's and properties')
        damaged = data[:at] + bytes((data[at] ^ 0x41,)) + data[at + 1 :]
        got = native.scan_publish(damaged, 0, 131064, decoded)
        assert got is None or got[4:] != (b"\x10\x00\x02", b"hello")
    assert native.scan_publish(_publish(0), 0, 131064, _decoded(_publish(0))) is None
    empty = framing.marshal_publish(1, "amq.direct", "key", True) + framing.content_frames(
        1, b"\x00\x00", b"", 131072
    )
    assert native.scan_publish(empty + data, 0, 131064, _decoded(empty)) is None  # no body frame


@needs_native
@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=200), pos=st.integers(-2, 210), max_payload=st.integers(0, 300))
def test_no_read_makes_the_scanner_raise(data: bytes, pos: int, max_payload: int) -> None:
    """Whatever a read holds, None or parts that lie inside it, in order."""
    prefix = _publish(body=b"b")
    for read in (data, prefix[: len(prefix) // 2] + data, prefix + data):
        got = native.scan_publish(read, pos, max_payload, _decoded(prefix))
        if got is not None:
            channel, method_end, end, _, raw, body = got
            assert 0 < channel <= 0xFFFF and 0 <= pos < method_end < end <= len(read)
            assert read[end - 1] == framing.FRAME_END and body
            assert read.find(raw, method_end) >= 0 and read.find(body, method_end) >= 0


@needs_native
def test_what_is_not_bytes_an_int_or_a_dict_is_a_type_error() -> None:
    data = _publish()
    arguments: list[tuple[object, ...]] = [
        (bytearray(data), 0, 131064, {}),
        (data, 0.0, 131064, {}),
        (data, 0, "131064", {}),
        (data, 0, 131064, []),
        (data, 0, 131064),
    ]
    for args in arguments:
        with pytest.raises(TypeError):
            native.scan_publish(*args)
