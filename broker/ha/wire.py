"""Body formats of the HA replication streams, primary -> backup (docs/ha-design.md "Streams").

Contract
--------
**Per-queue stream** (consumer on ``qpid.ha-queue:<name>``). Each AMQP message body is one
*batch* of events, so the primary can pack many queue messages into one delivery:

* :class:`Enqueue` - a message put on the queue, with its replication id, the exchange and
  routing key it was published with, its raw AMQP basic-properties bytes (opaque here) and
  its body;
* :class:`Dequeue` - messages removed from the queue, as an :class:`~broker.ha.id_set.IdSet`;
* :class:`Ready` - the backup has reached the guard position: it is caught up on this queue.

Batch layout (all integers big-endian)::

    version         u8      1 (:data:`VERSION`)
    events          until the end of the body, each one of
      ENQUEUE (1)   u8 type, i64 id (0..2**63-1), u8 exchange length, u8 routing-key length,
                    u32 properties length, u32 body length        (a 19-byte fixed header)
                    then exchange (UTF-8), routing key (UTF-8), properties, body
      DEQUEUE (2)   u8 type, u32 length, then that many bytes of IdSet.encode()
      READY (3)     u8 type

An empty batch (just the version byte) is legal. Exchange names and routing keys are at most
255 bytes of UTF-8 (AMQP short strings); ids are 0..2**63-1; properties and bodies are less
than 4 GiB. :func:`encode_batch` raises :class:`ValueError` for a value out of those bounds
(or a string that cannot be UTF-8 encoded) and :class:`TypeError` for a field or event of the
wrong type. :func:`decode_batch` raises only :class:`ValueError`, naming the problem and the
event index and byte offset: empty input, unknown version, unknown event type, a truncated
event, an id out of range, invalid UTF-8, a malformed id set. (Events run to the end of the
body, so stray bytes after the last event are reported as an unknown type or a truncation.)

:class:`BatchWriter` packs events into batches under a byte budget and an event count.
:class:`EnqueuePacker` encodes ENQUEUE events straight from a message's fields, with no
:class:`Enqueue` object in between: the primary's side of catch-up.

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

No I/O here; everything is a pure function of its arguments except :class:`BatchWriter` and
:class:`EnqueuePacker`.
"""

from __future__ import annotations

import datetime
import decimal
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pamqp import encode as pamqp_encode

from broker.ha.id_set import MAX_ID, IdSet

__all__ = [
    "DEQUEUE",
    "ENQUEUE",
    "READY",
    "VERSION",
    "BatchWriter",
    "Dequeue",
    "Enqueue",
    "EnqueuePacker",
    "Event",
    "Ready",
    "decode_batch",
    "decode_config_event",
    "encode_batch",
    "encode_config_event",
]

VERSION = 1
ENQUEUE = 1
DEQUEUE = 2
READY = 3

_VERSION_BYTE = bytes([VERSION])
_READY_BYTE = bytes([READY])
_ENQUEUE_HEADER = struct.Struct(">BqBBII")  # type, id, exchange, routing key, props, body
_ENQUEUE_REST = struct.Struct(">qBBII")  # the same header after the type byte
_ENQUEUE_HEADER_SIZE = _ENQUEUE_HEADER.size  # 19
_DEQUEUE_HEADER = struct.Struct(">BI")  # type, id-set length
_U32 = struct.Struct(">I")
_MAX_SHORT = 255
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
class Ready:
    """The backup is caught up on this queue (it reached the guard position)."""


Event = Enqueue | Dequeue | Ready

# The slot descriptors' setters, for decode_batch's fast construction of Enqueue.
_ENQUEUE_SETTERS = tuple(
    getattr(Enqueue, name).__set__
    for name in ("id", "exchange", "routing_key", "properties", "body")
)


# -- per-queue stream: encoding ------------------------------------------------------------


def encode_batch(events: Sequence[Event]) -> bytes:
    """One batch body holding ``events`` in order (see the module docstring for the layout)."""
    parts: list[bytes] = [_VERSION_BYTE]
    append = parts.append
    pack = _ENQUEUE_HEADER.pack
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
                append(_DEQUEUE_HEADER.pack(DEQUEUE, len(encoded)))
                append(encoded)
            elif type(event) is Ready:
                append(_READY_BYTE)
            else:
                raise TypeError
    except (struct.error, TypeError, AttributeError, UnicodeEncodeError):
        raise _diagnose(f"event {index}", event) from None
    return b"".join(parts)


class _Unset:
    def __eq__(self, other: object) -> bool:
        return False

    def __ne__(self, other: object) -> bool:
        return True

    __hash__ = None  # type: ignore[assignment]


_UNSET = _Unset()


class EnqueuePacker:
    """Encodes ENQUEUE events from a message's fields: the primary's catch-up hot path.

    ``b"".join([VERSION_BYTE, *packer.pack(...)[:3], ...])`` is byte for byte what
    :func:`encode_batch` makes of the same fields as :class:`Enqueue` events, without
    creating those frozen objects (half the cost of a 1 KiB message's encoding). The
    exchange and routing key of the last message are kept encoded: a queue's messages
    mostly share them. Errors are those of :func:`encode_batch`, for the same values.
    """

    __slots__ = ("_exchange", "_lengths", "_route", "_routing_key")

    #: A batch starts with this byte (then the events' parts).
    VERSION_BYTE = _VERSION_BYTE

    def __init__(self) -> None:
        self._exchange: object = _UNSET  # equal to no value: the first pack sets the route
        self._routing_key: object = _UNSET
        self._route = b""
        self._lengths = (0, 0)

    def pack(
        self, id_: int, exchange: str, routing_key: str, properties: bytes, body: bytes
    ) -> tuple[bytes, bytes, bytes, int]:
        """(header and route, properties, body, their total size) of one ENQUEUE event."""
        if exchange != self._exchange or routing_key != self._routing_key:
            self._set_route(exchange, routing_key)
        exchange_len, key_len = self._lengths
        try:
            if id_ < 0 or type(properties) is not bytes or type(body) is not bytes:
                raise TypeError
            head = (
                _ENQUEUE_HEADER.pack(
                    ENQUEUE, id_, exchange_len, key_len, len(properties), len(body)
                )
                + self._route
            )
        except (struct.error, TypeError):
            raise _diagnose(
                "event", Enqueue(id_, exchange, routing_key, properties, body)
            ) from None
        return head, properties, body, len(head) + len(properties) + len(body)

    def _set_route(self, exchange: str, routing_key: str) -> None:
        try:
            encoded_exchange = exchange.encode()
            encoded_key = routing_key.encode()
        except (AttributeError, UnicodeEncodeError):
            raise _diagnose("event", Enqueue(0, exchange, routing_key, b"", b"")) from None
        self._exchange = exchange
        self._routing_key = routing_key
        self._route = encoded_exchange + encoded_key
        self._lengths = (len(encoded_exchange), len(encoded_key))


def _event_parts(event: Event) -> tuple[list[bytes], int]:
    """The encoded pieces of one event (what :func:`encode_batch` appends) and their size."""
    try:
        if type(event) is Enqueue:
            id_ = event.id
            exchange = event.exchange.encode()
            routing_key = event.routing_key.encode()
            properties = event.properties
            body = event.body
            if id_ < 0 or type(properties) is not bytes or type(body) is not bytes:
                raise TypeError  # the error path finds out which
            exchange_len = len(exchange)
            key_len = len(routing_key)
            properties_len = len(properties)
            body_len = len(body)
            header = _ENQUEUE_HEADER.pack(
                ENQUEUE, id_, exchange_len, key_len, properties_len, body_len
            )
            return (
                [header, exchange, routing_key, properties, body],
                _ENQUEUE_HEADER_SIZE + exchange_len + key_len + properties_len + body_len,
            )
        if type(event) is Dequeue:
            encoded = event.ids.encode()
            return [_DEQUEUE_HEADER.pack(DEQUEUE, len(encoded)), encoded], 5 + len(encoded)
        if type(event) is Ready:
            return [_READY_BYTE], 1
        raise TypeError
    except (struct.error, TypeError, AttributeError, UnicodeEncodeError):
        raise _diagnose("event", event) from None


def _diagnose(where: str, event: object) -> Exception:
    """The precise error for an event the fast path could not encode (slow, error path only)."""
    if isinstance(event, Dequeue):
        if not isinstance(event.ids, IdSet):
            return TypeError(f"{where}: Dequeue.ids must be an IdSet, not {type(event.ids)}")
        return ValueError(f"{where}: id set too large to encode")
    if not isinstance(event, Enqueue):
        return TypeError(f"{where}: not an Enqueue, Dequeue or Ready event: {event!r:.80}")
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
        if size > _MAX_SHORT:
            return ValueError(
                f"{where}: Enqueue.{name} is {size} bytes of UTF-8, more than {_MAX_SHORT}"
            )
    for name in ("properties", "body"):
        value = getattr(event, name)
        if type(value) is not bytes:
            return TypeError(f"{where}: Enqueue.{name} must be bytes, not {type(value).__name__}")
        if len(value) > _MAX_LONG:
            return ValueError(f"{where}: Enqueue.{name} is {len(value)} bytes, 4 GiB or more")
    return ValueError(f"{where}: cannot encode {event!r:.200}")  # pragma: no cover


# -- per-queue stream: decoding ------------------------------------------------------------


def decode_batch(data: bytes | bytearray | memoryview) -> list[Event]:
    """The events of one batch body; :class:`ValueError` naming the problem if malformed."""
    if type(data) is not bytes:
        if not isinstance(data, bytearray | memoryview):
            raise ValueError(f"batch must be bytes, not {type(data).__name__}")
        data = bytes(data)
    end = len(data)
    if end == 0:
        raise ValueError("empty batch: no version byte")
    if data[0] != VERSION:
        raise ValueError(f"unsupported batch version {data[0]} (expected {VERSION})")
    events: list[Event] = []
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
                start = pos + _ENQUEUE_HEADER_SIZE
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
            elif kind == READY:
                append(Ready())
                pos += 1
            else:
                raise ValueError(_where(events, pos, f"unknown event type {kind}"))
    except UnicodeDecodeError as err:
        raise ValueError(
            _where(events, pos, f"enqueue exchange or routing key is not valid UTF-8: {err}")
        ) from None
    return events


def _where(events: list[Event], pos: int, problem: str) -> str:
    return f"replication batch: event {len(events)} at byte {pos}: {problem}"


# -- per-queue stream: batching ------------------------------------------------------------


class BatchWriter:
    """Packs events into batches of at most ``max_bytes`` bytes and ``max_events`` events.

    Add events while not :attr:`full`, then :meth:`take` the batch::

        for event in events:
            while writer.full:          # not just "if": see below
                send(writer.take())
            writer.add(event)
        while len(writer):              # flush, including an event carried over
            send(writer.take())

    Every batch taken holds at most ``max_events`` events and at most ``max_bytes`` bytes,
    except a batch of one event that alone exceeds ``max_bytes``. When an event does not fit
    in a non-empty batch, :meth:`add` keeps it aside and the writer becomes full: the next
    :meth:`take` returns the batch without it and the new batch starts with it, so order is
    kept (and if that event alone exceeds ``max_bytes`` the new batch is full at once, hence
    ``while writer.full``). :meth:`add` on a full writer raises :class:`RuntimeError`; an
    event that cannot be encoded raises as :func:`encode_batch` does and leaves the writer
    unchanged.
    """

    __slots__ = ("_carry", "_count", "_max_bytes", "_max_events", "_parts", "_size")

    def __init__(self, max_bytes: int = 65536, max_events: int = 4096) -> None:
        if max_bytes < 2:
            raise ValueError(f"max_bytes must be at least 2, not {max_bytes}")
        if max_events < 1:
            raise ValueError(f"max_events must be at least 1, not {max_events}")
        self._max_bytes = max_bytes
        self._max_events = max_events
        self._parts: list[bytes] = [_VERSION_BYTE]
        self._size = 1
        self._count = 0
        self._carry: tuple[list[bytes], int] | None = None

    @property
    def max_bytes(self) -> int:
        return self._max_bytes

    @property
    def max_events(self) -> int:
        return self._max_events

    @property
    def size(self) -> int:
        """Bytes of the batch :meth:`take` would return now."""
        return self._size

    @property
    def full(self) -> bool:
        """True when no further event may be added before :meth:`take`."""
        return (
            self._carry is not None
            or self._count >= self._max_events
            or self._size >= self._max_bytes
        )

    def __len__(self) -> int:
        """Events in the batch :meth:`take` would return now (not counting a carried one)."""
        return self._count

    def add(self, event: Event) -> None:
        """Add ``event`` to the batch, or set it aside for the next one if it does not fit."""
        if (
            self._carry is not None
            or self._count >= self._max_events
            or self._size >= self._max_bytes
        ):
            raise RuntimeError("BatchWriter is full: take() the batch first")
        parts, size = _event_parts(event)
        if self._count and self._size + size > self._max_bytes:
            self._carry = (parts, size)
            return
        self._parts += parts
        self._size += size
        self._count += 1

    def take(self) -> bytes:
        """The batch so far (just the version byte if empty); starts the next one."""
        data = b"".join(self._parts)
        self._parts = [_VERSION_BYTE]
        self._size = 1
        self._count = 0
        if self._carry is not None:
            parts, size = self._carry
            self._carry = None
            self._parts += parts
            self._size += size
            self._count = 1
        return data


# -- configuration stream ------------------------------------------------------------------

_MAX_KEY_BYTES = 128  # pamqp truncates longer field names; we refuse them
_MAX_DEPTH = 32  # nesting of tables and arrays


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


def _check_encodable(value: object, depth: int) -> None:
    if depth > _MAX_DEPTH:
        raise ValueError(f"config event nested more than {_MAX_DEPTH} deep")
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"config event key {key!r:.80} is not a str")
            try:
                size = len(key.encode())
            except UnicodeEncodeError as err:
                raise ValueError(f"config event key {key!r:.80} is not UTF-8: {err}") from None
            if size > _MAX_KEY_BYTES:
                raise ValueError(
                    f"config event key {key[:40]!r}... is {size} bytes, more than {_MAX_KEY_BYTES}"
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
    if type(data) is not bytes:
        if not isinstance(data, bytearray | memoryview):
            raise ValueError(f"config event must be bytes, not {type(data).__name__}")
        data = bytes(data)
    table, pos = _table(data, 0, len(data), 0)
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


def _table(data: bytes, pos: int, end: int, depth: int) -> tuple[dict[str, Any], int]:
    if depth > _MAX_DEPTH:
        raise ValueError(f"config event: tables/arrays nested more than {_MAX_DEPTH} deep")
    pos, stop = _length(data, pos, end, "field table")
    table: dict[str, Any] = {}
    while pos < stop:
        key_stop = pos + 1 + data[pos]
        if key_stop > stop:
            raise ValueError(f"config event: field name at byte {pos} runs past its table")
        try:
            key = data[pos + 1 : key_stop].decode()
        except UnicodeDecodeError:
            raise ValueError(f"config event: field name at byte {pos} is not UTF-8") from None
        if key in table:
            raise ValueError(f"config event: duplicate field {key!r}")
        table[key], pos = _value(data, key_stop, stop, depth)
    return table, pos


def _array(data: bytes, pos: int, end: int, depth: int) -> tuple[list[Any], int]:
    if depth > _MAX_DEPTH:
        raise ValueError(f"config event: tables/arrays nested more than {_MAX_DEPTH} deep")
    pos, stop = _length(data, pos, end, "field array")
    items: list[Any] = []
    while pos < stop:
        item, pos = _value(data, pos, stop, depth)
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
_DECIMAL = struct.Struct(">Bi")
_TIMESTAMP = struct.Struct(">Q")


def _value(data: bytes, pos: int, end: int, depth: int) -> tuple[Any, int]:
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
            raise ValueError(f"config event: string at byte {pos} is not UTF-8") from None
    if kind == 0x46:  # 'F' table
        return _table(data, pos, end, depth + 1)
    if kind == 0x41:  # 'A' array
        return _array(data, pos, end, depth + 1)
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
        if pos + 5 > end:
            raise ValueError(f"config event: truncated decimal at byte {pos - 1}")
        scale, mantissa = _DECIMAL.unpack_from(data, pos)
        return decimal.Decimal(mantissa) * (decimal.Decimal(10) ** -scale), pos + 5
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
