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
5,000-queue snapshot, 150 s for 20,000) and is lenient. Ours (the core's,
:func:`broker.core.field_table_codec.decode_table`, with :data:`FORMAT_1`) is strict: a value
that overruns its table or array, a string that is not UTF-8 (pamqp would hand back bytes), a
duplicate field name, an unknown type, nesting deeper than 32, trailing bytes:
:class:`ValueError`.
pamqp encodes floats as 32-bit: keep config values to str, int, bool, None, lists and dicts.

No I/O here; both functions are pure functions of their arguments.
Import the public names from :mod:`broker.ha.wire`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from pamqp import encode as pamqp_encode

from broker.core.field_table_codec import Grammar, decode_table, decode_table_steps
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


#: Format 1's decoder: the core's strict decoder (:mod:`broker.core.field_table_codec`),
#: 32 levels, strings UTF-8 only, AMQP's decimals (scale u8, mantissa i32).
FORMAT_1 = Grammar(MAX_DEPTH, raw_strings=False, decimal=struct.Struct(">Bi"), what="config event")


def decode_event(data: bytes | bytearray | memoryview, grammar: Grammar) -> dict[str, Any]:
    """:func:`decode_config_event` by ``grammar``'s rules."""
    table = decode_table(data, grammar)
    kind = table.get("type")
    if not isinstance(kind, str):
        raise ValueError(f"config event has no str 'type' (got {kind!r:.80})")
    return table


def decode_event_steps(
    data: bytes | bytearray | memoryview,
    grammar: Grammar,
    size: int = SLICE,
    seen: Callable[[str, Any], None] | None = None,
) -> Steps[dict[str, Any]]:
    """:func:`decode_event` in slices (:mod:`common.slices`): the items of the event's
    arrays ``size`` a slice (:func:`broker.core.field_table_codec.decode_table_steps`); the
    same result and the same errors. ``seen``: told each field, and each item of an array
    field, as it is decoded (its ``seen``)."""
    table = yield from decode_table_steps(data, grammar, size, seen)
    kind = table.get("type")
    if not isinstance(kind, str):
        raise ValueError(f"config event has no str 'type' (got {kind!r:.80})")
    return table
