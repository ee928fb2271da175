"""Format of the HA configuration stream in replication format 1, primary -> backup
(docs/ha-design.md "Streams"; format 2's encoder is :mod:`broker.ha.wire_config2`, which
decodes with this module's decoder and its own :class:`Grammar`).

Contract
--------
**Configuration stream** (consumer on ``qpid.ha-config``): each body is one event as an AMQP
field table, in pamqp's encoding (:func:`pamqp.encode.field_table`), with a str ``"type"``
key (``snapshot``, ``queue-declared``, ...). :func:`encode_config_event` encodes with pamqp.
:func:`decode_config_event` parses the same format with a linear-time decoder of its own,
giving the values :func:`pamqp.decode.field_table` gives for every well-formed table, because
pamqp's decoder copies the rest of the buffer for every value (quadratic: 12 s for a
5,000-queue snapshot, 150 s for 20,000) and is lenient. Ours is strict: a value that overruns
its table or array, a string that is not UTF-8 (pamqp would hand back bytes), a duplicate
field name, an unknown type, nesting deeper than 32, trailing bytes: :class:`ValueError`.
pamqp encodes floats as 32-bit: keep config values to str, int, bool, None, lists and dicts.

No I/O here; both functions are pure functions of their arguments.
Import the public names from :mod:`broker.ha.wire`.
"""

from __future__ import annotations

import datetime
import decimal
import struct
from dataclasses import dataclass
from typing import Any

from pamqp import encode as pamqp_encode

from common.slices import SLICE, Steps

__all__ = [
    "FORMAT_1",
    "MAX_DEPTH",
    "MAX_KEY_BYTES",
    "Grammar",
    "decode_config_event",
    "decode_event",
    "decode_event_steps",
    "encode_config_event",
    "encode_config_steps",
]

_U32 = struct.Struct(">I")
#: Longest field name, in bytes of UTF-8 (pamqp truncates longer ones; we refuse them).
MAX_KEY_BYTES = 128
#: Deepest nesting of tables and arrays in an event, the event itself at depth 0 (a value
#: at a deeper level, scalar or not, is refused).
MAX_DEPTH = 32


def encode_config_event(event: dict[str, Any]) -> bytes:
    """One configuration event as a pamqp field table; :class:`ValueError` if not encodable.

    ``event`` must be a dict with a str ``"type"``; keys must be str of at most 128 bytes of
    UTF-8; values str, int (64-bit signed), bool, None, float (sent as 32-bit), Decimal,
    datetime, bytearray, or lists and dicts of those, nested at most 32 deep.
    """
    if not isinstance(event, dict):
        raise ValueError(f"config event must be a dict, not {type(event).__name__}")
    if not isinstance(event.get("type"), str):
        raise ValueError(f"config event needs a str 'type', got {event.get('type')!r:.80}")
    _check_encodable(event, 0)
    try:
        return pamqp_encode.field_table(event)
    except (TypeError, ValueError, OverflowError, struct.error) as err:
        raise ValueError(f"config event {event['type']!r} not encodable: {err}") from None


def encode_config_steps(event: dict[str, Any], size: int = SLICE) -> Steps[bytes]:
    """:func:`encode_config_event` in slices (:mod:`common.slices`): the items of the
    event's arrays (a snapshot's queues, exchanges, bindings) checked and encoded ``size``
    a slice; the same bytes (pamqp's, key by key) and a :class:`ValueError` where it fails."""
    if not isinstance(event, dict):
        raise ValueError(f"config event must be a dict, not {type(event).__name__}")
    if not isinstance(event.get("type"), str):
        raise ValueError(f"config event needs a str 'type', got {event.get('type')!r:.80}")
    _check_encodable({key: None for key in event}, 0)  # the field names
    data = []
    try:
        for key, item in sorted(event.items()):
            data.append(pamqp_encode.short_string(key))
            if not isinstance(item, list):
                _check_encodable(item, 1)
                data.append(_table_value(key, item))
                continue
            items = []
            for i, element in enumerate(item, 1):
                _check_encodable(element, 2)
                items.append(_table_value(key, element))
                if i % size == 0:
                    yield
            body = b"".join(items)
            data.append(b"A" + _U32.pack(len(body)) + body)
    except (TypeError, ValueError, OverflowError, struct.error) as err:
        if isinstance(err, ValueError) and str(err).startswith("config event"):
            raise
        raise ValueError(f"config event {event['type']!r} not encodable: {err}") from None
    body = b"".join(data)
    return _U32.pack(len(body)) + body


def _table_value(key: str, value: object) -> bytes:
    """pamqp's encoding of one value of field ``key`` (its error names the key, as
    :func:`pamqp.encode.field_table`'s does)."""
    try:
        return pamqp_encode.encode_table_value(value)  # type: ignore[arg-type]
    except TypeError as err:
        raise TypeError(f"{key} error: {err}") from err


def _check_encodable(value: object, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise ValueError(f"config event nested more than {MAX_DEPTH} deep")
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"config event key {key!r:.80} is not a str")
            try:
                size = len(key.encode())
            except UnicodeEncodeError as err:
                raise ValueError(f"config event key {key!r:.80} is not UTF-8: {err}") from None
            if size > MAX_KEY_BYTES:
                raise ValueError(
                    f"config event key {key[:40]!r}... is {size} bytes, more than {MAX_KEY_BYTES}"
                )
            _check_encodable(item, depth + 1)
    elif isinstance(value, list):
        for item in value:
            _check_encodable(item, depth + 1)
    elif isinstance(value, str):
        try:
            value.encode()
        except UnicodeEncodeError as err:
            raise ValueError(f"config event string {value!r:.80} is not UTF-8: {err}") from None


def decode_config_event(data: bytes | bytearray | memoryview) -> dict[str, Any]:
    """The configuration event in ``data``; :class:`ValueError` naming the problem otherwise.

    The whole of ``data`` must be one field table and it must have a str ``"type"``.
    """
    return decode_event(data, FORMAT_1)


@dataclass(frozen=True)
class Grammar:
    """What a configuration event's decoder accepts (one per replication format: format
    2's is in :mod:`broker.ha.wire_config2`)."""

    #: Deepest table or array, the event itself at depth 0.
    max_depth: int
    #: A long string that is not UTF-8 decodes as bytes (as pamqp does) instead of failing.
    raw_strings: bool
    #: The layout of a decimal after its ``D``: scale (u8), then the mantissa.
    decimal: struct.Struct


FORMAT_1 = Grammar(MAX_DEPTH, raw_strings=False, decimal=struct.Struct(">Bi"))


def decode_event(data: bytes | bytearray | memoryview, grammar: Grammar) -> dict[str, Any]:
    """:func:`decode_config_event` by ``grammar``'s rules."""
    if type(data) is not bytes:
        if not isinstance(data, bytearray | memoryview):
            raise ValueError(f"config event must be bytes, not {type(data).__name__}")
        data = bytes(data)
    table, pos = _table(data, 0, len(data), 0, grammar)
    if pos != len(data):
        raise ValueError(f"config event: {len(data) - pos} trailing bytes after the field table")
    kind = table.get("type")
    if not isinstance(kind, str):
        raise ValueError(f"config event has no str 'type' (got {kind!r:.80})")
    return table


def _length(data: bytes, pos: int, end: int, what: str) -> tuple[int, int]:
    """A u32 length at ``pos`` and the end of the ``what`` it announces, checked against end."""
    if pos + 4 > end:
        raise ValueError(f"config event: truncated {what} length at byte {pos}")
    stop = pos + 4 + _U32.unpack_from(data, pos)[0]
    if stop > end:
        raise ValueError(f"config event: {what} at byte {pos} runs past its container")
    return pos + 4, stop


def _table(
    data: bytes, pos: int, end: int, depth: int, grammar: Grammar
) -> tuple[dict[str, Any], int]:
    if depth > grammar.max_depth:
        raise ValueError(f"config event: tables/arrays nested more than {grammar.max_depth} deep")
    pos, stop = _length(data, pos, end, "field table")
    table: dict[str, Any] = {}
    while pos < stop:
        key, key_stop = _field_name(data, pos, stop, table)
        table[key], pos = _value(data, key_stop, stop, depth, grammar)
    return table, pos


def _field_name(data: bytes, pos: int, stop: int, table: dict[str, Any]) -> tuple[str, int]:
    """The field name at ``pos`` of a table ending at ``stop``, new in ``table``, and where
    its value starts."""
    key_stop = pos + 1 + data[pos]
    if key_stop > stop:
        raise ValueError(f"config event: field name at byte {pos} runs past its table")
    try:
        key = data[pos + 1 : key_stop].decode()
    except UnicodeDecodeError:
        raise ValueError(f"config event: field name at byte {pos} is not UTF-8") from None
    if key in table:
        raise ValueError(f"config event: duplicate field {key!r}")
    return key, key_stop


def decode_event_steps(
    data: bytes | bytearray | memoryview, grammar: Grammar, size: int = SLICE
) -> Steps[dict[str, Any]]:
    """:func:`decode_event` in slices (:mod:`common.slices`): the items of the event's
    arrays (a snapshot's queues, exchanges and bindings) ``size`` a slice; the same result
    and the same errors. A snapshot of 10,000 queues at once was 90 ms of CPU."""
    if type(data) is not bytes:
        if not isinstance(data, bytearray | memoryview):
            raise ValueError(f"config event must be bytes, not {type(data).__name__}")
        data = bytes(data)
    pos, stop = _length(data, 0, len(data), "field table")
    table: dict[str, Any] = {}
    decoded = 0
    while pos < stop:
        key, pos = _field_name(data, pos, stop, table)
        if pos >= stop or data[pos] != 0x41:  # not an array: at once
            table[key], pos = _value(data, pos, stop, 0, grammar)
            continue
        if grammar.max_depth < 1:
            raise ValueError(
                f"config event: tables/arrays nested more than {grammar.max_depth} deep"
            )
        pos, array_stop = _length(data, pos + 1, stop, "field array")
        items: list[Any] = []
        while pos < array_stop:
            item, pos = _value(data, pos, array_stop, 1, grammar)
            items.append(item)
            decoded += 1
            if decoded % size == 0:
                yield
        table[key] = items
    if pos != len(data):
        raise ValueError(f"config event: {len(data) - pos} trailing bytes after the field table")
    kind = table.get("type")
    if not isinstance(kind, str):
        raise ValueError(f"config event has no str 'type' (got {kind!r:.80})")
    return table


def _array(data: bytes, pos: int, end: int, depth: int, grammar: Grammar) -> tuple[list[Any], int]:
    if depth > grammar.max_depth:
        raise ValueError(f"config event: tables/arrays nested more than {grammar.max_depth} deep")
    pos, stop = _length(data, pos, end, "field array")
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
    if pos >= end:
        raise ValueError(f"config event: missing field value at byte {pos}")
    kind = data[pos]
    pos += 1
    fixed = _FIXED.get(kind)
    if fixed is not None:
        if pos + fixed.size > end:
            raise ValueError(f"config event: truncated {chr(kind)!r} value at byte {pos - 1}")
        return fixed.unpack_from(data, pos)[0], pos + fixed.size
    if kind == 0x53:  # 'S' long string
        start, stop = _length(data, pos, end, "string")
        try:
            return data[start:stop].decode(), stop
        except UnicodeDecodeError:
            if grammar.raw_strings:
                return data[start:stop], stop
            raise ValueError(f"config event: string at byte {pos} is not UTF-8") from None
    if kind == 0x46:  # 'F' table
        return _table(data, pos, end, depth + 1, grammar)
    if kind == 0x41:  # 'A' array
        return _array(data, pos, end, depth + 1, grammar)
    if kind == 0x74:  # 't' boolean
        if pos >= end:
            raise ValueError(f"config event: truncated boolean at byte {pos - 1}")
        return data[pos] != 0, pos + 1
    if kind in (0x56, 0x00):  # 'V' void (and NUL, seen in the wild)
        return None, pos
    if kind == 0x78:  # 'x' byte array
        start, stop = _length(data, pos, end, "byte array")
        return bytearray(data[start:stop]), stop
    if kind == 0x44:  # 'D' decimal
        layout = grammar.decimal
        if pos + layout.size > end:
            raise ValueError(f"config event: truncated decimal at byte {pos - 1}")
        scale, mantissa = layout.unpack_from(data, pos)
        return decimal.Decimal(mantissa) * (decimal.Decimal(10) ** -scale), pos + layout.size
    if kind == 0x54:  # 'T' timestamp, seconds (or, past 2106, milliseconds, as pamqp reads it)
        if pos + 8 > end:
            raise ValueError(f"config event: truncated timestamp at byte {pos - 1}")
        seconds: float = _TIMESTAMP.unpack_from(data, pos)[0]
        if seconds > 0xFFFFFFFF:
            seconds /= 1000.0
        try:
            return datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC), pos + 8
        except (OverflowError, OSError, ValueError):
            raise ValueError(f"config event: timestamp out of range at byte {pos - 1}") from None
    raise ValueError(f"config event: unknown field type {bytes([kind])!r} at byte {pos - 1}")
