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

The codec is the core's (:mod:`broker.core.field_table_codec`, the one the store's records
of store format 2 use too; no pamqp): a value it cannot carry exactly is a
:class:`ValueError` naming it, never a changed value. The replication contract's last word
is this codec's round trip (:func:`broker.ha.replication_contract.carried`).

No I/O; pure functions.
"""

from __future__ import annotations

from typing import Any

from broker.core.field_table_codec import (
    MAX_KEY_BYTES,
    encode_table,
    encode_table_steps,
    encode_value,
    lossless_grammar,
)
from broker.core.field_tables import MAX_DEPTH as AMQP_MAX_DEPTH
from broker.ha.wire_config import decode_event
from common.slices import SLICE, Steps

__all__ = [
    "ENVELOPE_LEVELS",
    "GRAMMAR",
    "MAX_DEPTH",
    "MAX_KEY_BYTES",
    "decode_config_event",
    "encode_config_event",
    "encode_config_steps",
    "encode_snapshot_row",
]

#: How deep an object's arguments sit in an event (snapshot -> list -> object -> arguments).
ENVELOPE_LEVELS = 3
#: Deepest nesting of tables and arrays in an event, the event itself at depth 0 (a value at
#: a deeper level is refused): arguments as deep as the AMQP codec accepts, in a snapshot.
MAX_DEPTH = AMQP_MAX_DEPTH + ENVELOPE_LEVELS
#: Format 2's decoder: the core's lossless grammar, as deep as a snapshot needs.
GRAMMAR = lossless_grammar(MAX_DEPTH, "config event")


def encode_config_event(event: dict[str, Any]) -> bytes:
    """One configuration event in format 2; :class:`ValueError` naming what it cannot carry.

    ``event`` must be a dict with a str ``"type"``; keys str of at most 255 bytes of UTF-8;
    values as the module docstring lists, nested at most :data:`MAX_DEPTH` deep."""
    if not isinstance(event, dict):
        raise ValueError(f"config event must be a dict, not {type(event).__name__}")
    if not isinstance(event.get("type"), str):
        raise ValueError(f"config event needs a str 'type', got {event.get('type')!r:.80}")
    return encode_table(event, max_depth=MAX_DEPTH, what="config event")


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
    return (
        yield from encode_table_steps(event, max_depth=MAX_DEPTH, what="config event", size=size)
    )


def encode_snapshot_row(row: dict[str, Any]) -> bytes:
    """One object of a snapshot's ``queues``, ``exchanges`` or ``bindings`` as
    :func:`encode_config_steps` writes it there (an item of a top-level array: depth 2),
    for a :class:`~broker.core.field_table_codec.Encoded` item of a later snapshot
    (:mod:`broker.ha.snapshot_rows`); :class:`ValueError` as the snapshot's encoding would
    raise it."""
    return encode_value(row, depth=2, max_depth=MAX_DEPTH, what="config event")
