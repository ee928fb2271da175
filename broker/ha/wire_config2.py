"""The HA configuration stream in replication format 2, primary -> backup (docs/ha-design.md,
"Format versions").

Format 1 (:mod:`broker.ha.wire_config`, release 0.1.0's wire) encodes with pamqp, which
writes floats in 32 bits and truncates long field names, and decodes at most 32 levels: it
cannot carry every field table a client may send. Format 2 carries **every field table the
AMQP codec accepts** (:mod:`broker.core.field_tables`), unchanged, wherever an event puts
it:

- the same layout as format 1 (one AMQP field table an event, a str ``"type"``), decoded by
  the same strict linear-time decoder (:func:`broker.ha.wire_config.decode_event`) with
  format 2's :data:`GRAMMAR`;
- nesting to :data:`MAX_DEPTH`: the AMQP codec's 64 levels plus the
  :data:`ENVELOPE_LEVELS` a snapshot puts around an object's arguments;
- field names of up to 255 bytes of UTF-8 (an AMQP short string, the codec's own limit);
- every value the AMQP decoder gives: bool ``t``, int ``l`` (64-bit signed: every AMQP
  integer fits), float ``d`` (64 bits), str ``S``, bytes ``S`` (a long string that is not
  UTF-8, as pamqp hands it over, comes back as bytes; bytes that are UTF-8 come back a str,
  as in format 1), bytearray ``x``, None ``V``,
  Decimal ``D`` (scale u8, mantissa i64: wider than AMQP's), datetime ``T`` (u64 seconds,
  or milliseconds when the value has a fraction of a second or lies past 2106: as pamqp
  reads it), dicts ``F`` and lists ``A``.

The encoder is our own (no pamqp): a value it cannot carry exactly is a
:class:`ValueError` naming it, never a changed value. The replication contract's last word
is this codec's round trip (:func:`broker.ha.replication_contract.carried`).

No I/O; pure functions.
"""

from __future__ import annotations

import datetime
import decimal
import struct
from typing import Any

from broker.core.field_tables import MAX_DEPTH as AMQP_MAX_DEPTH
from broker.ha.wire_config import Grammar, decode_event
from common.slices import SLICE, Steps

__all__ = [
    "ENVELOPE_LEVELS",
    "GRAMMAR",
    "MAX_DEPTH",
    "MAX_KEY_BYTES",
    "decode_config_event",
    "encode_config_event",
]

#: How deep an object's arguments sit in an event (snapshot -> list -> object -> arguments).
ENVELOPE_LEVELS = 3
#: Deepest nesting of tables and arrays in an event, the event itself at depth 0 (a value at
#: a deeper level is refused): arguments as deep as the AMQP codec accepts, in a snapshot.
MAX_DEPTH = AMQP_MAX_DEPTH + ENVELOPE_LEVELS
#: Longest field name in bytes of UTF-8: an AMQP short string.
MAX_KEY_BYTES = 255

_DECIMAL = struct.Struct(">Bq")
#: Format 2's decoder: format 1's, deeper, with pamqp's bytes for non-UTF-8 strings and
#: wider decimals.
GRAMMAR = Grammar(MAX_DEPTH, raw_strings=True, decimal=_DECIMAL)

_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_F64 = struct.Struct(">d")
_U64 = struct.Struct(">Q")
_SECONDS_MAX = 0xFFFFFFFF  # above it, a timestamp reads as milliseconds (pamqp's rule)


def encode_config_event(event: dict[str, Any]) -> bytes:
    """One configuration event in format 2; :class:`ValueError` naming what it cannot carry.

    ``event`` must be a dict with a str ``"type"``; keys str of at most 255 bytes of UTF-8;
    values as the module docstring lists, nested at most :data:`MAX_DEPTH` deep."""
    if not isinstance(event, dict):
        raise ValueError(f"config event must be a dict, not {type(event).__name__}")
    if not isinstance(event.get("type"), str):
        raise ValueError(f"config event needs a str 'type', got {event.get('type')!r:.80}")
    return _table(event, 0)


def decode_config_event(data: bytes | bytearray | memoryview) -> dict[str, Any]:
    """The format-2 configuration event in ``data``; :class:`ValueError` naming the problem."""
    return decode_event(data, GRAMMAR)


def encode_config_steps(event: dict[str, Any], size: int = SLICE) -> Steps[bytes]:
    """:func:`encode_config_event` in slices (:mod:`common.slices`): the items of the
    event's arrays (a snapshot's queues, exchanges, bindings) ``size`` a slice, the same
    bytes and errors (10,000 queues at once: 60 ms of CPU)."""
    if not isinstance(event, dict):
        raise ValueError(f"config event must be a dict, not {type(event).__name__}")
    if not isinstance(event.get("type"), str):
        raise ValueError(f"config event needs a str 'type', got {event.get('type')!r:.80}")
    parts = []
    for key, value in event.items():
        parts.append(_key(key))
        if not isinstance(value, list | tuple):
            parts.append(_value(value, 1))
            continue
        items = []
        for i, item in enumerate(value, 1):
            items.append(_value(item, 2))
            if i % size == 0:
                yield
        body = b"".join(items)
        parts.append(b"A" + _U32.pack(len(body)) + body)
    body = b"".join(parts)
    return _U32.pack(len(body)) + body


def _table(table: dict[Any, Any], depth: int) -> bytes:
    parts = []
    for key, value in table.items():
        parts.append(_key(key))
        parts.append(_value(value, depth + 1))
    body = b"".join(parts)
    return _U32.pack(len(body)) + body


def _key(key: object) -> bytes:
    """A field name: its length (one byte) and its UTF-8."""
    if not isinstance(key, str):
        raise ValueError(f"config event key {key!r:.80} is not a str")
    try:
        raw = key.encode()
    except UnicodeEncodeError as err:
        raise ValueError(f"config event key {key!r:.80} is not UTF-8: {err}") from None
    if len(raw) > MAX_KEY_BYTES:
        raise ValueError(
            f"config event key {key[:40]!r}... is {len(raw)} bytes, more than {MAX_KEY_BYTES}"
        )
    return bytes((len(raw),)) + raw


def _array(items: list[Any] | tuple[Any, ...], depth: int) -> bytes:
    body = b"".join([_value(item, depth + 1) for item in items])
    return _U32.pack(len(body)) + body


def _value(value: object, depth: int) -> bytes:
    if depth > MAX_DEPTH:
        raise ValueError(f"config event nested more than {MAX_DEPTH} deep")
    if isinstance(value, str):
        try:
            raw = value.encode()
        except UnicodeEncodeError as err:
            raise ValueError(f"config event string {value!r:.80} is not UTF-8: {err}") from None
        return b"S" + _U32.pack(len(raw)) + raw
    if isinstance(value, bool):
        return b"t\x01" if value else b"t\x00"
    if isinstance(value, int):
        if not -(2**63) <= value < 2**63:
            raise ValueError(f"config event integer {value} does not fit in 64 bits")
        return b"l" + _I64.pack(value)
    if value is None:
        return b"V"
    if isinstance(value, dict):
        return b"F" + _table(value, depth)
    if isinstance(value, list | tuple):
        return b"A" + _array(value, depth)
    if isinstance(value, float):
        return b"d" + _F64.pack(value)
    if isinstance(value, bytearray):
        return b"x" + _U32.pack(len(value)) + bytes(value)
    if isinstance(value, bytes):  # pamqp's bytes: a long string that is not UTF-8 (one that
        # is comes back a str, as format 1 brings it: the contract's round trip sees that)
        return b"S" + _U32.pack(len(value)) + value
    if isinstance(value, decimal.Decimal):
        return b"D" + _decimal(value)
    if isinstance(value, datetime.datetime):
        return b"T" + _U64.pack(_timestamp(value))
    raise ValueError(f"config event value of type {type(value).__name__} cannot be carried")


def _decimal(value: decimal.Decimal) -> bytes:
    if not value.is_finite():
        raise ValueError(f"config event decimal {value} is not finite")
    sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)  # finite
    mantissa = int("".join(map(str, digits)) or "0")
    if exponent > 0:
        mantissa, exponent = mantissa * 10**exponent, 0
    if sign:
        mantissa = -mantissa
    if -exponent > 255 or not -(2**63) <= mantissa < 2**63:
        raise ValueError(f"config event decimal {value} does not fit a scale of 0-255 and 64 bits")
    return _DECIMAL.pack(-exponent, mantissa)


def _timestamp(value: datetime.datetime) -> int:
    """The u64 that decodes to ``value``: whole seconds up to 2106, else milliseconds."""
    seconds = value.timestamp()
    if seconds >= 0 and seconds == int(seconds) and seconds <= _SECONDS_MAX:
        return int(seconds)
    millis = round(seconds * 1000)
    if not _SECONDS_MAX < millis < 2**64:
        raise ValueError(f"config event timestamp {value.isoformat()} cannot be carried")
    return millis
