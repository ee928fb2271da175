"""Field tables as a client may send them, for property tests: raw AMQP bytes of every field
type (64-bit floats and NaN, decimals, timestamps in seconds and in milliseconds, byte
arrays, void, long strings that are not UTF-8), field names of 0-255 bytes, nested up to the
AMQP codec's 64 levels, decoded by the broker's own frame decoder (what a declare's
arguments are once the broker has them). Used by the replication format 2 and store tests.
"""

from __future__ import annotations

import math
import struct
from typing import Any

from hypothesis import strategies as st
from pamqp import commands

from broker.amqp.framing import marshal_method, unmarshal_method
from broker.core.errors import AmqpError
from broker.core.field_tables import MAX_DEPTH as AMQP_MAX_DEPTH

__all__ = ["as_the_broker_decodes", "long_bytes", "raw_arguments", "same"]


def long_bytes(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


_U64_SECONDS = st.integers(0, 0xFFFFFFFF)
# past 2106 a timestamp reads as milliseconds (pamqp); up to year 9999
_U64_MILLIS = st.integers(0xFFFFFFFF + 1, 253402300799000)

_RAW_SCALARS = st.one_of(
    st.booleans().map(lambda b: b"t" + bytes([b])),
    st.integers(-(2**7), 2**7 - 1).map(lambda v: b"b" + struct.pack(">b", v)),
    st.integers(0, 2**8 - 1).map(lambda v: b"B" + struct.pack(">B", v)),
    st.integers(-(2**15), 2**15 - 1).map(lambda v: b"s" + struct.pack(">h", v)),
    st.integers(0, 2**16 - 1).map(lambda v: b"u" + struct.pack(">H", v)),
    st.integers(-(2**31), 2**31 - 1).map(lambda v: b"I" + struct.pack(">i", v)),
    st.integers(0, 2**32 - 1).map(lambda v: b"i" + struct.pack(">I", v)),
    st.integers(-(2**63), 2**63 - 1).map(lambda v: b"l" + struct.pack(">q", v)),
    st.integers(-(2**63), 2**63 - 1).map(lambda v: b"L" + struct.pack(">q", v)),
    st.floats(width=32).map(lambda v: b"f" + struct.pack(">f", v)),
    st.floats(width=64).map(lambda v: b"d" + struct.pack(">d", v)),
    st.tuples(st.integers(0, 255), st.integers(0, 2**32 - 1)).map(
        lambda d: b"D" + struct.pack(">BI", *d)
    ),
    st.one_of(st.text(max_size=20).map(str.encode), st.binary(max_size=12)).map(
        lambda v: b"S" + long_bytes(v)
    ),
    st.one_of(_U64_SECONDS, _U64_MILLIS).map(lambda v: b"T" + struct.pack(">Q", v)),
    st.just(b"V"),
    st.binary(max_size=12).map(lambda v: b"x" + long_bytes(v)),
)
_RAW_KEYS = st.one_of(
    st.text(max_size=12),
    st.text(min_size=60, max_size=255).filter(lambda k: len(k.encode()) <= 255),
).map(lambda k: bytes([len(k.encode())]) + k.encode())


def _raw_table(items: list[tuple[bytes, bytes]]) -> bytes:
    seen: set[bytes] = set()
    body = b""
    for key, value in items:
        if key not in seen:  # a duplicate name: pamqp keeps the last; draw them unique
            seen.add(key)
            body += key + value
    return b"F" + long_bytes(body)


def _containers(leaves: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.lists(leaves, max_size=3).map(lambda vs: b"A" + long_bytes(b"".join(vs))),
        st.lists(st.tuples(_RAW_KEYS, leaves), max_size=3).map(_raw_table),
    )


_RAW_VALUES = st.recursive(_RAW_SCALARS, _containers, max_leaves=10)


@st.composite
def raw_arguments(draw: st.DrawFn) -> bytes:
    """The bytes of an arguments table (its length first), some values wrapped up to the
    AMQP codec's 64 levels deep."""
    items = []
    for _ in range(draw(st.integers(0, 4))):
        value = draw(_RAW_VALUES)
        wraps = st.one_of(st.integers(0, 4), st.integers(AMQP_MAX_DEPTH - 6, AMQP_MAX_DEPTH))
        for _ in range(draw(wraps)):
            value = (
                _raw_table([(draw(_RAW_KEYS), value)])
                if draw(st.booleans())
                else (b"A" + long_bytes(value))
            )
        items.append((draw(_RAW_KEYS), value))
    return _raw_table(items)[1:]


def as_the_broker_decodes(table: bytes) -> dict[str, Any] | None:
    """A queue.declare frame with the raw ``table`` as its arguments, through the broker's
    frame decoder (None: the AMQP codec refuses it, e.g. nested past 64)."""
    empty = marshal_method(commands.Queue.Declare(queue="q"), 1)[7:-1]
    assert empty.endswith(b"\x00\x00\x00\x00")
    try:
        method = unmarshal_method(empty[:-4] + table)
    except AmqpError:
        return None
    return dict(getattr(method, "arguments", None) or {})


def same(a: Any, b: Any) -> bool:
    """Equal, NaN equal to NaN (a client may send one)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(map(same, a, b))
    return type(a) is type(b) and a == b
