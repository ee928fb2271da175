"""Field tables in bytes, both ways, exactly: one codec for what a client declares.

What a client may declare (the AMQP codec's field tables: :mod:`broker.core.field_tables`)
is written in two places that must give it back unchanged: replication format 2's
configuration events (:mod:`broker.ha.wire_config2`) and the store's configuration records
of store format 2 (:mod:`broker.store.records`). pamqp's encoder cannot (it writes floats in
32 bits and cuts field names at 128 bytes), so both use this module:

- :func:`encode_table`: an AMQP field table (``u32`` length, then ``short-string name``,
  ``type byte``, ``value``...) of **every value the AMQP decoder gives**: bool ``t``, int
  ``l`` (64-bit signed: every AMQP integer fits), float ``d`` (64 bits, NaN too), str ``S``,
  bytes ``S`` (a long string that is not UTF-8, as pamqp hands it over: it comes back as
  bytes; bytes that are UTF-8 come back a str), bytearray ``x``, None ``V``, Decimal ``D``
  (scale u8, mantissa **i64**: wider than AMQP's i32), datetime ``T`` (u64 seconds, or
  milliseconds when the value has a fraction of a second or lies past 2106: as pamqp reads
  it), dicts ``F`` and lists ``A``; field names of up to :data:`MAX_KEY_BYTES` bytes of
  UTF-8. A value it cannot carry exactly is a :class:`ValueError` naming it, never a changed
  value.
- :func:`decode_table`: a strict, linear-time decoder (pamqp's copies the rest of the buffer
  for every value: quadratic), by a :class:`Grammar`'s rules: a value that overruns its table
  or array, a duplicate field name, an unknown type, nesting deeper than the grammar's,
  trailing bytes: :class:`ValueError`. It reads every AMQP field type (``b B s u I i l L f d
  D S F A t V x T``), so replication format 1's pamqp-written events decode with it too
  (:data:`broker.ha.wire_config.FORMAT_1`).

Depth counts containers from the outer table, at depth 0; a value (scalar or not) deeper
than ``max_depth`` is refused. No I/O; pure functions.
"""

from __future__ import annotations

import datetime
import decimal
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from common.slices import SLICE, Steps

__all__ = [
    "LOSSLESS_DECIMAL",
    "MAX_KEY_BYTES",
    "Encoded",
    "Grammar",
    "decode_table",
    "decode_table_steps",
    "encode_table",
    "encode_table_steps",
    "encode_value",
    "lossless_grammar",
    "read_table",
]

#: Longest field name in bytes of UTF-8: an AMQP short string.
MAX_KEY_BYTES = 255
#: The decimal :func:`encode_table` writes after its ``D``: scale (u8), mantissa (i64).
LOSSLESS_DECIMAL = struct.Struct(">Bq")

_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_F64 = struct.Struct(">d")
_U64 = struct.Struct(">Q")
_SECONDS_MAX = 0xFFFFFFFF  # above it, a timestamp reads as milliseconds (pamqp's rule)
#: Field names already checked, as written (length, UTF-8), by name: at most
#: :data:`_FIELD_NAMES_KEPT` (the first ones met; any other is checked each time).
_FIELD_NAMES: dict[str, bytes] = {}
_FIELD_NAMES_KEPT = 1024


@dataclass(frozen=True)
class Grammar:
    """What :func:`decode_table` accepts (one per format that uses it)."""

    #: Deepest table or array, the outer table at depth 0.
    max_depth: int
    #: A long string that is not UTF-8 decodes as bytes (as pamqp does) instead of failing.
    raw_strings: bool
    #: The layout of a decimal after its ``D``: scale (u8), then the mantissa.
    decimal: struct.Struct
    #: What the bytes are, for the errors (``config event``, ``store arguments``).
    what: str


def lossless_grammar(max_depth: int, what: str) -> Grammar:
    """The grammar that reads back everything :func:`encode_table` writes."""
    return Grammar(max_depth, raw_strings=True, decimal=LOSSLESS_DECIMAL, what=what)


# -- encoding ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Encoded:
    """An item of a top-level array that :func:`encode_table_steps` writes as it is: the
    bytes :func:`encode_value` gave for it at depth 2, with the same ``max_depth`` (a
    snapshot row encoded once, when its object was made: :mod:`broker.ha.snapshot_rows`)."""

    data: bytes


#: How many :class:`Encoded` items weigh as much in a slice as one item encoded there.
ENCODED_WEIGHT = 32


def encode_value(value: object, *, depth: int, max_depth: int, what: str) -> bytes:
    """``value`` as a field value (its type byte first) at ``depth``, as the tables that
    hold it there write it; :class:`ValueError` as :func:`encode_table`'s."""
    return _Writer(max_depth, what).value(value, depth)


def encode_table(table: Mapping[Any, Any], *, max_depth: int, what: str) -> bytes:
    """``table`` as a field table (its u32 length first); :class:`ValueError` starting with
    ``what`` and naming what it cannot carry exactly (see the module docstring)."""
    return _Writer(max_depth, what).table(table, 0)


def encode_table_steps(
    table: Mapping[Any, Any], *, max_depth: int, what: str, size: int = SLICE
) -> Steps[bytes]:
    """:func:`encode_table` in slices (:mod:`common.slices`): the items of the table's
    top-level arrays (a snapshot's queues, exchanges, bindings) ``size`` a slice; the same
    bytes and the same errors. An :class:`Encoded` item is written as it is, and weighs
    :data:`ENCODED_WEIGHT` times less in a slice (its bytes are joined, not made)."""
    writer = _Writer(max_depth, what)
    parts = []
    full = size * ENCODED_WEIGHT
    for key, value in table.items():
        if not isinstance(value, list | tuple):
            parts.append(writer.table({key: value}, 0)[4:])
            continue
        if max_depth < 1:
            writer.value(value, 1)  # raises: nested too deep, as encode_table says
        parts.append(writer.table({key: None}, 0)[4:-1])  # the field name alone
        items = []
        weight = 0
        for item in value:
            if type(item) is Encoded:
                items.append(item.data)
                weight += 1
            else:
                items.append(writer.value(item, 2))
                weight += ENCODED_WEIGHT
            if weight >= full:
                weight = 0
                yield
        body = b"".join(items)
        parts.append(b"A" + _U32.pack(len(body)) + body)
    body = b"".join(parts)
    return _U32.pack(len(body)) + body


@dataclass(frozen=True, slots=True)
class _Writer:
    max_depth: int
    what: str

    def table(self, table: Mapping[Any, Any], depth: int) -> bytes:
        parts = []
        names = _FIELD_NAMES
        for key, value in table.items():
            name = names.get(key) if type(key) is str else None
            parts.append(self.field_name(key) if name is None else name)
            parts.append(self.value(value, depth + 1))
        body = b"".join(parts)
        return _U32.pack(len(body)) + body

    def field_name(self, key: object) -> bytes:
        """``key`` as a field name (its length, then its UTF-8), checked; remembered in
        :data:`_FIELD_NAMES` while it has room (a snapshot's 10,000 rows use the same
        seven)."""
        if not isinstance(key, str):
            raise ValueError(f"{self.what} key {key!r:.80} is not a str")
        try:
            raw = key.encode()
        except UnicodeEncodeError as err:
            raise ValueError(f"{self.what} key {key!r:.80} is not UTF-8: {err}") from None
        if len(raw) > MAX_KEY_BYTES:
            raise ValueError(
                f"{self.what} key {key[:40]!r}... is {len(raw)} bytes, more than {MAX_KEY_BYTES}"
            )
        name = bytes((len(raw),)) + raw
        if type(key) is str and len(_FIELD_NAMES) < _FIELD_NAMES_KEPT:
            _FIELD_NAMES[key] = name
        return name

    def value(self, value: object, depth: int) -> bytes:
        if depth > self.max_depth:
            raise ValueError(f"{self.what} nested more than {self.max_depth} deep")
        # the common kinds first (a snapshot's rows), without the Mapping ABC's isinstance
        if value is True or value is False:
            return b"t\x01" if value else b"t\x00"
        if isinstance(value, dict):
            return b"F" + self.table(value, depth)
        if isinstance(value, str):
            try:
                raw = value.encode()
            except UnicodeEncodeError as err:
                raise ValueError(f"{self.what} string {value!r:.80} is not UTF-8: {err}") from None
            return b"S" + _U32.pack(len(raw)) + raw
        if isinstance(value, bool):
            return b"t\x01" if value else b"t\x00"
        if isinstance(value, int):
            if not -(2**63) <= value < 2**63:
                raise ValueError(f"{self.what} integer {value} does not fit in 64 bits")
            return b"l" + _I64.pack(value)
        if value is None:
            return b"V"
        if isinstance(value, Mapping):
            return b"F" + self.table(value, depth)
        if isinstance(value, list | tuple):
            body = b"".join([self.value(item, depth + 1) for item in value])
            return b"A" + _U32.pack(len(body)) + body
        if isinstance(value, float):
            return b"d" + _F64.pack(value)
        if isinstance(value, bytearray):
            return b"x" + _U32.pack(len(value)) + bytes(value)
        if isinstance(value, bytes):  # pamqp's bytes: a long string that is not UTF-8
            return b"S" + _U32.pack(len(value)) + value
        if isinstance(value, decimal.Decimal):
            return b"D" + self.decimal(value)
        if isinstance(value, datetime.datetime):
            return b"T" + _U64.pack(self.timestamp(value))
        raise ValueError(f"{self.what} value of type {type(value).__name__} cannot be carried")

    def decimal(self, value: decimal.Decimal) -> bytes:
        if not value.is_finite():
            raise ValueError(f"{self.what} decimal {value} is not finite")
        sign, digits, exponent = value.as_tuple()
        assert isinstance(exponent, int)  # finite
        mantissa = int("".join(map(str, digits)) or "0")
        if exponent > 0:
            mantissa, exponent = mantissa * 10**exponent, 0
        if sign:
            mantissa = -mantissa
        if -exponent > 255 or not -(2**63) <= mantissa < 2**63:
            raise ValueError(
                f"{self.what} decimal {value} does not fit a scale of 0-255 and 64 bits"
            )
        return LOSSLESS_DECIMAL.pack(-exponent, mantissa)

    def timestamp(self, value: datetime.datetime) -> int:
        """The u64 that decodes to ``value``: whole seconds up to 2106, else milliseconds."""
        seconds = value.timestamp()
        if seconds >= 0 and seconds == int(seconds) and seconds <= _SECONDS_MAX:
            return int(seconds)
        millis = round(seconds * 1000)
        if not _SECONDS_MAX < millis < 2**64:
            raise ValueError(f"{self.what} timestamp {value.isoformat()} cannot be carried")
        return millis


# -- decoding ---------------------------------------------------------------------------
def decode_table(data: bytes | bytearray | memoryview, grammar: Grammar) -> dict[str, Any]:
    """The field table that is the whole of ``data``; :class:`ValueError` starting with the
    grammar's ``what`` and naming the problem otherwise."""
    if type(data) is not bytes:
        if not isinstance(data, bytearray | memoryview):
            raise ValueError(f"{grammar.what} must be bytes, not {type(data).__name__}")
        data = bytes(data)
    table, pos = read_table(data, 0, grammar)
    if pos != len(data):
        raise ValueError(f"{grammar.what}: {len(data) - pos} trailing bytes after the field table")
    return table


def decode_table_steps(
    data: bytes | bytearray | memoryview,
    grammar: Grammar,
    size: int = SLICE,
    seen: Callable[[str, Any], None] | None = None,
) -> Steps[dict[str, Any]]:
    """:func:`decode_table` in slices (:mod:`common.slices`): the items of the table's
    top-level arrays (a snapshot's queues, exchanges and bindings) ``size`` a slice; the
    same result and the same errors (a snapshot of 10,000 queues at once: 90 ms of CPU).
    ``seen(key, value)``, when given, is told each top-level value as it is decoded, in the
    table's order, and each item of a top-level array as ``(key, item)`` (the array's key):
    what the table holds so far, before the rest is read (a later error still fails it)."""
    if type(data) is not bytes:
        if not isinstance(data, bytearray | memoryview):
            raise ValueError(f"{grammar.what} must be bytes, not {type(data).__name__}")
        data = bytes(data)
    pos, stop = _length(data, 0, len(data), "field table", grammar)
    table: dict[str, Any] = {}
    decoded = 0
    while pos < stop:
        key, pos = _field_name(data, pos, stop, table, grammar)
        if pos >= stop or data[pos] != 0x41:  # not an array: at once
            table[key], pos = _value(data, pos, stop, 0, grammar)
            if seen is not None:
                seen(key, table[key])
            continue
        if grammar.max_depth < 1:
            raise _too_deep(grammar)
        pos, array_stop = _length(data, pos + 1, stop, "field array", grammar)
        items: list[Any] = []
        while pos < array_stop:
            item, pos = _value(data, pos, array_stop, 1, grammar)
            items.append(item)
            if seen is not None:
                seen(key, item)
            decoded += 1
            if decoded % size == 0:
                yield
        table[key] = items
    if pos != len(data):
        raise ValueError(f"{grammar.what}: {len(data) - pos} trailing bytes after the field table")
    return table


def read_table(data: bytes, pos: int, grammar: Grammar) -> tuple[dict[str, Any], int]:
    """The field table at ``pos`` of ``data`` (its u32 length first) and the position after
    it, for a table inside a larger record; :class:`ValueError` as :func:`decode_table`."""
    return _table(data, pos, len(data), 0, grammar)


def _length(data: bytes, pos: int, end: int, what: str, grammar: Grammar) -> tuple[int, int]:
    """A u32 length at ``pos`` and the end of the ``what`` it announces, checked against end."""
    if pos + 4 > end:
        raise ValueError(f"{grammar.what}: truncated {what} length at byte {pos}")
    stop = pos + 4 + _U32.unpack_from(data, pos)[0]
    if stop > end:
        raise ValueError(f"{grammar.what}: {what} at byte {pos} runs past its container")
    return pos + 4, stop


def _too_deep(grammar: Grammar) -> ValueError:
    return ValueError(f"{grammar.what}: tables/arrays nested more than {grammar.max_depth} deep")


def _table(
    data: bytes, pos: int, end: int, depth: int, grammar: Grammar
) -> tuple[dict[str, Any], int]:
    if depth > grammar.max_depth:
        raise _too_deep(grammar)
    pos, stop = _length(data, pos, end, "field table", grammar)
    table: dict[str, Any] = {}
    while pos < stop:
        key, key_stop = _field_name(data, pos, stop, table, grammar)
        table[key], pos = _value(data, key_stop, stop, depth, grammar)
    return table, pos


def _field_name(
    data: bytes, pos: int, stop: int, table: dict[str, Any], grammar: Grammar
) -> tuple[str, int]:
    """The field name at ``pos`` of a table ending at ``stop``, new in ``table``, and where
    its value starts."""
    key_stop = pos + 1 + data[pos]
    if key_stop > stop:
        raise ValueError(f"{grammar.what}: field name at byte {pos} runs past its table")
    try:
        key = data[pos + 1 : key_stop].decode()
    except UnicodeDecodeError:
        raise ValueError(f"{grammar.what}: field name at byte {pos} is not UTF-8") from None
    if key in table:
        raise ValueError(f"{grammar.what}: duplicate field {key!r}")
    return key, key_stop


def _array(data: bytes, pos: int, end: int, depth: int, grammar: Grammar) -> tuple[list[Any], int]:
    if depth > grammar.max_depth:
        raise _too_deep(grammar)
    pos, stop = _length(data, pos, end, "field array", grammar)
    items: list[Any] = []
    while pos < stop:
        item, pos = _value(data, pos, stop, depth, grammar)
        items.append(item)
    return items, pos


_FIXED: dict[int, struct.Struct] = {
    ord("b"): struct.Struct(">b"),
    ord("B"): struct.Struct(">B"),
    ord("s"): struct.Struct(">h"),
    ord("u"): struct.Struct(">H"),
    ord("I"): struct.Struct(">i"),
    ord("i"): struct.Struct(">I"),
    ord("l"): struct.Struct(">q"),
    ord("L"): struct.Struct(">q"),  # as pamqp reads it
    ord("f"): struct.Struct(">f"),
    ord("d"): struct.Struct(">d"),
}
_TIMESTAMP = struct.Struct(">Q")


def _value(data: bytes, pos: int, end: int, depth: int, grammar: Grammar) -> tuple[Any, int]:
    """One typed field value at ``pos``, which must end by ``end``: (value, next position)."""
    what = grammar.what
    if pos >= end:
        raise ValueError(f"{what}: missing field value at byte {pos}")
    kind = data[pos]
    pos += 1
    fixed = _FIXED.get(kind)
    if fixed is not None:
        if pos + fixed.size > end:
            raise ValueError(f"{what}: truncated {chr(kind)!r} value at byte {pos - 1}")
        return fixed.unpack_from(data, pos)[0], pos + fixed.size
    if kind == 0x53:  # 'S' long string
        start, stop = _length(data, pos, end, "string", grammar)
        try:
            return data[start:stop].decode(), stop
        except UnicodeDecodeError:
            if grammar.raw_strings:
                return data[start:stop], stop
            raise ValueError(f"{what}: string at byte {pos} is not UTF-8") from None
    if kind == 0x46:  # 'F' table
        return _table(data, pos, end, depth + 1, grammar)
    if kind == 0x41:  # 'A' array
        return _array(data, pos, end, depth + 1, grammar)
    if kind == 0x74:  # 't' boolean
        if pos >= end:
            raise ValueError(f"{what}: truncated boolean at byte {pos - 1}")
        return data[pos] != 0, pos + 1
    if kind in (0x56, 0x00):  # 'V' void (and NUL, seen in the wild)
        return None, pos
    if kind == 0x78:  # 'x' byte array
        start, stop = _length(data, pos, end, "byte array", grammar)
        return bytearray(data[start:stop]), stop
    if kind == 0x44:  # 'D' decimal
        layout = grammar.decimal
        if pos + layout.size > end:
            raise ValueError(f"{what}: truncated decimal at byte {pos - 1}")
        scale, mantissa = layout.unpack_from(data, pos)
        return decimal.Decimal(mantissa) * (decimal.Decimal(10) ** -scale), pos + layout.size
    if kind == 0x54:  # 'T' timestamp, seconds (or, past 2106, milliseconds, as pamqp reads it)
        if pos + 8 > end:
            raise ValueError(f"{what}: truncated timestamp at byte {pos - 1}")
        seconds: float = _TIMESTAMP.unpack_from(data, pos)[0]
        if seconds > 0xFFFFFFFF:
            seconds /= 1000.0
        try:
            return datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC), pos + 8
        except (OverflowError, OSError, ValueError):
            raise ValueError(f"{what}: timestamp out of range at byte {pos - 1}") from None
    raise ValueError(f"{what}: unknown field type {bytes([kind])!r} at byte {pos - 1}")
