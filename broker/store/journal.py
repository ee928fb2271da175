"""The journal: the message store's files, with group commit and compaction (the I/O shell).

The record format and recovery are sans-I/O (:mod:`broker.store.records`,
:mod:`broker.store.recovery`, :mod:`broker.store.ledger`); this module reads and writes the
segment files under ``<data-dir>/store/``.

- :meth:`Journal.recover` (blocking, at start) reads every segment, cuts a torn tail off the
  newest one (logging the segment and the offset: :mod:`broker.store.store_files`), and
  opens a new segment for writing.
- :meth:`Journal.append` adds an encoded record to the write buffer (no I/O);
  :meth:`Journal.after_durable` calls back once everything appended so far is as durable
  as the sync policy makes it, with ``ok=False`` if writing it failed (a full disk).
- Group commit ("coalescing sync"): what was appended is handed to the group writer
  thread (:mod:`broker.store.group_writer`, in C when built: it never waits for the GIL;
  the hand-overs and their callbacks: :class:`~broker.store.hand_overs.HandOvers`)
  after each read (:meth:`Journal.hand_over`), between publishes past
  :data:`HAND_OVER_BYTES` (:meth:`Journal.between_publishes`) and at the end of each turn
  of the event loop. The thread takes everything handed over while
  its previous write and sync ran, writes it and syncs it once, and signals an eventfd;
  the loop then runs the callbacks of every hand-over that is done, in order. Concurrent
  publishers share each fsync.
- Sync policies (``--store-sync``): ``fsync`` (``os.fdatasync`` before the callbacks: what
  was confirmed survives a power cut), ``write`` (the callbacks run once the OS has the
  bytes: survives the broker's crash, not the machine's), ``none`` (the callbacks run at
  once; writes happen in the background: a crash loses what was not written yet).
- Compaction: after a write, when the oldest segment is mostly dead (the ledger says so),
  its live records are copied to the tail and, once that copy is durable, its file is
  deleted. It is read only when needed: a segment with nothing live goes at once, and one
  whose live records are configuration records the ledger holds (the usual case while
  consumers keep up) gets them copied from the ledger (:meth:`Ledger.rewritable`).

THREAD UNSAFE: one event loop owns the journal and opens and closes its files; the group
writer thread writes and syncs them; segment deletions run on a worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from enum import StrEnum
from pathlib import Path
from typing import Any

from broker.store.compaction import CompactionPass, Steps
from broker.store.hand_overs import Durable, HandOvers, describe
from broker.store.ledger import Ledger
from broker.store.records import (
    CONFIG_KINDS,
    HEADER,
    RECORD_HEADER,
    Kind,
    encode_queue_entry,
    encode_tx,
    segment_header,
)
from broker.store.recovery import CorruptStore, RecoveredState
from broker.store.segment_files import fsync_directory, segment_path
from broker.store.store_files import StoreError, read_store
from broker.store.tail import Tail, append, new_tail

STORE_DIR = "store"
DEFAULT_SEGMENT_BYTES = 16 * 1024 * 1024
#: Past this many bytes appended since the last hand-over, :meth:`Journal.between_publishes`
#: hands over at once (else at the end of the read or of the loop's turn): the writer
#: starts while the rest of a long read is processed.
HAND_OVER_BYTES = 32 * 1024

#: Where a record's kind is (RECORD_HEADER: length, checksum, kind).
_KIND_AT = RECORD_HEADER.size - 1
_HEADER_SIZE = HEADER.size
_CONFIG_KINDS = CONFIG_KINDS


class SyncPolicy(StrEnum):
    FSYNC = "fsync"
    WRITE = "write"
    NONE = "none"


class Journal:
    """The segment files of one store (see the module docstring)."""

    def __init__(
        self,
        data_dir: Path,
        *,
        sync: SyncPolicy = SyncPolicy.FSYNC,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        log: Any = None,
        on_write_failed: Callable[[OSError], None] | None = None,
        compaction_lag: int = 0,
        native_writer: bool | None = None,
    ) -> None:
        self.directory = Path(data_dir) / STORE_DIR
        self.sync = sync
        self.log = log
        self.on_write_failed = on_write_failed
        self.ledger = Ledger()
        #: What was appended since the last hand-over, the current segment and the counts
        #: (broker/store/tail.py; natively where built).
        self.tail: Tail = new_tail(segment_bytes)
        self._next_id = 1
        self._callbacks: list[Durable] = []
        #: What was handed to the group writer thread, until its callbacks ran.
        self._hand_overs = HandOvers(
            self.directory,
            written=self._written,
            log_event=self.log_event,
            native_writer=native_writer,
        )
        self._headers: dict[int, bytes] = {}  # segment -> its header (rewritten if lost)
        self._force_sync = False  # the next hand-over syncs whatever the policy
        #: Segment deletions (unlink and directory sync), off the loop.
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="store")
        #: Compaction's reads: never queued behind, or ahead of, a group commit.
        self._reader = ThreadPoolExecutor(1, thread_name_prefix="store-compact")
        self.compaction_steps = Steps()
        #: A segment compaction has to read waits until this many later segments were
        #: started (:meth:`_maybe_compact`). The broker uses 1: what was in flight when a
        #: segment was closed is settled a segment later, so it goes unread.
        self.compaction_lag = compaction_lag
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._compacting: int | None = None
        self._compaction: asyncio.Task[None] | None = None
        self._holds = 0  # hot backups holding segment deletions (broker/store/hot_backup.py)
        self._held: tuple[int, int] | None = None  # a compacted segment not yet deleted
        self.failed: str | None = None  # the last write error, while it lasts
        self.write_failures = 0  # writes that failed so far (compaction checks its copies')
        self.compacted_segments = 0  # for /api/status and the bench

    @property
    def current(self) -> int:
        """The segment appends go to."""
        return self.tail.current

    @property
    def segment_bytes(self) -> int:
        return self.tail.limit

    @property
    def appended(self) -> int:
        """Records appended so far (a backup acknowledges a batch that appended some only
        once they are durable)."""
        return self.tail.appended

    # -- start -----------------------------------------------------------------------------
    def recover(self, *, cut_damaged: bool = False) -> RecoveredState:
        """Read the store (blocking; :func:`broker.store.store_files.read_store`). Raises
        :class:`CorruptStore` or :class:`StoreError`; ``cut_damaged`` is
        ``--store-cut-damaged``, the way out of a damaged store."""
        state = read_store(self.directory, cut_damaged=cut_damaged, log_event=self.log_event)
        self.ledger = state.ledger
        self._next_id = state.next_id
        last = max(state.segments, default=0)
        self._open_segment(last + 1)
        return state

    def _open_segment(self, number: int) -> None:
        """Start segment ``number`` in the buffer (its file is created by the writer)."""
        tail = self.tail
        tail.current = number
        tail.use = self.ledger.opened(number)
        header = segment_header(number, self._next_id)
        self._headers[number] = header
        tail.pending.append((number, bytearray(header)))
        tail.size = len(header)
        if self._wake is not None:  # something is pending: the writer hands it over
            self._wake.set()

    def start(self) -> None:
        self._hand_overs.start(self._reap)
        self._wake = asyncio.Event()
        self._task = asyncio.create_task(self._writer(), name="store-writer")
        self._wake.set()  # the new segment's header

    # -- ids and appends -------------------------------------------------------------------
    def new_id(self) -> int:
        value = self._next_id
        self._next_id += 1
        return value

    def append(self, record: bytes, count: int = 1) -> int:
        """Buffer ``count`` encoded records (one string of bytes); returns the segment they
        go to. Inside a :meth:`transaction` they are held and written as one TX record."""
        tail = self.tail
        segment = append(tail, record, count)  # the common case, in one step
        if segment is not None:
            return segment
        size = len(record)
        group = tail.group
        if group is not None:
            group.extend(record)
            tail.size += size
            tail.appended += count
            self.ledger.written(tail.current, count)
            return tail.current
        pending = tail.pending
        if not pending and self._wake is not None:
            # Woken once for what is pending: whatever joins it before the writer's turn
            # goes in the same hand-over (an Event.is_set() call an append was 4 % of the
            # store's path).
            self._wake.set()
        if tail.size + size > tail.limit and tail.size > _HEADER_SIZE:
            self._open_segment(tail.current + 1)
        current = tail.current
        if pending and pending[-1][0] == current:
            pending[-1][1].extend(record)
        else:
            pending.append((current, bytearray(record)))
        tail.size += size
        tail.appended += count
        self.ledger.written(current, count)
        tail.unflushed += size
        return current

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """The records appended inside go to the disk as one TX record (``tx.commit``): a
        crash keeps all of them or none. They go to the segment current at its start."""
        tail = self.tail
        if tail.group is not None:  # nested: the outer one holds them
            yield
            return
        if tail.size > tail.limit:
            self._open_segment(tail.current + 1)
        tail.group = group = bytearray()
        try:
            yield
        finally:
            tail.group = None
            if group:  # to the segment its records were counted in, whatever its size
                framed = encode_tx(group)
                tail.size += len(framed) - len(group)
                current, pending = tail.current, tail.pending
                if pending and pending[-1][0] == current:
                    pending[-1][1].extend(framed)
                else:
                    pending.append((current, bytearray(framed)))
                if self._wake is not None:
                    self._wake.set()

    def after_durable(self, callback: Durable, *, written: bool = False) -> None:
        """Call ``callback(ok)`` once every record appended so far is durable (as the sync
        policy says); at once, with ok, under ``none``. ``written``: once it is written
        whatever the policy (compaction deletes a segment only after its copy is)."""
        if self.sync is SyncPolicy.NONE and not written:
            callback(True)
            return
        callbacks = self._callbacks
        if not callbacks and not self.tail.pending and self._wake is not None:
            self._wake.set()  # else it was set for what is pending (see append)
        callbacks.append(callback)

    # -- the writer ------------------------------------------------------------------------
    async def _writer(self) -> None:
        """Hands what each turn of the loop appended to the group writer thread."""
        wake = self._wake
        assert wake is not None
        while True:
            # Work left is done before waiting again: records a compaction appended while
            # close() waited would otherwise wait for a wake-up nobody sends (a hang at stop).
            if self.tail.pending or self._callbacks:
                self._flush()
            elif self._closing and not self._hand_overs.waiting:
                return
            else:
                await wake.wait()
                wake.clear()

    def _flush(self) -> None:
        tail = self.tail
        pending, tail.pending = tail.pending, []
        callbacks, self._callbacks = self._callbacks, []
        tail.unflushed = 0
        sync = self.sync is SyncPolicy.FSYNC or self._force_sync
        self._force_sync = False
        self._hand_overs.submit(pending, callbacks, sync, self._headers)

    def between_publishes(self) -> None:
        """After a publish is routed: hand over at once past HAND_OVER_BYTES. Only here, never
        between a record and its confirm's callback (a failed write fails the callbacks of
        its own hand-over only)."""
        if self.tail.unflushed >= HAND_OVER_BYTES and self._task is not None and not self._closing:
            self._flush()

    def hand_over(self) -> None:
        """After a read's frames are processed (a turn of the loop can process many): hand
        over now, and run the callbacks of the writes done meanwhile (their confirms go out
        with the connection's next write)."""
        if not self._hand_overs.started or self._closing:
            return
        if self.tail.pending or self._callbacks:
            self._flush()
        self._reap()

    def _reap(self) -> None:
        """Run the callbacks of every hand-over the writer is done with; then, after a
        good write, compact maybe."""
        hand_overs = self._hand_overs
        if not hand_overs.started:
            return
        any_ok = hand_overs.reap()
        if self._closing:
            if self._wake is not None:
                self._wake.set()
        elif any_ok:
            self._maybe_compact()

    def _written(self, failure: OSError | None) -> bool:
        """One hand-over is done: note its failure (or the recovery from earlier ones)."""
        if failure is None:
            if self.failed is not None:
                self.log_event("info", "store_write_recovered")
            self.failed = None
            return True
        if self.on_write_failed is not None:
            self.on_write_failed(failure)
        error = describe(failure)
        if self.failed != error:
            self.log_event("error", "store_write_failed", error=error)
        self.failed = error
        self.write_failures += 1
        return False

    @property
    def syncs(self) -> int:
        return self._hand_overs.syncs

    @property
    def bytes_written(self) -> int:
        return self._hand_overs.bytes_written

    # -- compaction ------------------------------------------------------------------------
    def _maybe_compact(self) -> None:
        while self._compacting is None and not self._closing:
            candidate = self.ledger.compaction_candidate(self.current)
            if candidate is None:
                return
            # Only a segment written whole: none of its bytes still waiting in the buffer,
            # and the writer past it (a later write calls here again).
            if not self._hand_overs.written_whole(candidate) or any(
                n <= candidate for n, _ in self.tail.pending
            ):
                return
            ledger = self.ledger
            if ledger.segments[candidate].live <= 0:
                # Nothing live in it: delete it without reading it, and look at the next one.
                self._compacting = candidate
                self._segment_compacted(candidate, 0, True)
                continue
            records = ledger.rewritable(candidate)
            if records is not None:
                # Its live records are configuration records the ledger holds: copied from
                # there, the segment unread.
                self._compacting = candidate
                compaction = CompactionPass(
                    self, candidate, segment_path(self.directory, candidate)
                )
                for record in records:
                    compaction.copy(record[_KIND_AT], record)
                self._delete_once_written(compaction)
                return
            if candidate + self.compaction_lag >= self.current:
                # Read only once compaction_lag later segments were started: what was still
                # in flight when it was closed is settled by then while consumers keep up.
                return
            self._compacting = candidate
            loop = asyncio.get_running_loop()
            self._compaction = loop.create_task(self._compact(candidate), name="store-compact")
            return

    def _segment_compacted(self, number: int, copied: int, ok: bool) -> None:
        """The live records of the oldest segment are copied (and durable): delete it."""
        if ok and not self._closing and self._holds:
            self._held = (number, copied)  # deleted at release; nothing else compacts
            return
        if ok and not self._closing:
            self._remove_once_synced(number)
            self.ledger.removed(number)
            self._hand_overs.forget(number)
            self.compacted_segments += 1
            self.log_event("info", "store_segment_compacted", segment=number, copied=copied)
        self._compacting = None

    async def _compact(self, number: int) -> None:
        """Copy the live records of segment ``number`` forward (in steps, reading it off
        the loop: :mod:`broker.store.compaction`), then delete it once they are written."""
        compaction = CompactionPass(self, number, segment_path(self.directory, number))
        if not await compaction.run(self._reader):
            if compaction.copies_lost:
                self._copies_lost(compaction)
            return  # else keep _compacting set: never retry a segment that cannot be read
        self._delete_once_written(compaction)

    def _delete_once_written(self, compaction: CompactionPass) -> None:
        """The pass's copies are appended: delete its segment once they are written (or
        count them back in it if a write failed meanwhile)."""

        def written(ok: bool) -> None:
            # Any failed write since the pass began may have dropped copies, even one of an
            # earlier group than this callback's.
            if ok and self.write_failures == compaction.failures_before:
                self._segment_compacted(compaction.number, compaction.copied, True)
            else:
                self._copies_lost(compaction)

        self.after_durable(written, written=True)

    async def compaction_pause(self) -> None:
        """Between two steps of a compaction pass: the event loop's turn."""
        await asyncio.sleep(0)

    @property
    def closing(self) -> bool:
        return self._closing

    @property
    def compacting(self) -> int | None:
        """The segment being compacted (or kept after a failed pass), None otherwise."""
        return self._compacting

    def copy_if_live(
        self, number: int, kind: int, ids: tuple[int, ...], record: bytes
    ) -> int | None:
        """Compaction: append ``record`` (one whole record of segment ``number``, known by
        ``ids``) if it is live; the segment it went to, else None."""
        ledger = self.ledger
        if not ledger.is_live(number, kind, ids):
            return None
        segment = self.append(record)
        ledger.moved(kind, ids, number, segment)
        if kind in _CONFIG_KINDS:
            ledger.config_copied(ids[0], record)
        elif kind == Kind.ENQUEUE and (ids[0], ids[1]) in ledger.delivered:
            self.append(encode_queue_entry(Kind.DELIVERED, ids[0], ids[1]))
        return segment

    def _copies_lost(self, compaction: CompactionPass) -> None:
        """A write of the pass's copies failed (a full disk): the ledger counts them in the
        tail, where some are not. Count them back in the segment, which stays, and compact
        it again after a later write (copies that were written are read twice: harmless)."""
        compaction.undo()
        self.log_event(
            "error",
            "store_compaction_failed",
            segment=str(compaction.path),
            error="the copies could not be written; the segment stays, compacted again later",
        )
        self._compacting = None

    def _remove_once_synced(self, number: int) -> None:
        """Delete segment ``number`` once the copies of its live records (written) are
        durable whatever the policy: a hand-over that syncs comes first."""

        def synced(ok: bool) -> None:
            if ok:  # else it stays; recovery reads its records and their copies: harmless
                self._executor.submit(self._remove_segment, number)

        self._force_sync = True
        self._callbacks.append(synced)
        if self._wake is not None:
            self._wake.set()

    def _remove_segment(self, number: int) -> None:
        """Worker thread: unlink a compacted segment (and sync the directory)."""
        with contextlib.suppress(FileNotFoundError):
            segment_path(self.directory, number).unlink()
        if self.sync is SyncPolicy.FSYNC:
            with contextlib.suppress(OSError):
                fsync_directory(self.directory)

    # -- hot backup ------------------------------------------------------------------------
    def seal(self) -> int:
        """Hot backup: the segment written so far is closed (appends go to a new one) and
        compaction deletes no segment until :meth:`release`. Returns the sealed segment; its
        records and every older segment's are on disk once an ``after_durable(written=True)``
        registered after this call has run."""
        self._holds += 1
        sealed = self.current
        self._open_segment(sealed + 1)
        if self._wake is not None:
            self._wake.set()
        return sealed

    def release(self) -> None:
        """The end of a :meth:`seal`'s hold: a segment compaction finished meanwhile goes."""
        self._holds -= 1
        if self._holds == 0 and self._held is not None:
            number, copied = self._held
            self._held = None
            self._segment_compacted(number, copied, True)
            if not self._closing:
                self._maybe_compact()

    # -- stop ------------------------------------------------------------------------------
    async def close(self) -> bool:
        """Write and sync everything appended, close the files; True when all of it is on
        disk (the store may then be marked clean)."""
        self._closing = True
        ok = True
        compaction = self._compaction
        if compaction is not None and not compaction.done():
            compaction.cancel()  # the segment stays; copies appended so far are written
            with contextlib.suppress(asyncio.CancelledError):
                await compaction
        if self._task is not None and self._wake is not None:
            done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

            def finished(good: bool) -> None:
                if not done.done():
                    done.set_result(good)

            self._force_sync = True  # whatever the policy: a clean stop leaves it on disk
            self._callbacks.append(finished)
            self._wake.set()
            ok = await done
            self._wake.set()
            await self._task
        self._hand_overs.close()
        self._executor.shutdown(wait=True)
        self._reader.shutdown(wait=True)
        return ok and self.failed is None

    def log_event(self, level: str, event: str, **fields: Any) -> None:
        if self.log is not None:
            getattr(self.log, level)(event, **fields)


__all__ = ["CorruptStore", "Journal", "StoreError", "SyncPolicy"]
