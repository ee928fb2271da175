"""The message store's record format: bytes in, records out, no I/O (docs/store.md).

A store is a directory of segment files ``NNNNNNNNNNNNNNNNNNNN.seg`` (the segment's number,
20 digits). Each segment starts with a header and holds whole records, never a part of one::

    header  = b"QPIDSEG1" | u64 segment number | u64 next id   (24 bytes)
    record  = u32 payload length | u32 CRC-32C of (kind + payload) | u8 kind | payload

All integers are big-endian. Records decode to named tuples (cheap to build: recovery makes
two per message). ``next id`` is the store's id counter when the segment was
opened: every id handed out later is at least that, so the counter survives even when the
records that used the highest ids were compacted away.

Records name what they change by id (one counter for exchanges, queues, bindings and
messages), never by position in the log, so a live record copied to the tail by compaction
means the same thing there: the state is the set of records created and not deleted,
whatever their order.

**Store formats** (:data:`common.version.STORE_FORMATS`, docs/store.md): format 1 is
release 0.1.0's records, whose arguments (of exchanges, queues and bindings) are pamqp's
field tables: floats in 32 bits, field names cut at 128 bytes. Format 2 adds
:attr:`Kind.EXCHANGE_2`, :attr:`Kind.QUEUE_2`, :attr:`Kind.BINDING_2` and
:attr:`Kind.EXCHANGE_BINDING_2`: the same layouts, the arguments in the core's lossless
codec (:mod:`broker.core.field_table_codec`, the one replication format 2 uses), so every
field table a client may declare comes back exactly. This code writes format 2's kinds and
reads both (:mod:`broker.store.record_decode`); a kind above every known one is a newer
format's, refused with one line naming it, never skipped. Release 0.1.0 refuses format 2's
kinds the same way (``unknown record kind 16``): it never misreads them.

CRC-32C (Castagnoli, the ``crc32c`` package) rather than zlib's CRC-32: it is the checksum
storage formats use (Kafka record batches, ext4 metadata, iSCSI), it detects more error
patterns at these record sizes, and the package computes it with the CPU's CRC instruction,
3 to 6 times faster than ``zlib.crc32`` here (64 B to 64 KiB bodies).

THREAD SAFE: pure functions.
"""

from __future__ import annotations

import functools
import mmap
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, NamedTuple

from crc32c import crc32c

from broker.core.field_table_codec import encode_table
from broker.core.field_tables import MAX_DEPTH

try:
    from broker.store import _records as native_records
except ImportError:  # not built (no C compiler at install): the Python encoders
    native_records = None  # type: ignore[assignment]

MAGIC = b"QPIDSEG1"
HEADER = struct.Struct(">8sQQ")
RECORD_HEADER = struct.Struct(">IIB")
_CRC_FROM = 8  # the checksum covers the kind byte and the payload
_Q = struct.Struct(">Q")
_QQ = struct.Struct(">QQ")
_QQQQ = struct.Struct(">QQQQ")
_QQQ = struct.Struct(">QQQ")
_QB = struct.Struct(">QB")
_I = struct.Struct(">I")

#: QUEUE record flag: the queue's 16-byte uuid follows the flags.
HAS_UUID = 4

#: Largest payload accepted when reading: a length above it is corruption, not a record.
MAX_PAYLOAD = 1 << 30


class Kind(IntEnum):
    """What a record says."""

    EXCHANGE = 1  # a durable exchange exists
    EXCHANGE_DELETED = 2
    QUEUE = 3  # a durable queue exists
    QUEUE_DELETED = 4
    BINDING = 5  # a binding from an exchange (by name) to a durable queue (by id)
    UNBOUND = 6
    MESSAGE = 7  # a persistent message's content
    ENQUEUE = 8  # a message is on a queue at a position
    DEQUEUE = 9  # it left that queue for good
    DELIVERED = 10  # it was delivered from that queue at least once
    EXCHANGE_BINDING = 11  # a binding from an exchange to another exchange (by names)
    TX = 12  # a committed transaction: its records, framed, inside one record (all or none)
    VHOST = 13  # a virtual host other than "/" exists
    VHOST_DELETED = 14
    # Store format 2 (issue 24): EXCHANGE, QUEUE, BINDING and EXCHANGE_BINDING again, the
    # same layout with the arguments in the core's lossless codec instead of pamqp's.
    EXCHANGE_2 = 15
    QUEUE_2 = 16
    BINDING_2 = 17
    EXCHANGE_BINDING_2 = 18


#: The configuration records (an exchange, queue, binding or vhost that exists), of both
#: formats: live until their object's deletion record.
CONFIG_KINDS = frozenset(
    int(k)
    for k in (
        Kind.EXCHANGE,
        Kind.QUEUE,
        Kind.BINDING,
        Kind.EXCHANGE_BINDING,
        Kind.VHOST,
        Kind.EXCHANGE_2,
        Kind.QUEUE_2,
        Kind.BINDING_2,
        Kind.EXCHANGE_BINDING_2,
    )
)


#: The vhost of records written before there were vhosts, and of records in ``/``.
DEFAULT_VHOST = "/"


class VhostRecord(NamedTuple):
    id: int
    name: str


class ExchangeRecord(NamedTuple):
    id: int
    name: str
    type: str
    auto_delete: bool
    internal: bool
    arguments: dict[str, Any]
    vhost: str = DEFAULT_VHOST


class QueueRecord(NamedTuple):
    id: int
    name: str
    auto_delete: bool
    arguments: dict[str, Any]
    #: The queue's uuid (:attr:`broker.core.queue.Queue.uuid`, 32 hex digits); "" in
    #: records written before queues had one.
    uuid: str = ""
    vhost: str = DEFAULT_VHOST


class BindingRecord(NamedTuple):
    id: int
    exchange: str
    queue_id: int
    routing_key: str
    arguments: dict[str, Any]


class ExchangeBindingRecord(NamedTuple):
    id: int
    source: str
    destination: str
    routing_key: str
    arguments: dict[str, Any]
    vhost: str = DEFAULT_VHOST


class MessageRecord(NamedTuple):
    id: int
    exchange: str
    routing_key: str
    properties_raw: bytes
    body: bytes


class EnqueueRecord(NamedTuple):
    queue_id: int
    message_id: int
    position: int
    #: When the message expires on this queue, wall-clock milliseconds; 0: never.
    expires_at_ms: int


class Deleted(NamedTuple):
    """EXCHANGE_DELETED, QUEUE_DELETED or UNBOUND: the object with this id is gone."""

    kind: Kind
    id: int


class QueueEntryEvent(NamedTuple):
    """DEQUEUE or DELIVERED of one message on one queue."""

    kind: Kind
    queue_id: int
    message_id: int


Record = (
    ExchangeRecord
    | QueueRecord
    | BindingRecord
    | ExchangeBindingRecord
    | MessageRecord
    | EnqueueRecord
    | Deleted
    | QueueEntryEvent
    | VhostRecord
)


class FormatError(Exception):
    """Bytes that are not a valid segment or record (the message says what and where)."""


class NewerFormat(FormatError):
    """A record of a store format newer than this build reads: not damage, a newer
    release's store (never cut or skipped)."""


# -- encoding ---------------------------------------------------------------------------
def segment_header(number: int, next_id: int) -> bytes:
    return HEADER.pack(MAGIC, number, next_id)


#: The CRC-32C of each kind byte alone: a record's checksum continues from it.
_KIND_CRC = {kind: crc32c(bytes((kind,))) for kind in Kind}
_pack_record_header = RECORD_HEADER.pack


def _frame(kind: Kind, payload: bytes) -> bytes:
    return RECORD_HEADER.pack(len(payload), crc32c(payload, _KIND_CRC[kind]), kind) + payload


@functools.lru_cache(maxsize=4096)
def _short(text: str) -> bytes:
    """A short string (length byte + UTF-8); exchange names and routing keys repeat."""
    raw = text.encode()
    if len(raw) > 255:
        raise ValueError(f"name longer than 255 bytes: {text[:40]!r}...")
    return bytes((len(raw),)) + raw


def _table(arguments: dict[str, Any]) -> bytes:
    """A format-2 record's arguments (:func:`broker.core.field_table_codec.encode_table`);
    ValueError naming what it cannot carry exactly (the declare contract refuses that
    before: :func:`broker.core.field_tables.check_arguments`)."""
    return encode_table(arguments, max_depth=MAX_DEPTH, what="store arguments")


def encode_exchange(record: ExchangeRecord) -> bytes:
    flags = (1 if record.auto_delete else 0) | (2 if record.internal else 0)
    payload = (
        _QB.pack(record.id, flags)
        + _short(record.name)
        + _short(record.type)
        + _table(record.arguments)
        + _vhost_suffix(record.vhost)
    )
    return _frame(Kind.EXCHANGE_2, payload)


def encode_queue(record: QueueRecord) -> bytes:
    uuid = bytes.fromhex(record.uuid) if record.uuid else b""
    if len(uuid) not in (0, 16):
        raise ValueError(f"a queue uuid is 16 bytes: {record.uuid!r}")
    flags = (1 if record.auto_delete else 0) | (HAS_UUID if uuid else 0)
    payload = (
        _QB.pack(record.id, flags)
        + uuid
        + _short(record.name)
        + _table(record.arguments)
        + _vhost_suffix(record.vhost)
    )
    return _frame(Kind.QUEUE_2, payload)


def encode_binding(record: BindingRecord) -> bytes:
    payload = (
        _QQ.pack(record.id, record.queue_id)
        + _short(record.exchange)
        + _short(record.routing_key)
        + _table(record.arguments)
    )
    return _frame(Kind.BINDING_2, payload)


def encode_exchange_binding(record: ExchangeBindingRecord) -> bytes:
    payload = (
        _Q.pack(record.id)
        + _short(record.source)
        + _short(record.destination)
        + _short(record.routing_key)
        + _table(record.arguments)
        + _vhost_suffix(record.vhost)
    )
    return _frame(Kind.EXCHANGE_BINDING_2, payload)


def _vhost_suffix(vhost: str) -> bytes:
    """A configuration record's vhost, after its arguments: nothing for ``/`` (records
    written before vhosts read as ``/``)."""
    return b"" if vhost == DEFAULT_VHOST else _short(vhost)


def encode_vhost(record: VhostRecord) -> bytes:
    return _frame(Kind.VHOST, _Q.pack(record.id) + _short(record.name))


def encode_deleted(kind: Kind, object_id: int) -> bytes:
    if kind not in (Kind.EXCHANGE_DELETED, Kind.QUEUE_DELETED, Kind.UNBOUND, Kind.VHOST_DELETED):
        raise ValueError(f"not a deletion: {kind!r}")
    return _frame(kind, _Q.pack(object_id))


#: (exchange, routing key) -> the two short strings, for the publish path (few distinct
#: pairs; bounded like broker/amqp/framing.py's route cache).
_ROUTES: dict[tuple[str, str], bytes] = {}
_ROUTES_LIMIT = 4096
_MESSAGE_CRC = _KIND_CRC[Kind.MESSAGE]
_MESSAGE_KIND = int(Kind.MESSAGE)
_ENQUEUE_CRC = _KIND_CRC[Kind.ENQUEUE]
_ENQUEUE_KIND = int(Kind.ENQUEUE)
_pack_q = _Q.pack
_pack_i = _I.pack
_pack_qqqq = _QQQQ.pack


def encode_message_with_enqueue(
    message_id: int,
    exchange: str,
    routing_key: str,
    properties_raw: bytes,
    body: bytes,
    queue_id: int,
    position: int,
    expires_at_ms: int,
) -> bytes:
    """A MESSAGE record and its first ENQUEUE, as one string of bytes (the publish path):
    the bytes of ``encode_message(...) + encode_enqueue(...)``, with fewer calls; encoded
    natively where broker/store/_records.c is built (an id out of range raises OverflowError
    there, struct.error here)."""
    route = _ROUTES.get((exchange, routing_key))
    if route is None:
        route = _route(exchange, routing_key)
    return _message_and_enqueue(
        message_id, route, properties_raw, body, queue_id, position, expires_at_ms
    )


def _route(exchange: str, routing_key: str) -> bytes:
    """The exchange and routing key as two short strings, remembered per pair."""
    route = _short(exchange) + _short(routing_key)
    if len(_ROUTES) >= _ROUTES_LIMIT:
        _ROUTES.clear()
    _ROUTES[(exchange, routing_key)] = route
    return route


def _message_with_enqueue(
    message_id: int,
    route: bytes,
    properties_raw: bytes,
    body: bytes,
    queue_id: int,
    position: int,
    expires_at_ms: int,
) -> bytes:
    """:func:`encode_message_with_enqueue` in Python: the reference the native encoder is
    tested against, and the encoder where it is not built."""
    head = _pack_q(message_id) + route + _pack_i(len(properties_raw)) + properties_raw
    enqueue = _pack_qqqq(queue_id, message_id, position, expires_at_ms)
    return b"".join(
        (
            _pack_record_header(
                len(head) + len(body), crc32c(body, crc32c(head, _MESSAGE_CRC)), _MESSAGE_KIND
            ),
            head,
            body,
            _pack_record_header(_QQQQ.size, crc32c(enqueue, _ENQUEUE_CRC), _ENQUEUE_KIND),
            enqueue,
        )
    )


#: The MESSAGE+ENQUEUE encoder of a route already encoded: natively where it is built.
_message_and_enqueue: Callable[[int, bytes, bytes, bytes, int, int, int], bytes] = (
    _message_with_enqueue if native_records is None else native_records.encode_message_with_enqueue
)


def encode_message(
    message_id: int, exchange: str, routing_key: str, properties_raw: bytes, body: bytes
) -> bytes:
    payload = b"".join(
        (
            _Q.pack(message_id),
            _short(exchange),
            _short(routing_key),
            _I.pack(len(properties_raw)),
            properties_raw,
            body,
        )
    )
    return _frame(Kind.MESSAGE, payload)


def encode_enqueue(queue_id: int, message_id: int, position: int, expires_at_ms: int) -> bytes:
    return _frame(Kind.ENQUEUE, _QQQQ.pack(queue_id, message_id, position, expires_at_ms))


_DEQUEUE_CRC = _KIND_CRC[Kind.DEQUEUE]
_DEQUEUE_KIND = int(Kind.DEQUEUE)
_DEQUEUE_SIZE = _QQ.size
_pack_qq = _QQ.pack


def _dequeue(queue_id: int, message_id: int) -> bytes:
    """``encode_queue_entry(Kind.DEQUEUE, ...)``, the same bytes, for the ack path (the
    Python reference of the native ``encode_dequeue``)."""
    payload = _pack_qq(queue_id, message_id)
    return (
        _pack_record_header(_DEQUEUE_SIZE, crc32c(payload, _DEQUEUE_CRC), _DEQUEUE_KIND) + payload
    )


#: A DEQUEUE record (the ack path): natively where broker/store/_records.c is built.
encode_dequeue: Callable[[int, int], bytes] = (
    _dequeue if native_records is None else native_records.encode_dequeue
)


def encode_queue_entry(kind: Kind, queue_id: int, message_id: int) -> bytes:
    if kind not in (Kind.DEQUEUE, Kind.DELIVERED):
        raise ValueError(f"not a queue entry event: {kind!r}")
    return _frame(kind, _QQ.pack(queue_id, message_id))


def encode_tx(records: bytes | bytearray) -> bytes:
    """One TX record holding ``records`` (each already framed): a crash never keeps part of
    a transaction, since the TX record's one checksum covers them all."""
    return _frame(Kind.TX, bytes(records))


def iter_tx(payload: bytes) -> Iterator[tuple[int, bytes]]:
    """The ``(kind, payload)`` of each record inside a TX record's payload. Raises
    :class:`FormatError` when they do not fill it exactly or one fails its checksum."""
    pos, end = 0, len(payload)
    header_size = RECORD_HEADER.size
    while pos < end:
        reason = _check(payload, pos, end)
        if reason is not None:
            raise FormatError(f"record {pos} bytes into a transaction: {reason}")
        length, _crc, kind = RECORD_HEADER.unpack_from(payload, pos)
        if kind == Kind.TX:
            raise FormatError("a transaction inside a transaction")
        yield kind, payload[pos + header_size : pos + header_size + length]
        pos += header_size + length


@dataclass(frozen=True, slots=True)
class SegmentHeader:
    number: int
    next_id: int


def read_header(data: bytes | memoryview | mmap.mmap) -> SegmentHeader:
    if len(data) < HEADER.size:
        raise FormatError(f"segment shorter than its {HEADER.size}-byte header")
    magic, number, next_id = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise FormatError(f"not a segment (magic {bytes(magic)!r})")
    return SegmentHeader(number, next_id)


@dataclass(frozen=True, slots=True)
class BadRecord:
    """Where reading stopped: the offset of the first record that is not valid, and why."""

    offset: int
    reason: str
    #: A valid record follows the bad one: corruption inside the log, not a torn tail.
    followed: bool


def iter_records(
    data: bytes, start: int = HEADER.size
) -> Iterator[tuple[int, int, int, bytes] | BadRecord]:
    """Walk the records of one segment's bytes from ``start``.

    Yields ``(offset, size, kind, payload)`` for each valid record (``size`` counts its
    header), then, if the bytes do not end exactly after a record, one :class:`BadRecord`
    and stops. A bad record followed by a valid one (the next header in place with a right
    checksum) is marked ``followed``: the damage is inside the log. Otherwise it is what a
    write cut short leaves at the end (a torn tail).
    """
    end = len(data)
    pos = start
    header = RECORD_HEADER
    header_size = header.size
    while pos < end:
        reason = _check(data, pos, end)
        if reason is not None:
            yield BadRecord(pos, reason, _valid_follows(data, pos, end))
            return
        length, _crc, kind = header.unpack_from(data, pos)
        size = header_size + length
        yield pos, size, kind, data[pos + header_size : pos + size]
        pos += size


def bad_record_at(data: bytes | mmap.mmap, pos: int) -> BadRecord | None:
    """The :class:`BadRecord` at ``pos`` if the record there is not valid, else None."""
    end = len(data)
    reason = _check(data, pos, end)
    if reason is None:
        return None
    return BadRecord(pos, reason, _valid_follows(data, pos, end))


def _check(data: bytes | mmap.mmap, pos: int, end: int) -> str | None:
    header_size = RECORD_HEADER.size
    if pos + header_size > end:
        return f"{end - pos} bytes left, less than a record header"
    length, crc, _kind = RECORD_HEADER.unpack_from(data, pos)
    if length > MAX_PAYLOAD:
        return f"record length {length} is impossible"
    if pos + header_size + length > end:
        return f"record of {length} bytes runs past the end ({end - pos - header_size} left)"
    actual = crc32c(memoryview(data)[pos + _CRC_FROM : pos + header_size + length])
    if actual != crc:
        return f"checksum mismatch (stored {crc:#010x}, computed {actual:#010x})"
    return None


def _valid_follows(data: bytes | mmap.mmap, pos: int, end: int) -> bool:
    """Does a valid record start right after the (claimed) extent of the bad one?"""
    if pos + RECORD_HEADER.size > end:
        return False
    length = RECORD_HEADER.unpack_from(data, pos)[0]
    nxt = pos + RECORD_HEADER.size + length
    if length > MAX_PAYLOAD or nxt >= end:
        return False
    return _check(data, nxt, end) is None
