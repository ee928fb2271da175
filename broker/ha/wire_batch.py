"""Batch format of the HA per-queue streams, primary -> backup (docs/ha-design.md "Streams").

Contract
--------
**Per-queue stream** (consumer on ``qpid.ha-queue:<name>``). Each AMQP message body is one
*batch* of events, so the primary can pack many queue messages into one delivery:

* :class:`Enqueue` - a message put on the queue, with its replication id, the exchange and
  routing key it was published with, its raw AMQP basic-properties bytes (opaque here) and
  its body;
* :class:`Dequeue` - messages removed from the queue, as an :class:`~broker.ha.id_set.IdSet`;
* :class:`QueueCaughtUp` - the backup has reached the guard position: it is caught up on
  this queue;
* :class:`Tx` - the next ``count`` events are ENQUEUEs of transaction ``id``, which put
  ``total`` messages on the queues this stream's backup replicates (``docs/ha-design.md``,
  "Transactions": the backup stages them until all ``total`` have arrived);
* :class:`TxBase` - every transaction with an id of at least ``first`` that enqueues on this
  queue comes whole on this stream, preceded by :class:`Tx`; one committed earlier may not.
* :class:`Watermark` - the primary may deliver this queue's messages with ids up to
  ``position`` to consumers (``docs/ha-design.md``, "Redelivered after a fail-over"): a
  promoted backup sends those it holds marked redelivered.

Batch layout (all integers big-endian)::

    version         u8      1 (:data:`VERSION`), or 2 (:data:`VERSION_TX`) when the batch
                            holds a TX or TXBASE event: a broker that knows only version 1
                            refuses those batches whole rather than misread them
    events          until the end of the body, each one of
      ENQUEUE (1)   u8 type, i64 id (0..2**63-1), u8 exchange length, u8 routing-key length,
                    u32 properties length, u32 body length        (a 19-byte fixed header)
                    then exchange (UTF-8), routing key (UTF-8), properties, body
      DEQUEUE (2)   u8 type, u32 length, then that many bytes of IdSet.encode()
      CAUGHT_UP (3) u8 type
      TX (4)        u8 type, u64 transaction id, u32 total (1..), u32 count (1..total);
                    version 2 only; the next ``count`` events of the batch are ENQUEUEs
      TXBASE (5)    u8 type, u64 first transaction id; version 2 only
      WATERMARK (6) u8 type, i64 position (0..2**63-1); in batches of either version (a
                    broker that does not know it refuses the batch: unknown event type)

An empty batch (just the version byte) is legal. A primary that never committed a
transaction sends only version-1 batches, byte for byte as before version 2 existed.
Exchange names and routing keys are at most 255 bytes of UTF-8 (AMQP short strings); ids are
0..2**63-1; properties and bodies are less than 4 GiB. :func:`encode_batch` raises
:class:`ValueError` for a value out of those bounds (or a string that cannot be UTF-8
encoded) and :class:`TypeError` for a field or event of the wrong type. :func:`decode_batch`
raises only :class:`ValueError`, naming the problem and the event index and byte offset:
empty input, unknown version, unknown event type (a TX or TXBASE in a version-1 batch
included), a truncated event, an id out of range, invalid UTF-8, a malformed id set, a TX
not followed by its ``count`` ENQUEUEs or with a count out of 1..total (:func:`encode_batch`
refuses the last two with :class:`ValueError` as well). (Events run to the end of the body,
so stray bytes after the last event are reported as an unknown type or a truncation.)

This module holds the layout (its constants, the event types and the precise encoding errors
of :func:`diagnose`) and the whole-batch codec. The incremental encoders that build batches
from the same pieces, :class:`~broker.ha.wire_writers.BatchWriter` and
:class:`~broker.ha.wire_writers.EnqueuePacker`, live in :mod:`broker.ha.wire_writers`.
Import the public names from :mod:`broker.ha.wire`.

No I/O here; everything is a pure function of its arguments.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from broker.ha.id_set import MAX_ID, IdSet

try:
    from broker.ha import _batch as native_batch
except ImportError:  # no C compiler at install: decode_batch decodes every batch in Python
    native_batch = None  # type: ignore[assignment]

__all__ = [
    "CAUGHT_UP",
    "DEQUEUE",
    "ENQUEUE",
    "MAX_SHORT_STRING",
    "TX",
    "TXBASE",
    "VERSION",
    "VERSION_TX",
    "WATERMARK",
    "Dequeue",
    "Enqueue",
    "QueueCaughtUp",
    "StreamEvent",
    "Tx",
    "TxBase",
    "Watermark",
    "decode_batch",
    "encode_batch",
]

VERSION = 1
VERSION_TX = 2
ENQUEUE = 1
DEQUEUE = 2
CAUGHT_UP = 3
TX = 4
TXBASE = 5
WATERMARK = 6

# The layout's fixed pieces, shared with broker.ha.wire_writers (not part of the public API).
VERSION_BYTE = bytes([VERSION])
VERSION_TX_BYTE = bytes([VERSION_TX])
TX_HEADER = struct.Struct(">BQII")  # type, transaction id, total, count
TX_HEADER_SIZE = TX_HEADER.size  # 17
TXBASE_HEADER = struct.Struct(">BQ")  # type, first transaction id
CAUGHT_UP_BYTE = bytes([CAUGHT_UP])
WATERMARK_HEADER = struct.Struct(">Bq")  # type, position
ENQUEUE_HEADER = struct.Struct(">BqBBII")  # type, id, exchange, routing key, props, body
ENQUEUE_HEADER_SIZE = ENQUEUE_HEADER.size  # 19
DEQUEUE_HEADER = struct.Struct(">BI")  # type, id-set length

_ENQUEUE_REST = struct.Struct(">qBBII")  # the same header after the type byte
_U32 = struct.Struct(">I")
#: Longest exchange name or routing key of an ENQUEUE, in bytes of UTF-8 (a short string).
MAX_SHORT_STRING = 255
_MAX_LONG = 2**32 - 1


@dataclass(frozen=True, slots=True, repr=False)
class Enqueue:
    """A message enqueued on the primary's queue, to be appended on the backup's."""

    id: int
    exchange: str
    routing_key: str
    properties: bytes  # raw AMQP basic properties, opaque here
    body: bytes

    def __repr__(self) -> str:
        return (
            f"Enqueue(id={self.id!r}, exchange={self.exchange!r}, "
            f"routing_key={self.routing_key!r}, properties=<{len(self.properties)} bytes>, "
            f"body=<{len(self.body)} bytes>)"
        )


@dataclass(frozen=True, slots=True)
class Dequeue:
    """Messages removed from the primary's queue, by replication id."""

    ids: IdSet


@dataclass(frozen=True, slots=True)
class QueueCaughtUp:
    """The backup is caught up on this queue (it reached the guard position)."""


@dataclass(frozen=True, slots=True)
class Tx:
    """The next ``count`` events are ENQUEUEs of transaction ``id`` of ``total`` messages."""

    id: int
    total: int
    count: int


@dataclass(frozen=True, slots=True)
class TxBase:
    """Transactions from id ``first`` on come whole on this stream (the subscription's start)."""

    first: int


@dataclass(frozen=True, slots=True)
class Watermark:
    """The primary may deliver messages with ids up to ``position`` (its delivery watermark)."""

    position: int


StreamEvent = Enqueue | Dequeue | QueueCaughtUp | Tx | TxBase | Watermark

# The slot descriptors and their setters, for decode_batch's fast construction of Enqueue.
_ENQUEUE_SLOTS = tuple(
    getattr(Enqueue, name) for name in ("id", "exchange", "routing_key", "properties", "body")
)
_ENQUEUE_SETTERS = tuple(slot.__set__ for slot in _ENQUEUE_SLOTS)


# -- encoding ------------------------------------------------------------------------------


def encode_batch(events: Sequence[StreamEvent]) -> bytes:
    """One batch body holding ``events`` in order (see the module docstring for the layout)."""
    parts: list[bytes] = [VERSION_BYTE]
    append = parts.append
    pack = ENQUEUE_HEADER.pack
    index = 0
    event: object = None
    try:
        for index, event in enumerate(events):  # noqa: B007 - read by the error path
            if type(event) is Enqueue:
                id_ = event.id
                exchange = event.exchange.encode()
                routing_key = event.routing_key.encode()
                properties = event.properties
                body = event.body
                if id_ < 0 or type(properties) is not bytes or type(body) is not bytes:
                    raise TypeError  # the error path finds out which
                append(
                    pack(
                        ENQUEUE,
                        id_,
                        len(exchange),
                        len(routing_key),
                        len(properties),
                        len(body),
                    )
                )
                append(exchange)
                append(routing_key)
                append(properties)
                append(body)
            elif type(event) is Dequeue:
                encoded = event.ids.encode()
                append(DEQUEUE_HEADER.pack(DEQUEUE, len(encoded)))
                append(encoded)
            elif type(event) is QueueCaughtUp:
                append(CAUGHT_UP_BYTE)
            elif type(event) is Tx:
                if not 1 <= event.count <= event.total:
                    raise ValueError
                append(TX_HEADER.pack(TX, event.id, event.total, event.count))
                parts[0] = VERSION_TX_BYTE
            elif type(event) is TxBase:
                append(TXBASE_HEADER.pack(TXBASE, event.first))
                parts[0] = VERSION_TX_BYTE
            elif type(event) is Watermark:
                if event.position < 0:
                    raise ValueError
                append(WATERMARK_HEADER.pack(WATERMARK, event.position))
            else:
                raise TypeError
    except (struct.error, TypeError, AttributeError, UnicodeEncodeError, ValueError):
        raise diagnose(f"event {index}", event) from None
    if parts[0] is VERSION_TX_BYTE:
        problem = check_tx_runs(events)
        if problem is not None:
            raise ValueError(f"replication batch: {problem}")
    return b"".join(parts)


def check_tx_runs(events: Sequence[object]) -> str | None:
    """What is wrong with the TX events of ``events`` (each followed by its ``count``
    ENQUEUEs), or None. Run only on batches that hold a TX: off the hot path."""
    left = 0
    for index, event in enumerate(events):
        if left:
            if type(event) is not Enqueue:
                return f"event {index}: TX expects {left} more ENQUEUE event(s), not {event!r:.80}"
            left -= 1
        elif type(event) is Tx:
            left = event.count
    if left:
        return f"TX expects {left} more ENQUEUE event(s) at the end of the batch"
    return None


def diagnose(where: str, event: object) -> Exception:
    """The precise error for an event the fast path could not encode (slow, error path only)."""
    if isinstance(event, Dequeue):
        if not isinstance(event.ids, IdSet):
            return TypeError(f"{where}: Dequeue.ids must be an IdSet, not {type(event.ids)}")
        return ValueError(f"{where}: id set too large to encode")
    if isinstance(event, Tx | TxBase):
        return _diagnose_tx(where, event)
    if isinstance(event, Watermark):
        if type(event.position) is not int:
            return TypeError(
                f"{where}: Watermark.position must be an int, not {type(event.position).__name__}"
            )
        return ValueError(f"{where}: Watermark.position {event.position} out of range 0..{MAX_ID}")
    if not isinstance(event, Enqueue):
        return TypeError(
            f"{where}: not an Enqueue, Dequeue, QueueCaughtUp, Tx, TxBase or Watermark event:"
            f" {event!r:.80}"
        )
    if type(event.id) is not int:
        return TypeError(f"{where}: Enqueue.id must be an int, not {type(event.id).__name__}")
    if not 0 <= event.id <= MAX_ID:
        return ValueError(f"{where}: Enqueue.id {event.id} out of range 0..{MAX_ID}")
    for name in ("exchange", "routing_key"):
        value = getattr(event, name)
        if not isinstance(value, str):
            return TypeError(f"{where}: Enqueue.{name} must be a str, not {type(value).__name__}")
        try:
            size = len(value.encode())
        except UnicodeEncodeError as err:
            return ValueError(f"{where}: Enqueue.{name} is not encodable as UTF-8: {err}")
        if size > MAX_SHORT_STRING:
            return ValueError(
                f"{where}: Enqueue.{name} is {size} bytes of UTF-8, more than {MAX_SHORT_STRING}"
            )
    for name in ("properties", "body"):
        value = getattr(event, name)
        if type(value) is not bytes:
            return TypeError(f"{where}: Enqueue.{name} must be bytes, not {type(value).__name__}")
        if len(value) > _MAX_LONG:
            return ValueError(f"{where}: Enqueue.{name} is {len(value)} bytes, 4 GiB or more")
    return ValueError(f"{where}: cannot encode {event!r:.200}")  # pragma: no cover


def _diagnose_tx(where: str, event: Tx | TxBase) -> Exception:
    fields = ("id", "total", "count") if isinstance(event, Tx) else ("first",)
    bounds = {"id": 2**64 - 1, "first": 2**64 - 1, "total": _MAX_LONG, "count": _MAX_LONG}
    name = type(event).__name__
    for field in fields:
        value = getattr(event, field)
        if type(value) is not int:
            return TypeError(f"{where}: {name}.{field} must be an int, not {type(value).__name__}")
        if not 0 <= value <= bounds[field]:
            return ValueError(f"{where}: {name}.{field} {value} out of range 0..{bounds[field]}")
    if isinstance(event, Tx) and not 1 <= event.count <= event.total:
        return ValueError(f"{where}: Tx.count {event.count} out of range 1..{event.total} (total)")
    return ValueError(f"{where}: cannot encode {event!r:.200}")  # pragma: no cover


# -- decoding ------------------------------------------------------------------------------


def decode_batch(data: bytes | bytearray | memoryview) -> list[StreamEvent]:
    """The events of one batch body; :class:`ValueError` naming the problem if malformed.

    A batch of version 1 holding only ENQUEUE, DEQUEUE, CAUGHT_UP and WATERMARK events (what
    a backup reads for every message) is decoded natively where broker/ha/_batch.c is
    built: the same objects, shared as here. Any other batch, and any malformed one, is
    decoded here, which names the problem."""
    if type(data) is bytes and native_batch is not None:
        events: list[StreamEvent] | None = native_batch.decode_simple(
            data, Enqueue, _ENQUEUE_SLOTS, Dequeue, IdSet.decode, QueueCaughtUp, Watermark
        )
        if events is not None:
            return events
    return _decode_batch(data)


def _decode_batch(data: bytes | bytearray | memoryview) -> list[StreamEvent]:
    """:func:`decode_batch` in Python: the reference the native decoder is held to, and the
    decoder of every batch it does not take."""
    if type(data) is not bytes:
        if not isinstance(data, bytearray | memoryview):
            raise ValueError(f"batch must be bytes, not {type(data).__name__}")
        data = bytes(data)
    end = len(data)
    if end == 0:
        raise ValueError("empty batch: no version byte")
    version = data[0]
    if version != VERSION and version != VERSION_TX:
        raise ValueError(
            f"unsupported batch version {version} (expected {VERSION} or {VERSION_TX})"
        )
    events: list[StreamEvent] = []
    append = events.append
    unpack = _ENQUEUE_REST.unpack_from
    new = object.__new__
    set_id, set_exchange, set_routing_key, set_properties, set_body = _ENQUEUE_SETTERS
    starts = data.startswith
    # A queue's messages mostly share exchange, routing key and properties: when the bytes
    # equal the previous event's (compared in place), its str and bytes objects are reused
    # rather than made again, which saves time and, on a backup, memory per message held.
    route = properties = b""
    exchange = routing_key = ""
    route_lengths = (-1, -1)
    pos = 1
    try:
        while pos < end:
            kind = data[pos]
            if kind == ENQUEUE:
                start = pos + ENQUEUE_HEADER_SIZE
                if start > end:
                    raise ValueError(_where(events, pos, "truncated enqueue header"))
                id_, exchange_len, key_len, properties_len, body_len = unpack(data, pos + 1)
                key_start = start + exchange_len
                properties_start = key_start + key_len
                body_start = properties_start + properties_len
                next_pos = body_start + body_len
                if next_pos > end:
                    raise ValueError(
                        _where(
                            events,
                            pos,
                            f"truncated enqueue: needs {next_pos - pos} bytes, {end - pos} left",
                        )
                    )
                if id_ < 0:
                    raise ValueError(_where(events, pos, f"enqueue id {id_ + 2**64} > {MAX_ID}"))
                # Enqueue(...) without the frozen __init__'s object.__setattr__ calls: 2x faster.
                if (exchange_len, key_len) != route_lengths or not starts(route, start):
                    exchange = data[start:key_start].decode()
                    routing_key = data[key_start:properties_start].decode()
                    route = data[start:properties_start]
                    route_lengths = (exchange_len, key_len)
                if properties_len != len(properties) or not starts(properties, properties_start):
                    properties = data[properties_start:body_start]
                event = new(Enqueue)
                set_id(event, id_)
                set_exchange(event, exchange)
                set_routing_key(event, routing_key)
                set_properties(event, properties)
                set_body(event, data[body_start:next_pos])
                append(event)
                pos = next_pos
            elif kind == DEQUEUE:
                start = pos + 5
                if start > end:
                    raise ValueError(_where(events, pos, "truncated dequeue header"))
                next_pos = start + _U32.unpack_from(data, pos + 1)[0]
                if next_pos > end:
                    raise ValueError(
                        _where(
                            events,
                            pos,
                            f"truncated dequeue: needs {next_pos - pos} bytes, {end - pos} left",
                        )
                    )
                try:
                    ids = IdSet.decode(data[start:next_pos])
                except ValueError as err:
                    raise ValueError(_where(events, pos, f"dequeue: {err}")) from None
                append(Dequeue(ids))
                pos = next_pos
            elif kind == CAUGHT_UP:
                append(QueueCaughtUp())
                pos += 1
            elif kind == TX and version == VERSION_TX:
                if pos + TX_HEADER_SIZE > end:
                    raise ValueError(_where(events, pos, "truncated tx header"))
                _, tx_id, total, count = TX_HEADER.unpack_from(data, pos)
                if not 1 <= count <= total:
                    raise ValueError(_where(events, pos, f"tx count {count} not in 1..{total}"))
                append(Tx(tx_id, total, count))
                pos += TX_HEADER_SIZE
            elif kind == WATERMARK:
                if pos + WATERMARK_HEADER.size > end:
                    raise ValueError(_where(events, pos, "truncated watermark"))
                position = WATERMARK_HEADER.unpack_from(data, pos)[1]
                if position < 0:
                    raise ValueError(
                        _where(events, pos, f"watermark {position + 2**64} > {MAX_ID}")
                    )
                append(Watermark(position))
                pos += WATERMARK_HEADER.size
            elif kind == TXBASE and version == VERSION_TX:
                if pos + TXBASE_HEADER.size > end:
                    raise ValueError(_where(events, pos, "truncated txbase"))
                append(TxBase(TXBASE_HEADER.unpack_from(data, pos)[1]))
                pos += TXBASE_HEADER.size
            else:
                raise ValueError(_where(events, pos, f"unknown event type {kind}"))
    except UnicodeDecodeError as err:
        raise ValueError(
            _where(events, pos, f"enqueue exchange or routing key is not valid UTF-8: {err}")
        ) from None
    if version == VERSION_TX:
        problem = check_tx_runs(events)
        if problem is not None:
            raise ValueError(f"replication batch: {problem}")
    return events


def _where(events: list[StreamEvent], pos: int, problem: str) -> str:
    return f"replication batch: event {len(events)} at byte {pos}: {problem}"
