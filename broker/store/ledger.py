"""The ledger: which records of which segment are still live, and when to compact.

A record is *live* while the state still needs it: a durable exchange, queue or binding not
deleted, a message's content while it is on some queue, an enqueue not dequeued. Deletion,
dequeue and delivered records are never live: they only matter while what they refer to is
still in an older segment.

Only the oldest segment is ever removed, after its live records were copied to the tail
and that copy is on disk (:meth:`Ledger.compaction_candidate`, then :meth:`moved` and
:meth:`removed`). So a deletion record is never removed before what it deletes: it always
comes after it in the log, and the log only ever loses its head. A DELIVERED flag
rides along: copying a live enqueue that was delivered writes a fresh DELIVERED record.

No I/O; the journal shell reads the old segment and appends the copies. It keeps the
encoded bytes of the configuration records it knows (written by this broker, or copied by a
pass since the start): when the oldest segment's live records are all such records, which
is the normal case while consumers keep up (each segment holds a copy of the queues and
exchanges, nothing else live), :meth:`Ledger.rewritable` hands them over and the journal
copies them forward without reading the segment.

THREAD UNSAFE: the store's event loop owns it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from operator import itemgetter

from broker.store.id_shards import SHARD_BITS, EnqueueShards, MessageShards
from broker.store.records import CONFIG_KINDS, Kind

try:
    from broker.store import _ledger as native_ledger
except ImportError:  # no C compiler at install: the same operations in Python
    native_ledger = None  # type: ignore[assignment]

#: Compact the oldest segment when less than this share of its records is live.
LIVE_SHARE_TO_COMPACT = 0.5

EnqueueKey = tuple[int, int]  # (queue id, message id)


#: :meth:`Ledger.lookups`: (enqueue key -> segment, message id -> [segment, enqueues],
#: configuration id -> segment), None where there is none.
Lookups = tuple[
    Callable[[EnqueueKey], "int | None"],
    Callable[[int], "list[int] | None"],
    Callable[[int], "int | None"],
]


@dataclass(slots=True)
class SegmentUse:
    records: int = 0
    live: int = 0


class Ledger:
    """Live records per segment (see the module docstring)."""

    def __init__(self) -> None:
        self.segments: dict[int, SegmentUse] = {}
        self._config: dict[int, int] = {}  # object id -> segment
        #: message id -> [segment, enqueues]; enqueue key -> segment (in shards: a dict
        #: of hundreds of thousands resized in one publish, 100 ms at load 16)
        self._messages: MessageShards[list[int]] = MessageShards()
        self._enqueues = EnqueueShards()
        self.delivered: set[EnqueueKey] = set()
        #: object id -> its encoded configuration record, where known, in the log's order
        #: of the live copies (re-inserted when a copy is appended: see :meth:`moved`).
        self._config_records: dict[int, bytes] = {}
        #: The live enqueues' keys by queue id, as of one scan (:meth:`queue_deleted`);
        #: dropped at the next enqueue (None: none).
        self._by_queue: dict[int, list[EnqueueKey]] | None = None

    @classmethod
    def restore(
        cls,
        *,
        records: dict[int, int],
        config: dict[int, int],
        messages: dict[int, list[int]],
        enqueues: dict[EnqueueKey, int],
        delivered: set[EnqueueKey],
    ) -> Ledger:
        """The ledger of a recovered store, in one pass: ``records`` per segment, the segment
        of each live configuration record and enqueue, and each live message's ``[segment,
        live enqueues]``. The set is taken over; the dicts are split into shards
        (:mod:`broker.store.id_shards`; at start-up, before the broker serves)."""
        ledger = cls()
        live: Counter[int] = Counter(config.values())
        live.update(map(itemgetter(0), messages.values()))
        live.update(enqueues.values())
        ledger.segments = {n: SegmentUse(count, live[n]) for n, count in records.items()}
        ledger._config = config
        ledger._messages = MessageShards(messages)
        ledger._enqueues = EnqueueShards(enqueues)
        ledger.delivered = delivered
        return ledger

    # -- what was written ----------------------------------------------------------------
    def opened(self, segment: int) -> SegmentUse:
        """Segment ``segment`` was started: its use (the journal's tail counts into it)."""
        return self.segments.setdefault(segment, SegmentUse())

    def written(self, segment: int, count: int = 1) -> None:
        """``count`` records of any kind were appended to ``segment``."""
        self.segments[segment].records += count

    def _live(self, segment: int, delta: int) -> None:
        use = self.segments.get(segment)
        if use is not None:
            use.live += delta

    def config_created(self, object_id: int, segment: int, record: bytes | None = None) -> None:
        """A configuration record was appended to ``segment``; ``record``: its bytes (the
        whole record, header included), kept so that compaction can copy it unread."""
        self._config[object_id] = segment
        self._live(segment, 1)
        if record is not None:
            self._config_records[object_id] = record

    def config_deleted(self, object_id: int) -> None:
        segment = self._config.pop(object_id, None)
        self._config_records.pop(object_id, None)
        if segment is not None:
            self._live(segment, -1)

    def message_written(self, message_id: int, segment: int) -> None:
        self._messages[message_id] = [segment, 0]
        self._live(segment, 1)

    def enqueued(self, key: EnqueueKey, segment: int) -> None:
        self._by_queue = None
        self._enqueues[key] = segment
        self._live(segment, 1)
        self._messages[key[1]][1] += 1

    def message_enqueued(self, key: EnqueueKey, segment: int) -> None:
        """:meth:`message_written` and :meth:`enqueued` in one (the publish path: a new
        message's content and its first enqueue, appended together to ``segment``)."""
        self._by_queue = None
        _message_enqueued(self._messages, self._enqueues, self.segments, key, segment)

    def dequeued(self, key: EnqueueKey) -> bool:
        """The enqueue ``key`` is settled; False (nothing changed) if it was not live."""
        return _dequeued(self._messages, self._enqueues, self.segments, self.delivered, key)

    def queue_deleted(self, queue_id: int) -> None:
        """Every enqueue on this queue is gone. One scan of every live enqueue indexes them
        by queue, for this deletion and the next ones until an enqueue (a backup's
        snapshot deletes thousands of queues in a row: a scan each was 0.3 ms a queue
        beside 150,000 enqueues). An enqueue dequeued since the scan is skipped (no longer
        live: :meth:`dequeued` changes nothing); one made since drops the index."""
        by_queue = self._by_queue
        if by_queue is None:
            by_queue = self._by_queue = {}
            for key in self._enqueues:
                keys = by_queue.get(key[0])
                if keys is None:
                    by_queue[key[0]] = [key]
                else:
                    keys.append(key)
        for key in by_queue.pop(queue_id, ()):
            self.dequeued(key)

    def has_message(self, message_id: int) -> bool:
        return message_id in self._messages

    def has_enqueue(self, key: EnqueueKey) -> bool:
        return key in self._enqueues

    @property
    def live_messages(self) -> int:
        return len(self._messages)

    # -- compaction ----------------------------------------------------------------------
    def lookups(self) -> Lookups:
        """What :meth:`is_live` asks, as three lookups for a compaction pass's scan of a
        segment (one dict get a record, no call through here): the segment of a live
        enqueue by its key, ``[segment, enqueues]`` of a live message by its id, the segment
        of a live configuration record by its id. They read this ledger as it is at each
        call (views, not copies)."""
        return self._enqueues.get, self._messages.get, self._config.get

    def is_live(self, segment: int, kind: int, ids: tuple[int, ...]) -> bool:
        """Is this record of ``segment`` (its kind and leading ids) still live *there*?"""
        if kind == Kind.ENQUEUE:
            return self._enqueues.get((ids[0], ids[1])) == segment
        if kind == Kind.MESSAGE:
            message = self._messages.get(ids[0])
            return message is not None and message[0] == segment
        if kind in CONFIG_KINDS:
            return self._config.get(ids[0]) == segment
        return False

    def rewritable(self, segment: int) -> list[bytes] | None:
        """The live records of ``segment`` when the ledger can give them without reading
        it: every live record there is a configuration record whose bytes it knows (in the
        order they were appended; recovery applies configuration records by id, so their
        order does not matter). None when one is not (a message, an enqueue, a
        configuration record recovered from disk and not copied since): read the segment."""
        use = self.segments.get(segment)
        if use is None or use.live <= 0:
            return None
        config = self._config
        records = [
            record
            for object_id, record in self._config_records.items()
            if config.get(object_id) == segment
        ]
        return records if len(records) == use.live else None

    def config_copied(self, object_id: int, record: bytes) -> None:
        """A configuration record was copied forward (after :meth:`moved`): its bytes, now
        the newest in the log's order."""
        if object_id in self._config:
            self._config_records.pop(object_id, None)
            self._config_records[object_id] = record

    def moved(self, kind: int, ids: tuple[int, ...], old: int, new: int) -> None:
        """A live record of segment ``old`` was copied to segment ``new``."""
        if kind == Kind.ENQUEUE:
            key = (ids[0], ids[1])
            if self._enqueues.get(key) != old:
                return
            self._enqueues[key] = new
        elif kind == Kind.MESSAGE:
            message = self._messages.get(ids[0])
            if message is None or message[0] != old:
                return
            message[0] = new
        else:
            if self._config.get(ids[0]) != old:
                return
            self._config[ids[0]] = new
        self._live(old, -1)
        self._live(new, 1)

    def compaction_candidate(self, current: int) -> int | None:
        """The oldest segment, when it is not the one being written and little of it is
        live (or nothing); None otherwise."""
        if len(self.segments) < 2:
            return None
        oldest = min(self.segments)
        if oldest == current:
            return None
        use = self.segments[oldest]
        if use.live <= 0 or use.live < use.records * LIVE_SHARE_TO_COMPACT:
            return oldest
        total = sum(u.records for u in self.segments.values())
        live = sum(max(u.live, 0) for u in self.segments.values())
        if total and live < total * LIVE_SHARE_TO_COMPACT / 2:
            return oldest  # mostly garbage overall: copy the head's live records forward
        return None

    def removed(self, segment: int) -> None:
        self.segments.pop(segment, None)


# -- the two per-message operations ---------------------------------------------------------
# Natively where broker/store/_ledger.c is built (one call each on the same objects: the
# shards' dicts, the segments, the delivered set); these are the same operations in Python,
# the reference tests/store/test_native_ledger.py holds the native ones to.


def _py_message_enqueued(
    messages: MessageShards[list[int]],
    enqueues: EnqueueShards,
    segments: dict[int, SegmentUse],
    key: EnqueueKey,
    segment: int,
) -> None:
    messages[key[1]] = [segment, 1]
    enqueues[key] = segment
    use = segments.get(segment)
    if use is not None:
        use.live += 2


def _py_dequeued(
    messages: MessageShards[list[int]],
    enqueues: EnqueueShards,
    segments: dict[int, SegmentUse],
    delivered: set[EnqueueKey],
    key: EnqueueKey,
) -> bool:
    segment = enqueues.pop(key)
    if segment is None:
        return False
    use = segments.get(segment)
    if use is not None:
        use.live -= 1
    if delivered:
        delivered.discard(key)
    gone = messages.drop_one(key[1])
    if gone is not None:  # its last enqueue: the content is no longer live either
        use = segments.get(gone[0])
        if use is not None:
            use.live -= 1
    return True


_Enqueued = Callable[
    [MessageShards[list[int]], EnqueueShards, dict[int, SegmentUse], EnqueueKey, int], None
]
_Dequeued = Callable[
    [
        MessageShards[list[int]],
        EnqueueShards,
        dict[int, SegmentUse],
        set[EnqueueKey],
        EnqueueKey,
    ],
    bool,
]
_message_enqueued: _Enqueued = _py_message_enqueued
_dequeued: _Dequeued = _py_dequeued
if native_ledger is not None and native_ledger.SHARD_BITS == SHARD_BITS:
    _message_enqueued = native_ledger.message_enqueued
    _dequeued = native_ledger.dequeued
