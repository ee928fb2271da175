"""The AMQP 1.0 encoding (OASIS AMQP 1.0, part 1, section 1.2 and 1.6), sans-I/O:
:func:`encode` turns a value of :mod:`broker.amqp10.types` into bytes, :func:`decode`
reads one value back. Bad input raises :class:`DecodeError` (the ``amqp:decode-error``
condition), never another exception.

Why our own codec, not python-qpid-proton's: Proton's Python package is a binding of
Proton-C (a C extension built against the bundled C library). Its codec, ``proton.Data``,
is a cursor over a C ``pn_data_t`` tree, not a function from bytes to values, and its
engine (``proton.Transport``/``Connection`` with ``Transport.SERVER``) can serve, but then
the connection, session and link state machines are Proton-C's, driven through its event
collector: the broker's own rules (when ``accepted`` may go out: the same confirm holds as
0-9-1's, which the HA module adds to; what a frame too large, a missing queue or a
transfer before attach is answered with) would sit beside a second state machine we cannot
test without it, and the protocol tests would run Proton against Proton, where a
misreading of the specification shared by both ends passes. So the broker owns the
protocol, sans-I/O as its 0-9-1 core is, with hypothesis round-trip tests
(``tests/amqp10/test_codec.py``), and Proton (PyPI ``python-qpid-proton``) is the
independent client the end-to-end tests use.

Encoding picks the smallest form (``uint0``, ``smalluint``, ``str8``, ``list8`` ...);
decoding takes every form. A described value whose descriptor a composite registered
(:func:`register`) decodes as that composite, any other as
:class:`~broker.amqp10.types.Described`. Nesting is bounded (:data:`MAX_DEPTH`) and a
compound's count is checked against its size, so a small frame cannot make a large
allocation.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import Any

from broker.amqp10.types import (
    Array,
    Byte,
    Char,
    Decimal32,
    Decimal64,
    Decimal128,
    Described,
    Float,
    Int,
    Short,
    Symbol,
    Timestamp,
    UByte,
    UInt,
    ULong,
    UShort,
)

__all__ = ["MAX_DEPTH", "DecodeError", "decode", "decode_all", "encode", "encode_into"]

#: How deeply compounds and described values may nest in one value.
MAX_DEPTH = 64
#: The most elements a zero-width array (of nulls, booleans as true/false...) may hold.
_MAX_EMPTY_ELEMENTS = 1024

_B = struct.Struct(">B")
_b = struct.Struct(">b")
_H = struct.Struct(">H")
_h = struct.Struct(">h")
_I = struct.Struct(">I")
_i = struct.Struct(">i")
_Q = struct.Struct(">Q")
_q = struct.Struct(">q")
_f = struct.Struct(">f")
_d = struct.Struct(">d")
_BB = struct.Struct(">BB")
_II = struct.Struct(">II")


class DecodeError(ValueError):
    """The bytes are not a well-formed AMQP 1.0 value (``amqp:decode-error``)."""


#: A composite's maker from its described value, by numeric descriptor (see register).
_COMPOSITES: dict[int, Callable[[Any], Any]] = {}
_SYMBOLIC: dict[str, int] = {}


def register(code: int, name: str, make: Callable[[Any], Any]) -> None:
    """Decode a described value with descriptor ``code`` (or symbol ``name``) as
    ``make(value)``; ``make`` raises DecodeError for a value of the wrong shape."""
    _COMPOSITES[code] = make
    _SYMBOLIC[name] = code


# -- encoding --------------------------------------------------------------------------
def encode(value: Any) -> bytes:
    """``value`` encoded (see :mod:`broker.amqp10.types` for which type each value is)."""
    out = bytearray()
    encode_into(out, value)
    return bytes(out)


def _encode_ulong(out: bytearray, value: int) -> None:
    if value == 0:
        out.append(0x44)
    elif value < 256:
        out += b"\x53" + _B.pack(value)
    else:
        out += b"\x80" + _Q.pack(value)


def _encode_compound(out: bytearray, small: int, large: int, count: int, body: bytes) -> None:
    if count < 256 and len(body) + 1 < 256:
        out += _BB.pack(small, len(body) + 1) + _B.pack(count) + body
    else:
        out += _B.pack(large) + _II.pack(len(body) + 4, count) + body


def encode_into(out: bytearray, value: Any) -> None:
    """Append ``value`` encoded to ``out``."""
    if value is None:
        out.append(0x40)
    elif value is True:
        out.append(0x41)
    elif value is False:
        out.append(0x42)
    elif isinstance(value, int):
        _encode_int(out, value)
    elif isinstance(value, str):
        _encode_str(out, value)
    elif isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
        if isinstance(value, Decimal32 | Decimal64 | Decimal128):
            out += _B.pack({4: 0x74, 8: 0x84, 16: 0x94}[len(raw)]) + raw
        elif len(raw) < 256:
            out += b"\xa0" + _B.pack(len(raw)) + raw
        else:
            out += b"\xb0" + _I.pack(len(raw)) + raw
    elif isinstance(value, float):
        if isinstance(value, Float):
            out += b"\x72" + _f.pack(value)
        else:
            out += b"\x82" + _d.pack(value)
    elif isinstance(value, Array):
        _encode_array(out, value)
    elif isinstance(value, list | tuple):
        if not value:
            out.append(0x45)
            return
        body = bytearray()
        for item in value:
            encode_into(body, item)
        _encode_compound(out, 0xC0, 0xD0, len(value), bytes(body))
    elif isinstance(value, dict):
        body = bytearray()
        for key, item in value.items():
            encode_into(body, key)
            encode_into(body, item)
        _encode_compound(out, 0xC1, 0xD1, 2 * len(value), bytes(body))
    elif isinstance(value, uuid.UUID):
        out += b"\x98" + value.bytes
    elif isinstance(value, Described):
        out.append(0x00)
        encode_into(out, value.descriptor)
        encode_into(out, value.value)
    else:
        described = getattr(value, "described", None)
        if described is None:
            raise TypeError(f"no AMQP 1.0 encoding for {type(value).__name__}")
        code, body_value = described()
        out.append(0x00)
        _encode_ulong(out, code)
        encode_into(out, body_value)


def _encode_int(out: bytearray, value: int) -> None:
    kind = type(value)
    if kind is UInt:
        if value == 0:
            out.append(0x43)
        elif value < 256:
            out += b"\x52" + _B.pack(value)
        else:
            out += b"\x70" + _I.pack(value)
    elif kind is ULong:
        _encode_ulong(out, value)
    elif kind is UByte:
        out += b"\x50" + _B.pack(value)
    elif kind is UShort:
        out += b"\x60" + _H.pack(value)
    elif kind is Byte:
        out += b"\x51" + _b.pack(value)
    elif kind is Short:
        out += b"\x61" + _h.pack(value)
    elif kind is Int:
        if -128 <= value <= 127:
            out += b"\x54" + _b.pack(value)
        else:
            out += b"\x71" + _i.pack(value)
    elif kind is Timestamp:
        out += b"\x83" + _q.pack(value)
    else:  # a plain int (or another subclass): long
        if -128 <= value <= 127:
            out += b"\x55" + _b.pack(value)
        elif -(2**63) <= value < 2**63:
            out += b"\x81" + _q.pack(value)
        else:
            raise ValueError(f"integer {value} does not fit in an AMQP long")


def _encode_str(out: bytearray, value: str) -> None:
    if isinstance(value, Char):
        out += b"\x73" + value.encode("utf-32-be")
        return
    raw = value.encode("utf-8") if not isinstance(value, Symbol) else value.encode("ascii")
    small, large = (0xA3, 0xB3) if isinstance(value, Symbol) else (0xA1, 0xB1)
    if len(raw) < 256:
        out += _BB.pack(small, len(raw)) + raw
    else:
        out += _B.pack(large) + _I.pack(len(raw)) + raw


#: An array's element format code -> (the form for elements that need the wide one).
_WIDE = {0xA0: 0xB0, 0xA1: 0xB1, 0xA3: 0xB3, 0xC0: 0xD0, 0xC1: 0xD1, 0xE0: 0xF0}


def _encode_array(out: bytearray, array: Array) -> None:
    code = array.code
    elements = [_element_bytes(code, item) for item in array]
    if code in _WIDE and any(len(e) > 255 for e in elements):
        code = _WIDE[code]
    if code in (0xA0, 0xA1, 0xA3):
        body = b"".join(_B.pack(len(e)) + e for e in elements)
    elif code in (0xB0, 0xB1, 0xB3):
        body = b"".join(_I.pack(len(e)) + e for e in elements)
    elif code in (0xC0, 0xC1, 0xE0, 0xD0, 0xD1, 0xF0):
        code = _WIDE.get(code, code)  # compound elements: always the 32-bit form
        body = b"".join(elements)
    else:
        body = b"".join(elements)
    _encode_compound(out, 0xE0, 0xF0, len(array), _B.pack(code) + body)


def _element_bytes(code: int, item: Any) -> bytes:
    """One array element without its constructor (variable-width: without its length)."""
    encoded = bytearray()
    if code in (0xA0, 0xB0):
        return bytes(item)
    if code in (0xA1, 0xB1):
        return str(item).encode("utf-8")
    if code in (0xA3, 0xB3):
        return str(item).encode("ascii")
    maker: dict[int, Callable[[Any], bytes]] = {
        0x56: lambda v: b"\x01" if v else b"\x00",
        0x50: _B.pack,
        0x60: _H.pack,
        0x70: _I.pack,
        0x80: _Q.pack,
        0x51: _b.pack,
        0x61: _h.pack,
        0x71: _i.pack,
        0x81: _q.pack,
        0x72: _f.pack,
        0x82: _d.pack,
        0x83: _q.pack,
        0x73: lambda v: str(v).encode("utf-32-be"),
        0x98: lambda v: v.bytes,
    }
    if code in maker:
        return maker[code](item)
    if code in (0xC0, 0xD0, 0xC1, 0xD1, 0xE0, 0xF0):
        encode_into(encoded, Array(item.code, item) if code in (0xE0, 0xF0) else item)
        raw = bytes(encoded)
        if raw[0] in (0x45,):  # an empty list as a list32
            return _II.pack(4, 0)
        if raw[0] in (0xC0, 0xC1, 0xE0):  # narrow compound -> its 32-bit form
            size, count = raw[1], raw[2]
            return _II.pack(size + 3, count) + raw[3:]
        return raw[1:]
    raise ValueError(f"no array element encoding for format code {code:#04x}")


# -- decoding --------------------------------------------------------------------------
def decode(data: bytes, pos: int = 0) -> tuple[Any, int]:
    """The value at ``pos`` of ``data`` and the position after it.

    :raises DecodeError: truncated or malformed input.
    """
    try:
        return _decode(data, pos, 0)
    except DecodeError:
        raise
    except (struct.error, IndexError) as exc:
        raise DecodeError(f"truncated AMQP value at offset {pos}") from exc
    except (ValueError, UnicodeDecodeError, TypeError) as exc:
        raise DecodeError(f"malformed AMQP value: {exc}") from exc


def decode_all(data: bytes) -> list[Any]:
    """Every value of ``data``, one after another (the sections of a message)."""
    values: list[Any] = []
    pos = 0
    while pos < len(data):
        value, pos = decode(data, pos)
        values.append(value)
    return values


def _need(data: bytes, end: int) -> None:
    if end > len(data):
        raise DecodeError(f"truncated AMQP value: needs {end} bytes, has {len(data)}")


def _decode(data: bytes, pos: int, depth: int) -> tuple[Any, int]:
    if depth > MAX_DEPTH:
        raise DecodeError(f"AMQP value nested deeper than {MAX_DEPTH}")
    code = data[pos]
    pos += 1
    if code == 0x00:
        descriptor, pos = _decode(data, pos, depth + 1)
        value, pos = _decode(data, pos, depth + 1)
        return _described(descriptor, value), pos
    return _decode_as(code, data, pos, depth)


def _described(descriptor: Any, value: Any) -> Any:
    key = descriptor
    if isinstance(descriptor, str):
        key = _SYMBOLIC.get(descriptor)
    if isinstance(key, int) and not isinstance(key, bool):
        make = _COMPOSITES.get(key)
        if make is not None:
            return make(value)
    return Described(descriptor, value)


_FIXED: dict[int, tuple[int, Callable[[bytes, int], Any]]] = {
    0x50: (1, lambda d, p: UByte(d[p])),
    0x51: (1, lambda d, p: Byte(_b.unpack_from(d, p)[0])),
    0x52: (1, lambda d, p: UInt(d[p])),
    0x53: (1, lambda d, p: ULong(d[p])),
    0x54: (1, lambda d, p: Int(_b.unpack_from(d, p)[0])),
    0x55: (1, lambda d, p: _b.unpack_from(d, p)[0]),
    0x56: (1, lambda d, p: _bool_byte(d[p])),
    0x60: (2, lambda d, p: UShort(_H.unpack_from(d, p)[0])),
    0x61: (2, lambda d, p: Short(_h.unpack_from(d, p)[0])),
    0x70: (4, lambda d, p: UInt(_I.unpack_from(d, p)[0])),
    0x71: (4, lambda d, p: Int(_i.unpack_from(d, p)[0])),
    0x72: (4, lambda d, p: Float(_f.unpack_from(d, p)[0])),
    0x73: (4, lambda d, p: Char(bytes(d[p : p + 4]).decode("utf-32-be"))),
    0x74: (4, lambda d, p: Decimal32(bytes(d[p : p + 4]))),
    0x80: (8, lambda d, p: ULong(_Q.unpack_from(d, p)[0])),
    0x81: (8, lambda d, p: _q.unpack_from(d, p)[0]),
    0x82: (8, lambda d, p: _d.unpack_from(d, p)[0]),
    0x83: (8, lambda d, p: Timestamp(_q.unpack_from(d, p)[0])),
    0x84: (8, lambda d, p: Decimal64(bytes(d[p : p + 8]))),
    0x94: (16, lambda d, p: Decimal128(bytes(d[p : p + 16]))),
    0x98: (16, lambda d, p: uuid.UUID(bytes=bytes(d[p : p + 16]))),
}

_EMPTY: dict[int, Callable[[], Any]] = {
    0x40: lambda: None,
    0x41: lambda: True,
    0x42: lambda: False,
    0x43: lambda: UInt(0),
    0x44: lambda: ULong(0),
    0x45: list,
}


def _bool_byte(value: int) -> bool:
    if value > 1:
        raise DecodeError(f"boolean byte {value:#04x} is neither 0x00 nor 0x01")
    return value == 1


def _variable(code: int, raw: bytes) -> Any:
    low = code & 0x0F
    if low == 0x0:
        return raw
    if low == 0x1:
        return raw.decode("utf-8")
    if low == 0x3:
        return Symbol(raw.decode("ascii"))
    raise DecodeError(f"unknown format code {code:#04x}")


def _decode_as(code: int, data: bytes, pos: int, depth: int) -> tuple[Any, int]:
    empty = _EMPTY.get(code)
    if empty is not None:
        return empty(), pos
    fixed = _FIXED.get(code)
    if fixed is not None:
        width, read = fixed
        _need(data, pos + width)
        return read(data, pos), pos + width
    if code in (0xA0, 0xA1, 0xA3):
        _need(data, pos + 1)
        size = data[pos]
        end = pos + 1 + size
        _need(data, end)
        return _variable(code, bytes(data[pos + 1 : end])), end
    if code in (0xB0, 0xB1, 0xB3):
        _need(data, pos + 4)
        size = _I.unpack_from(data, pos)[0]
        end = pos + 4 + size
        _need(data, end)
        return _variable(code, bytes(data[pos + 4 : end])), end
    if code in (0xC0, 0xC1, 0xE0, 0xD0, 0xD1, 0xF0):
        return _decode_compound(code, data, pos, depth)
    raise DecodeError(f"unknown format code {code:#04x}")


def _decode_compound(code: int, data: bytes, pos: int, depth: int) -> tuple[Any, int]:
    if code in (0xC0, 0xC1, 0xE0):
        _need(data, pos + 2)
        size, count = data[pos], data[pos + 1]
        start, end = pos + 2, pos + 1 + size
        if size < 1:
            raise DecodeError(f"compound of size {size} has no room for its count")
    else:
        _need(data, pos + 8)
        size, count = _II.unpack_from(data, pos)
        start, end = pos + 8, pos + 4 + size
        if size < 4:
            raise DecodeError(f"compound of size {size} has no room for its count")
    _need(data, end)
    items: list[Any]
    if code in (0xE0, 0xF0):
        items, after = _decode_array(data, start, end, count, depth)
    else:
        if count > end - start:
            raise DecodeError(f"compound claims {count} elements in {end - start} bytes")
        items = []
        after = start
        for _ in range(count):
            if after >= end:
                raise DecodeError("compound element beyond its size")
            item, after = _decode(data, after, depth + 1)
            items.append(item)
    if after != end:
        raise DecodeError(f"compound size {size} does not match its {count} elements")
    if code in (0xC1, 0xD1):
        if count % 2:
            raise DecodeError(f"map with an odd number of elements ({count})")
        mapping: dict[Any, Any] = {}
        for index in range(0, count, 2):
            key = items[index]
            try:
                mapping[key] = items[index + 1]
            except TypeError:
                raise DecodeError(f"map key of type {type(key).__name__}") from None
        return mapping, end
    return items, end


def _decode_array(data: bytes, pos: int, end: int, count: int, depth: int) -> tuple[Array, int]:
    if pos >= end:
        raise DecodeError("array without its element constructor")
    descriptor: Any = None
    described = data[pos] == 0x00
    if described:
        descriptor, pos = _decode(data, pos + 1, depth + 1)
    element = data[pos]
    pos += 1
    if element in _EMPTY or element == 0x00:
        if count > _MAX_EMPTY_ELEMENTS:
            raise DecodeError(f"array of {count} zero-width elements")
    elif count > end - pos:
        raise DecodeError(f"array claims {count} elements in {end - pos} bytes")
    items = Array(element)
    for _ in range(count):
        if element == 0x00:
            raise DecodeError("array element constructor is itself described")
        item, pos = _decode_as(element, data, pos, depth + 1)
        if pos > end:
            raise DecodeError("array element beyond its size")
        items.append(_described(descriptor, item) if described else item)
    return _canonical(items), pos


def _canonical(items: Array) -> Array:
    """The array under its narrow element code (so equal arrays compare equal)."""
    narrow = {v: k for k, v in _WIDE.items()}
    code = {0x52: 0x70, 0x43: 0x70, 0x53: 0x80, 0x44: 0x80, 0x54: 0x71, 0x55: 0x81}.get(
        items.code, narrow.get(items.code, items.code)
    )
    if code in (0x41, 0x42):
        code = 0x56
    items.code = code
    return items
