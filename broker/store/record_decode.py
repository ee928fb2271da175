"""The message store's records decoded: a record's kind and payload in, a record out, no I/O
(the format: :mod:`broker.store.records`, docs/store.md).

Both store formats are read: a configuration record's arguments by pamqp in a format-1
record (kinds 1, 3, 5, 11: as release 0.1.0 wrote and read them), by the core's lossless
codec in a format-2 one (kinds 15-18, :mod:`broker.core.field_table_codec`). A kind above
every known one is of a newer store format: :class:`~broker.store.records.NewerFormat`
naming it (:func:`unknown_kind`), which recovery turns into a refusal to start, never a
cut. Recovery reads the four kinds nearly every record is in place
(:mod:`broker.store.recovery`); every other record comes here.

THREAD SAFE: pure functions.
"""

from __future__ import annotations

import struct
from typing import Any

from pamqp import decode as pamqp_decode

from broker.core.field_table_codec import lossless_grammar, read_table
from broker.core.field_tables import MAX_DEPTH
from broker.store.records import (
    DEFAULT_VHOST,
    HAS_UUID,
    BindingRecord,
    Deleted,
    EnqueueRecord,
    ExchangeBindingRecord,
    ExchangeRecord,
    FormatError,
    Kind,
    MessageRecord,
    NewerFormat,
    QueueEntryEvent,
    QueueRecord,
    Record,
    VhostRecord,
)
from common.version import STORE_FORMATS

__all__ = ["ARGUMENTS_GRAMMAR", "decode_payload", "unknown_kind"]

_Q = struct.Struct(">Q")
_QB = struct.Struct(">QB")
_QQ = struct.Struct(">QQ")
_QQQQ = struct.Struct(">QQQQ")
_I = struct.Struct(">I")

#: How the arguments of a format-2 record are read: the AMQP codec's depth (the arguments
#: table at depth 0), every value the codec gives.
ARGUMENTS_GRAMMAR = lossless_grammar(MAX_DEPTH, "store arguments")


def _read_short(payload: bytes, pos: int) -> tuple[str, int]:
    size = payload[pos]
    end = pos + 1 + size
    if end > len(payload):
        raise FormatError("short string runs past the record")
    return payload[pos + 1 : end].decode(), end


def _read_vhost(payload: bytes, pos: int) -> str:
    """The vhost suffix at ``pos`` (see :func:`_vhost_suffix`): ``/`` when there is none."""
    return _read_short(payload, pos)[0] if pos < len(payload) else DEFAULT_VHOST


def _read_table(payload: bytes, pos: int, kind: int) -> tuple[dict[str, Any], int]:
    """A record's arguments: by the core's lossless codec in a format-2 record, by pamqp (as
    release 0.1.0 wrote and read them) in a format-1 one."""
    if kind >= Kind.EXCHANGE_2:
        return read_table(payload, pos, ARGUMENTS_GRAMMAR)
    used, table = pamqp_decode.field_table(payload[pos:])
    return dict(table), pos + used


def decode_payload(kind: int, payload: bytes) -> Record:
    """One record from its kind and payload (checksum already verified)."""
    try:
        return _decode(kind, payload)
    except FormatError:
        raise
    except (struct.error, IndexError, ValueError, UnicodeDecodeError) as exc:
        raise FormatError(f"undecodable {_kind_name(kind)} record: {exc}") from None


def _kind_name(kind: int) -> str:
    try:
        return Kind(kind).name
    except ValueError:
        return f"kind {kind}"


def unknown_kind(kind: int) -> str:
    """Why a record of ``kind`` cannot be read: a kind above every known one is of a newer
    store format (a store written by a newer release), anything else damage."""
    if kind > max(Kind):
        return (
            f"record kind {kind} is of a store format newer than this build reads"
            f" (store {STORE_FORMATS}): the store was written by a newer release of qpidd;"
            " run that release (docs/deploy.md, 'Upgrading a cluster')"
        )
    return f"unknown record kind {kind}"


def _decode(kind: int, payload: bytes) -> Record:
    if kind == Kind.ENQUEUE:
        return EnqueueRecord(*_QQQQ.unpack(payload))
    if kind == Kind.MESSAGE:
        (message_id,) = _Q.unpack_from(payload)
        exchange, pos = _read_short(payload, 8)
        routing_key, pos = _read_short(payload, pos)
        (size,) = _I.unpack_from(payload, pos)
        pos += 4
        if pos + size > len(payload):
            raise FormatError("message properties run past the record")
        return MessageRecord(
            message_id, exchange, routing_key, payload[pos : pos + size], payload[pos + size :]
        )
    if kind in (Kind.DEQUEUE, Kind.DELIVERED):
        queue_id, message_id = _QQ.unpack(payload)
        return QueueEntryEvent(Kind(kind), queue_id, message_id)
    if kind in (Kind.EXCHANGE_DELETED, Kind.QUEUE_DELETED, Kind.UNBOUND, Kind.VHOST_DELETED):
        return Deleted(Kind(kind), _Q.unpack(payload)[0])
    if kind == Kind.VHOST:
        (object_id,) = _Q.unpack_from(payload)
        return VhostRecord(object_id, _read_short(payload, 8)[0])
    if kind in (Kind.EXCHANGE, Kind.EXCHANGE_2):
        object_id, flags = _QB.unpack_from(payload)
        name, pos = _read_short(payload, 9)
        type_, pos = _read_short(payload, pos)
        arguments, pos = _read_table(payload, pos, kind)
        return ExchangeRecord(
            object_id,
            name,
            type_,
            bool(flags & 1),
            bool(flags & 2),
            arguments,
            _read_vhost(payload, pos),
        )
    if kind in (Kind.QUEUE, Kind.QUEUE_2):
        object_id, flags = _QB.unpack_from(payload)
        pos, uuid = 9, ""
        if flags & HAS_UUID:
            pos, uuid = 25, payload[9:25].hex()
        name, pos = _read_short(payload, pos)
        arguments, pos = _read_table(payload, pos, kind)
        return QueueRecord(
            object_id, name, bool(flags & 1), arguments, uuid, _read_vhost(payload, pos)
        )
    if kind in (Kind.BINDING, Kind.BINDING_2):
        object_id, queue_id = _QQ.unpack_from(payload)
        exchange, pos = _read_short(payload, 16)
        routing_key, pos = _read_short(payload, pos)
        arguments, pos = _read_table(payload, pos, kind)
        return BindingRecord(object_id, exchange, queue_id, routing_key, arguments)
    if kind in (Kind.EXCHANGE_BINDING, Kind.EXCHANGE_BINDING_2):
        (object_id,) = _Q.unpack_from(payload)
        source, pos = _read_short(payload, 8)
        destination, pos = _read_short(payload, pos)
        routing_key, pos = _read_short(payload, pos)
        arguments, pos = _read_table(payload, pos, kind)
        return ExchangeBindingRecord(
            object_id, source, destination, routing_key, arguments, _read_vhost(payload, pos)
        )
    if kind > max(Kind):
        raise NewerFormat(unknown_kind(kind))
    raise FormatError(unknown_kind(kind))
