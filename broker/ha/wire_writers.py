"""Incremental encoders of HA per-queue batches (layout: :mod:`broker.ha.wire_batch`).

Contract
--------
Both make, piece by piece, byte for byte what :func:`~broker.ha.wire_batch.encode_batch`
makes of the same events, and refuse what it refuses with the same error messages (prefixed
``event`` rather than ``event <index>``):

* :class:`EnqueuePacker` encodes ENQUEUE events straight from a message's fields, with no
  :class:`~broker.ha.wire_batch.Enqueue` object in between: the primary's side of catch-up
  (:mod:`broker.ha.replicating_subscription`). It keeps the last route encoded.
* :class:`BatchWriter` packs events into batches under a byte budget and an event count.

A batch holding a TX or TXBASE event starts with version byte 2 (``VERSION_TX_BYTE``), any
other with version 1: the writers switch the first part when they add such an event.

Not thread safe: each object belongs to one caller. No I/O.
Import the public names from :mod:`broker.ha.wire`.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Callable
from typing import Any

from broker.ha import wire_batch
from broker.ha.wire_batch import (
    CAUGHT_UP_BYTE,
    DEQUEUE,
    ENQUEUE,
    ENQUEUE_HEADER_SIZE,
    TX,
    TX_HEADER_SIZE,
    TXBASE,
    VERSION_TX_BYTE,
    WATERMARK,
    Dequeue,
    Enqueue,
    QueueCaughtUp,
    StreamEvent,
    Tx,
    TxBase,
    Watermark,
    diagnose,
)
from broker.ha.wire_batch import VERSION_BYTE as _VERSION_BYTE

_MAX_LONG = 2**32 - 1  # a u32 length

try:
    from broker.ha import _batch as native_batch
except ImportError:  # no C compiler at install: plain runs are packed in Python
    native_batch = None  # type: ignore[assignment]

__all__ = ["BatchWriter", "EnqueuePacker", "pack_enqueues"]

# Bound by assignment, not by import: CPython compiles ``name.method(...)`` for a name bound
# by an import as an attribute load (a bound method made per call), not as a method call.
# On these per-event packs that cost 12% of an ENQUEUE's encoding (bench/ha_wire.py).
_ENQUEUE_HEADER: struct.Struct = wire_batch.ENQUEUE_HEADER
_DEQUEUE_HEADER: struct.Struct = wire_batch.DEQUEUE_HEADER
_TX_HEADER: struct.Struct = wire_batch.TX_HEADER
_TXBASE_HEADER: struct.Struct = wire_batch.TXBASE_HEADER
_WATERMARK_HEADER: struct.Struct = wire_batch.WATERMARK_HEADER


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

    #: A batch starts with this byte (then the events' parts) ...
    VERSION_BYTE = _VERSION_BYTE
    #: ... or with this one when it holds a :meth:`tx` or :meth:`tx_base` part.
    VERSION_TX_BYTE = VERSION_TX_BYTE
    #: Bytes of a :meth:`tx` part.
    TX_SIZE = TX_HEADER_SIZE

    @staticmethod
    def tx(tx_id: int, total: int, count: int) -> bytes:
        """A TX event: the next ``count`` ENQUEUEs are transaction ``tx_id``'s (of ``total``)."""
        if not 1 <= count <= total:
            raise diagnose("event", Tx(tx_id, total, count))
        try:
            return _TX_HEADER.pack(TX, tx_id, total, count)
        except struct.error:
            raise diagnose("event", Tx(tx_id, total, count)) from None

    @staticmethod
    def tx_base(first: int) -> bytes:
        """A TXBASE event: transactions from id ``first`` on come whole on this stream."""
        try:
            return _TXBASE_HEADER.pack(TXBASE, first)
        except struct.error:
            raise diagnose("event", TxBase(first)) from None

    @staticmethod
    def watermark(position: int) -> bytes:
        """A WATERMARK event: the primary may deliver ids up to ``position``."""
        if type(position) is not int or position < 0:
            raise diagnose("event", Watermark(position))
        try:
            return _WATERMARK_HEADER.pack(WATERMARK, position)
        except struct.error:
            raise diagnose("event", Watermark(position)) from None

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
            raise diagnose("event", Enqueue(id_, exchange, routing_key, properties, body)) from None
        return head, properties, body, len(head) + len(properties) + len(body)

    def _set_route(self, exchange: str, routing_key: str) -> None:
        try:
            encoded_exchange = exchange.encode()
            encoded_key = routing_key.encode()
        except (AttributeError, UnicodeEncodeError):
            raise diagnose("event", Enqueue(0, exchange, routing_key, b"", b"")) from None
        self._exchange = exchange
        self._routing_key = routing_key
        self._route = encoded_exchange + encoded_key
        self._lengths = (len(encoded_exchange), len(encoded_key))


def _pack_enqueues(
    packer: EnqueuePacker,
    backlog: deque[Any],  # of broker.core.message.Entry
    parts: list[bytes],
    ids: list[int],
    size: int,
    budget: int,
    max_events: int,
) -> int:
    """:func:`pack_enqueues` in Python: the reference broker/ha/_batch.c is held to."""
    exchange, routing_key = packer._exchange, packer._routing_key
    exchange_len, key_len = packer._lengths
    if type(exchange) is not str or type(routing_key) is not str:
        return size  # no route yet: the caller packs the first message
    if not (0 <= exchange_len <= 255 and 0 <= key_len <= 255):
        return size  # pack raises for it
    while backlog and len(ids) < max_events and size < budget:
        entry = backlog[0]
        position, message = entry.position, entry.message
        properties, body = message.properties_raw, message.body
        if (
            message.tx is not None
            or message.exchange != exchange
            or message.routing_key != routing_key
            or type(position) is not int
            or not 0 <= position < 2**63
            or type(properties) is not bytes
            or type(body) is not bytes
            or len(properties) > _MAX_LONG
            or len(body) > _MAX_LONG
        ):
            break  # the caller takes it from here
        head, properties, body, event_size = packer.pack(
            position, exchange, routing_key, properties, body
        )
        backlog.popleft()
        parts += (head, properties, body)
        ids.append(position)
        size += event_size
    return size


#: ``pack_enqueues(packer, backlog, parts, ids, size, budget, max_events) -> size``: the
#: plain messages at the head of ``backlog`` (outside any transaction, on the packer's route,
#: values the format carries) taken off it and packed as ``packer.pack`` packs them, their
#: parts added to ``parts`` and their positions to ``ids``, while fewer than ``max_events``
#: ids and ``size`` under ``budget``; the new size. The first other message is left at the
#: head for the caller. Natively where broker/ha/_batch.c is built (a primary packs every
#: message once per backup).
pack_enqueues: Callable[[EnqueuePacker, deque[Any], list[bytes], list[int], int, int, int], int] = (
    _pack_enqueues if native_batch is None else native_batch.pack_enqueues
)


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
    unchanged. A batch with a :class:`Tx` or :class:`TxBase` starts with version byte 2.
    The writer does not keep a :class:`Tx` with its ENQUEUEs: a run split by the limits makes
    two batches that :func:`decode_batch` refuses, so size the limits to hold each run (the
    primary's subscription writes its runs itself, with an :class:`EnqueuePacker`).
    """

    __slots__ = ("_carry", "_count", "_max_bytes", "_max_events", "_parts", "_size", "_tx")

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
        self._tx = False  # the carried event is a Tx or TxBase

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

    def add(self, event: StreamEvent) -> None:
        """Add ``event`` to the batch, or set it aside for the next one if it does not fit."""
        if (
            self._carry is not None
            or self._count >= self._max_events
            or self._size >= self._max_bytes
        ):
            raise RuntimeError("BatchWriter is full: take() the batch first")
        parts, size = _event_parts(event)
        tx = type(event) is not Enqueue and (type(event) is Tx or type(event) is TxBase)
        if self._count and self._size + size > self._max_bytes:
            self._carry = (parts, size)
            self._tx = tx
            return
        if tx:
            self._parts[0] = VERSION_TX_BYTE
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
            if self._tx:
                self._tx = False
                self._parts[0] = VERSION_TX_BYTE
            self._parts += parts
            self._size += size
            self._count = 1
        return data


def _event_parts(event: StreamEvent) -> tuple[list[bytes], int]:
    """The encoded pieces of one event (what :func:`encode_batch` appends) and their size.

    The ENQUEUE branch repeats encode_batch's on purpose (the duplicates tool pairs them):
    sharing one encoder costs a call per event, and going through an :class:`EnqueuePacker`
    made ``BatchWriter.add`` 8% slower (bench/ha_wire.py). Change both together.
    """
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
                ENQUEUE_HEADER_SIZE + exchange_len + key_len + properties_len + body_len,
            )
        if type(event) is Dequeue:
            encoded = event.ids.encode()
            return [_DEQUEUE_HEADER.pack(DEQUEUE, len(encoded)), encoded], 5 + len(encoded)
        if type(event) is QueueCaughtUp:
            return [CAUGHT_UP_BYTE], 1
        if type(event) is Tx:
            if not 1 <= event.count <= event.total:
                raise TypeError
            return [_TX_HEADER.pack(TX, event.id, event.total, event.count)], TX_HEADER_SIZE
        if type(event) is TxBase:
            return [_TXBASE_HEADER.pack(TXBASE, event.first)], _TXBASE_HEADER.size
        if type(event) is Watermark:
            if event.position < 0:
                raise TypeError
            return [_WATERMARK_HEADER.pack(WATERMARK, event.position)], _WATERMARK_HEADER.size
        raise TypeError
    except (struct.error, TypeError, AttributeError, UnicodeEncodeError):
        raise diagnose("event", event) from None
