"""Recovery: from the records of a store's segments to the durable state they describe.

Feed each segment's bytes, oldest first, to :meth:`Recovery.add_segment`; read the result
from :meth:`Recovery.state`. No I/O: the journal shell reads the files.

The state is the set of objects created and not deleted, whatever the order of their
records (compaction copies live records to the tail, see :mod:`broker.store.records`):

- durable exchanges, queues and bindings whose deletion record is absent (a binding also
  goes with its queue);
- on each recovered queue, the messages enqueued and not dequeued, by position, each marked
  ``delivered`` when a DELIVERED record says it had been delivered.

What a bad record means (:class:`~broker.store.records.BadRecord`): at the end of the last
segment and not followed by a valid record, a write cut short by a crash or a power cut
(*torn tail*: nothing after it was ever synced, so nothing confirmed is lost; the shell
cuts it off and logs where); anywhere else, corruption: :class:`CorruptStore` stops the
start with the segment, the offset and the reason.

Two walkers read a segment, with the same result: the native one
(``broker/store/_walk.c``, built by ``pip install``; the CRC and the fold of the four
common kinds in C) when it is there, else the pure-Python one, which stays the reference
(``Recovery(native=False)``; tests/store/test_native_walk.py compares them).

THREAD UNSAFE: one recovery per store, on one thread.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass, field
from operator import itemgetter
from typing import NamedTuple

from crc32c import crc32c

from broker.store.ledger import Ledger
from broker.store.record_decode import decode_payload
from broker.store.records import (
    HEADER,
    RECORD_HEADER,
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
    VhostRecord,
    bad_record_at,
    iter_tx,
    read_header,
)

try:
    from broker.store import _walk
except ImportError:  # not built (no C compiler at install): the Python walker
    _walk = None  # type: ignore[assignment]

#: The native walker's module (broker/store/_walk.c), None when it is not built.
native_walk = _walk

#: Which walker a Recovery uses by default: "native" or "python".
WALKER = "python" if native_walk is None else "native"

_Q = struct.Struct(">Q")
_QQ = struct.Struct(">QQ")
_QQQQ = struct.Struct(">QQQQ")
_I = struct.Struct(">I")
# The kinds of nearly every record, as plain ints for the hot loop (an IntEnum member is
# looked up on its class at each use).
_ENQUEUE = int(Kind.ENQUEUE)
_MESSAGE = int(Kind.MESSAGE)
_DEQUEUE = int(Kind.DEQUEUE)
_DELIVERED = int(Kind.DELIVERED)


class CorruptStore(Exception):
    """A record inside the log is damaged: starting would lose or invent messages."""

    def __init__(self, segment: int, offset: int, reason: str) -> None:
        super().__init__(f"segment {segment:020d}.seg, offset {offset}: {reason}")
        self.segment = segment
        self.offset = offset
        self.reason = reason


class NewerStore(CorruptStore):
    """A record of a newer store format (a store a newer release wrote): not damage, so
    ``--store-cut-damaged`` never cuts it; the start is refused naming it."""


def _refusal(segment: int, offset: int, exc: FormatError) -> CorruptStore:
    """The exception a record that cannot be read stops recovery with."""
    if isinstance(exc, NewerFormat):
        return NewerStore(segment, offset, str(exc))
    return CorruptStore(segment, offset, str(exc))


@dataclass(frozen=True, slots=True)
class TornTail:
    """The last segment ends in a partial record: cut it at ``offset``."""

    segment: int
    offset: int
    reason: str


class RecoveredMessage(NamedTuple):
    """One message on one recovered queue."""

    message_id: int
    position: int
    expires_at_ms: int
    delivered: bool


@dataclass(slots=True)
class RecoveredQueue:
    record: QueueRecord
    #: Messages by position, lowest first (until MessageStore.recover_into takes them).
    messages: list[RecoveredMessage] = field(default_factory=list)


@dataclass(slots=True)
class RecoveredState:
    exchanges: list[ExchangeRecord]
    queues: list[RecoveredQueue]
    bindings: list[BindingRecord]
    #: Exchange-to-exchange bindings whose two ends are recovered (or built in).
    exchange_bindings: list[ExchangeBindingRecord]
    #: Message contents by id, for every message on some recovered queue (until
    #: MessageStore.recover_into takes them out as it re-creates their messages).
    messages: dict[int, MessageRecord]
    #: The first id the store may hand out.
    next_id: int
    torn_tail: TornTail | None
    #: Records read, for the recovery log line and the bench.
    record_count: int
    #: What is live where, for compaction from here on.
    ledger: Ledger
    #: Segment numbers read, oldest first.
    segments: list[int]
    #: Virtual hosts other than "/" (each exchange, queue and binding names its vhost).
    vhosts: list[VhostRecord] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.exchanges or self.queues)

    @property
    def message_count(self) -> int:
        return sum(len(q.messages) for q in self.queues)


@dataclass(frozen=True, slots=True)
class SegmentRecords:
    """What one segment held: its number and the valid records' (offset, size, kind, id)."""

    number: int
    end: int  # offset after the last valid record


class Recovery:
    """Folds records into the state they describe (see the module docstring)."""

    def __init__(self, *, native: bool = True) -> None:
        #: Read with the native walker (when built); False: the pure-Python one.
        self.native = native and native_walk is not None
        self._exchanges: dict[int, ExchangeRecord] = {}
        self._queues: dict[int, QueueRecord] = {}
        self._bindings: dict[int, BindingRecord] = {}
        self._exchange_bindings: dict[int, ExchangeBindingRecord] = {}
        self._vhosts: dict[int, VhostRecord] = {}
        self._deleted: set[int] = set()
        self._messages: dict[int, MessageRecord] = {}
        # (queue id, message id) -> (position, expires_at_ms, segment)
        self._enqueued: dict[tuple[int, int], tuple[int, int, int]] = {}
        self._where: dict[int, int] = {}  # exchange, queue, binding, message id -> segment
        self._records_in: dict[int, int] = {}  # segment -> records
        self._dequeued: set[tuple[int, int]] = set()
        self._delivered: set[tuple[int, int]] = set()
        self._next_id = 1
        self._torn: TornTail | None = None
        self._records = 0
        self._segments: list[int] = []

    def add_segment(self, number: int, data: bytes | mmap.mmap, *, last: bool) -> SegmentRecords:
        """Read segment ``number`` (its file name; oldest first) from its bytes or its map
        (what is kept is copied out of it); ``last``: the newest one, where a torn tail may
        be. Raises :class:`CorruptStore`."""
        if self._segments and number <= self._segments[-1]:
            raise CorruptStore(number, 0, f"segment number not above {self._segments[-1]}")
        try:
            header = read_header(data)
        except FormatError as exc:
            if last and len(data) < HEADER.size:
                # Cut while its header was being written: an empty segment.
                self._torn = TornTail(number, 0, str(exc))
                return SegmentRecords(number, 0)
            raise CorruptStore(number, 0, str(exc)) from None
        if header.number != number:
            raise CorruptStore(number, 0, f"header says segment {header.number}")
        self._segments.append(number)
        self._records_in[number] = 0
        self._next_id = max(self._next_id, header.next_id)
        if self.native:
            return self._walk_records(number, data, last)
        return self._read_records(number, data, last)

    def _walk_records(self, number: int, data: bytes | mmap.mmap, last: bool) -> SegmentRecords:
        """:meth:`_read_records` with the native walker: it folds the common records and
        stops at any other (decoded here), at a bad one or at the end."""
        assert native_walk is not None
        walk = native_walk.walk
        pos = HEADER.size
        top = self._next_id - 1
        args = (self._enqueued, self._messages, self._where, self._dequeued, self._delivered)
        while True:
            pos, count, top, status, reason = walk(data, pos, number, top, *args, MessageRecord)
            self._records += count
            self._records_in[number] += count
            self._next_id = max(self._next_id, top + 1)
            if status == native_walk.END:
                return SegmentRecords(number, pos)
            if status == native_walk.UNDECODABLE:
                raise CorruptStore(number, pos, reason)
            if status == native_walk.BAD:
                bad = bad_record_at(data, pos)
                assert bad is not None
                if last and not bad.followed:
                    self._torn = TornTail(number, bad.offset, bad.reason)
                    return SegmentRecords(number, bad.offset)
                raise CorruptStore(number, bad.offset, bad.reason)
            length, _crc, kind = RECORD_HEADER.unpack_from(data, pos)
            nxt = pos + RECORD_HEADER.size + length
            try:
                self._apply(kind, data[pos + RECORD_HEADER.size : nxt], number)
            except FormatError as exc:
                raise _refusal(number, pos, exc) from None
            top = self._next_id - 1
            pos = nxt

    def _read_records(self, number: int, data: bytes | mmap.mmap, last: bool) -> SegmentRecords:
        """The records of one segment: enqueues, messages, dequeues and deliveries (nearly
        every record) read in place; the rest through :func:`decode_payload`."""
        view = memoryview(data)
        end = len(data)
        pos = HEADER.size
        unpack_header = RECORD_HEADER.unpack_from
        header_size = RECORD_HEADER.size
        enqueued = self._enqueued
        messages = self._messages
        where = self._where
        dequeued = self._dequeued
        delivered = self._delivered
        unpack_enqueue = _QQQQ.unpack_from
        unpack_pair = _QQ.unpack_from
        unpack_id = _Q.unpack_from
        unpack_size = _I.unpack_from
        new_tuple = tuple.__new__  # a NamedTuple without its Python-level __new__
        top = self._next_id - 1
        count = 0
        while pos < end:
            if pos + header_size <= end:
                length, crc, kind = unpack_header(data, pos)
                start = pos + header_size
                nxt = start + length
                ok = nxt <= end and crc32c(view[pos + 8 : nxt]) == crc
            else:
                ok = False
            if not ok:
                bad = bad_record_at(data, pos)
                assert bad is not None
                self._records += count
                self._records_in[number] += count
                self._next_id = max(self._next_id, top + 1)
                if last and not bad.followed:
                    self._torn = TornTail(number, bad.offset, bad.reason)
                    return SegmentRecords(number, bad.offset)
                raise CorruptStore(number, bad.offset, bad.reason)
            count += 1
            try:
                if kind == _ENQUEUE:
                    queue_id, message_id, position, expires = unpack_enqueue(data, start)
                    enqueued[(queue_id, message_id)] = (position, expires, number)
                    if message_id > top:
                        top = message_id
                elif kind == _MESSAGE:
                    message_id = unpack_id(data, start)[0]
                    at = start + 8
                    exchange_end = at + 1 + data[at]
                    key_end = exchange_end + 1 + data[exchange_end]
                    if key_end + 4 > nxt:
                        raise FormatError("message names run past the record")
                    properties_end = key_end + 4 + unpack_size(data, key_end)[0]
                    if properties_end > nxt:
                        raise FormatError("message properties run past the record")
                    messages[message_id] = new_tuple(
                        MessageRecord,
                        (
                            message_id,
                            data[at + 1 : exchange_end].decode(),
                            data[exchange_end + 1 : key_end].decode(),
                            data[key_end + 4 : properties_end],
                            data[properties_end:nxt],
                        ),
                    )
                    where[message_id] = number
                    if message_id > top:
                        top = message_id
                elif kind == _DEQUEUE:
                    dequeued.add(unpack_pair(data, start))
                elif kind == _DELIVERED:
                    delivered.add(unpack_pair(data, start))
                else:
                    self._apply(kind, data[start:nxt], number)
                    count -= 1  # counted there
            except FormatError as exc:
                raise _refusal(number, pos, exc) from None
            except (struct.error, IndexError, UnicodeDecodeError) as exc:
                raise CorruptStore(number, pos, f"undecodable record: {exc}") from None
            pos = nxt
        self._records += count
        self._records_in[number] += count
        self._next_id = max(self._next_id, top + 1)
        return SegmentRecords(number, end)

    def _apply(self, kind: int, payload: bytes, segment: int) -> None:
        if kind == Kind.TX:  # the transaction's records, counted one by one
            for inner_kind, inner in iter_tx(payload):
                self._apply(inner_kind, inner, segment)
            return
        self._records += 1
        self._records_in[segment] += 1
        record = decode_payload(kind, payload)
        if isinstance(record, EnqueueRecord):
            key = (record.queue_id, record.message_id)
            self._enqueued[key] = (record.position, record.expires_at_ms, segment)
            self._bump(record.message_id)
        elif isinstance(record, MessageRecord):
            self._messages[record.id] = record
            self._where[record.id] = segment
            self._bump(record.id)
        elif isinstance(record, QueueEntryEvent):
            key = (record.queue_id, record.message_id)
            if record.kind == Kind.DEQUEUE:
                self._dequeued.add(key)
            else:
                self._delivered.add(key)
        elif isinstance(record, Deleted):
            self._deleted.add(record.id)
        else:
            if isinstance(record, ExchangeRecord):
                self._exchanges[record.id] = record
            elif isinstance(record, QueueRecord):
                self._queues[record.id] = record
            elif isinstance(record, ExchangeBindingRecord):
                self._exchange_bindings[record.id] = record
            elif isinstance(record, VhostRecord):
                self._vhosts[record.id] = record
            else:
                self._bindings[record.id] = record
            self._where[record.id] = segment
            self._bump(record.id)

    def _bump(self, used: int) -> None:
        if used >= self._next_id:
            self._next_id = used + 1

    def state(self) -> RecoveredState:
        deleted = self._deleted
        vhosts = [r for i, r in sorted(self._vhosts.items()) if i not in deleted]
        exchanges = [r for i, r in sorted(self._exchanges.items()) if i not in deleted]
        queues = {i: RecoveredQueue(r) for i, r in sorted(self._queues.items()) if i not in deleted}
        bindings = [
            r
            for i, r in sorted(self._bindings.items())
            if i not in deleted and r.queue_id in queues
        ]
        exchange_names = {e.name for e in exchanges}
        exchange_bindings = [
            r
            for i, r in sorted(self._exchange_bindings.items())
            if i not in deleted
            and (r.source in exchange_names or r.source.startswith("amq."))
            and (r.destination in exchange_names or r.destination.startswith("amq."))
        ]
        where = self._where
        config = {
            object_id: where[object_id]
            for object_id in (
                *(v.id for v in vhosts),
                *(e.id for e in exchanges),
                *queues,
                *(b.id for b in bindings),
                *(b.id for b in exchange_bindings),
            )
        }
        # The hot loop of a restart (one pass over every enqueue): what is live, the
        # ledger's message uses built on the way.
        used: dict[int, MessageRecord] = {}
        uses: dict[int, list[int]] = {}  # message id -> [segment, live enqueues]
        live_enqueues: dict[tuple[int, int], int] = {}
        unsorted: set[int] = set()  # queues whose messages came out of position order
        dequeued = self._dequeued
        delivered = self._delivered
        messages = self._messages
        fold = native_walk.fold if self.native else _fold
        missing = fold(
            self._enqueued,
            {queue_id: queue.messages for queue_id, queue in queues.items()},
            dequeued,
            delivered,
            messages,
            where,
            used,
            uses,
            live_enqueues,
            RecoveredMessage,
            unsorted,
        )
        if missing is not None:
            # The enqueue of a message whose content never reached the disk: the content
            # record comes first, so only a damaged store gets here.
            segment, message_id = missing
            raise CorruptStore(
                segment, -1, f"message {message_id} enqueued but its content is missing"
            )
        ledger = Ledger.restore(
            records=dict(self._records_in),
            config=config,
            messages=uses,
            enqueues=live_enqueues,
            delivered=delivered & live_enqueues.keys(),
        )
        # Enqueues are read in the order written, so nearly always in position order: only
        # a queue some of whose enqueues compaction moved needs a sort (stable, as before;
        # for 1M messages the key calls alone were 0.07 CPU s).
        by_position = itemgetter(1)
        for queue_id in unsorted:
            queues[queue_id].messages.sort(key=by_position)
        return RecoveredState(
            exchanges=exchanges,
            queues=list(queues.values()),
            bindings=bindings,
            exchange_bindings=exchange_bindings,
            messages=used,
            next_id=self._next_id,
            torn_tail=self._torn,
            record_count=self._records,
            ledger=ledger,
            segments=list(self._segments),
            vhosts=vhosts,
        )


def _fold(
    enqueued: dict[tuple[int, int], tuple[int, int, int]],
    lists: dict[int, list[RecoveredMessage]],
    dequeued: set[tuple[int, int]],
    delivered: set[tuple[int, int]],
    messages: dict[int, MessageRecord],
    where: dict[int, int],
    used: dict[int, MessageRecord],
    uses: dict[int, list[int]],
    live_enqueues: dict[tuple[int, int], int],
    recovered_type: type[RecoveredMessage],
    unsorted: set[int],
) -> tuple[int, int] | None:
    """The hot loop of :meth:`Recovery.state` (one pass over every enqueue): each live
    enqueue of a recovered queue (``lists``) to its list, with the ledger's message uses
    built on the way; ``unsorted`` gets the queues whose lists are out of position order.
    None, or the (segment, message id) of an enqueue whose content is missing. The
    pure-Python twin of the native walker's ``fold``."""
    recovered = tuple.__new__
    for key, (position, expires_at_ms, segment) in enqueued.items():
        messages_of = lists.get(key[0])
        if messages_of is None or key in dequeued:
            continue
        message_id = key[1]
        use = uses.get(message_id)
        if use is None:
            content = messages.get(message_id)
            if content is None:
                return segment, message_id
            used[message_id] = content
            uses[message_id] = [where[message_id], 1]
        else:
            use[1] += 1
        live_enqueues[key] = segment
        if messages_of and position < messages_of[-1][1]:
            unsorted.add(key[0])
        messages_of.append(
            recovered(recovered_type, (message_id, position, expires_at_ms, key in delivered))
        )
    return None
