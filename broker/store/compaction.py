"""A compaction pass over one segment, in small steps (the I/O shell's part of compaction).

The ledger (:mod:`broker.store.ledger`) says which records of the oldest segment are still
live; a pass copies those to the tail of the log, and the journal deletes the segment once
the copies are written and synced (:meth:`~broker.store.journal.Journal._segment_compacted`).
A pass must not stall the event loop that serves every connection, nor the store's writer
whose group commits release the publishers' confirms, however large the segment:

- **Reads off the loop, in chunks.** The segment is read :data:`READ_BYTES` at a time (a
  record larger than that in one read of its size) by its own thread, not the writer's: a
  slow read never holds a group commit, and the pass holds about one chunk in memory, not
  the segment.
- **Small steps on the loop.** What needs the ledger (is this record live? then its
  checksum and its copy) runs on the loop, at most :attr:`Steps.records` records or
  :attr:`Steps.bytes` bytes checked and copied between two turns of the loop.
- **The writer keeps up.** Once :attr:`Steps.backlog` bytes of copies are appended and not yet
  written, the pass waits for the writer to write them (a group commit that carries the
  confirms waiting with them), so a group commit carries a bounded share of copies.

A crash at any step leaves the segment whole on disk and some of its live records copied
(written twice): recovery reads the same state either way (records name what they change
by id; the copies come after what they copy and before anything that cancels them). A
failed write (a full disk) during a pass may have dropped copies the ledger already counts
in the tail: the pass is undone in the ledger (:meth:`CompactionPass.undo`), the segment
stays, and it is compacted again after a later write.

THREAD UNSAFE: the journal's event loop runs the pass; the reader thread only reads.
"""

from __future__ import annotations

import asyncio
import os
import struct
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

from crc32c import crc32c

from broker.store.ledger import Ledger
from broker.store.records import CONFIG_KINDS, HEADER, RECORD_HEADER, Kind, iter_tx

#: Bytes of a segment read at a time (off the loop).
READ_BYTES = 1 << 20


@dataclass(frozen=True)
class Steps:
    """How far a pass goes between two turns of the loop (``Journal.compaction_steps``)."""

    #: At most this many records looked at...
    records: int = 512
    #: ... and at most this many bytes checked and copied.
    bytes: int = 256 * 1024
    #: Copies appended and not yet written before the pass waits for the writer.
    backlog: int = 1 << 20


class SegmentReader:
    """Reads one segment file in chunks on its own thread (see the module docstring)."""

    def __init__(self, path: os.PathLike[str] | str, executor: ThreadPoolExecutor) -> None:
        self.path = path
        self._executor = executor
        self._fd = -1
        self._size = 0  # of the file: a segment compacted is written whole, never grows
        self._offset = HEADER.size  # the next byte to read
        self._buffer = b""
        self._pos = 0  # the next record in the buffer

    async def open(self) -> None:
        loop = asyncio.get_running_loop()
        self._fd, self._size = await loop.run_in_executor(self._executor, _open, self.path)

    def close(self) -> None:
        """Closed on the reader's thread, after a read still under way (a cancelled pass)."""
        if self._fd >= 0:
            try:
                self._executor.submit(os.close, self._fd)
            except RuntimeError:  # the reader is shut down: nothing reads any more
                os.close(self._fd)
            self._fd = -1

    async def more(self, pos: int) -> bytes | None:
        """The scan is done with the buffer up to ``pos`` (what follows is no whole record):
        the buffer from there on, read further until it holds the next whole record (at 0),
        None at the end of the segment. Raises :class:`EOFError` for a record that runs past
        the end of the file: only a torn tail cut at recovery could end a segment early, so
        it is damage."""
        header = RECORD_HEADER.size
        if pos:
            self._buffer = self._buffer[pos:]  # less than a record: a short copy
        while True:
            buffer = self._buffer
            available = len(buffer)
            need = header
            if available >= header:
                need += RECORD_HEADER.unpack_from(buffer, 0)[0]
                if available >= need:
                    return buffer
            left = self._size - self._offset
            if left <= 0 or need - available > left:
                if available == 0 and left <= 0:
                    return None
                raise EOFError(
                    f"a record at offset {self.offset_of(0)} runs past the end ({self._size} bytes)"
                )
            await self._read(min(left, max(READ_BYTES, need - available)))

    def offset_of(self, pos: int) -> int:
        """The file offset of ``pos`` in the buffer :meth:`more` returned."""
        return self._offset - len(self._buffer) + pos

    async def _read(self, size: int) -> None:
        loop = asyncio.get_running_loop()
        chunk = await loop.run_in_executor(self._executor, os.pread, self._fd, size, self._offset)
        if not chunk:
            raise EOFError(f"the segment ends at {self._offset}, not at {self._size}")
        self._offset += len(chunk)
        self._buffer = self._buffer + chunk if self._buffer else chunk


def _open(path: os.PathLike[str] | str) -> tuple[int, int]:
    fd = os.open(path, os.O_RDONLY)
    try:
        return fd, os.fstat(fd).st_size
    except OSError:
        os.close(fd)
        raise


class CompactingJournal(Protocol):
    """What a compaction pass needs of the journal it compacts (the port; the journal
    implements it: :class:`broker.store.journal.Journal`)."""

    #: Writes that failed so far: a pass checks its copies' writes by this count.
    write_failures: int
    #: How far a pass goes between two turns of the loop.
    compaction_steps: Steps
    #: Which segment holds which live record.
    ledger: Ledger

    @property
    def closing(self) -> bool: ...

    def copy_if_live(
        self, number: int, kind: int, ids: tuple[int, ...], record: bytes
    ) -> int | None: ...

    def after_durable(self, callback: Callable[[bool], None], *, written: bool = False) -> None: ...

    async def compaction_pause(self) -> None: ...

    def log_event(self, level: str, event: str, **fields: Any) -> None: ...


class CompactionPass:
    """Copies the live records of segment ``number`` forward, in steps; ``True`` from
    :meth:`run` once every record was looked at (the segment may go once they are written),
    ``False`` when the pass stopped (the journal closes, a damaged record, a read error)."""

    def __init__(
        self, journal: CompactingJournal, number: int, path: os.PathLike[str] | str
    ) -> None:
        self.journal = journal
        self.number = number
        self.path = path
        self.copied = 0  # records copied
        #: (kind, ids, segment) of each record copied: what :meth:`undo` counts back.
        self.moves: list[tuple[int, tuple[int, ...], int]] = []
        #: The pass stopped because a write of its copies failed.
        self.copies_lost = False
        #: The journal's failed writes when the pass began (any later one may hold copies).
        self.failures_before = journal.write_failures
        self.steps = 0  # turns of the loop given back
        self._backlog = 0

    async def run(self, executor: ThreadPoolExecutor) -> bool:
        reader = SegmentReader(self.path, executor)
        try:
            await reader.open()
            return await self._scan(reader)
        except OSError as exc:
            self._failed(exc.strerror or str(exc))
            return False
        except EOFError as exc:
            self._failed(str(exc))
            return False
        finally:
            reader.close()

    async def _scan(self, reader: SegmentReader) -> bool:
        """Looks at every record of the segment, a step at a time. Most are dead (a
        consumed message's content, enqueue and dequeue), so the loop over a buffer's
        records is one header unpack and at most one dict get per record, with no call
        and no await; the loop's turns come between steps and reads (nothing else runs
        meanwhile, so :attr:`Journal.closing` is looked at after each await only)."""
        journal = self.journal
        number = self.number
        unpack = RECORD_HEADER.unpack_from
        header = RECORD_HEADER.size
        steps = journal.compaction_steps
        max_records, max_bytes = steps.records, steps.bytes
        records = nbytes = 0  # of this step
        data = await reader.more(0)
        pos = 0
        while data is not None:
            if journal.closing:
                return False
            # Fetched after each await: the ledger may have been replaced meanwhile.
            enqueue_at, message_at, config_at = journal.ledger.lookups()
            size = len(data)
            while pos + header <= size:
                length, crc, kind = unpack(data, pos)
                end = pos + header + length
                if end > size:
                    break  # not whole in this buffer: read on
                records += 1
                # A committed transaction's live records are copied one by one (its all or
                # none was for the crash during its commit, long past); a record, if live.
                if kind == _ENQUEUE:
                    live = enqueue_at(_IDS.unpack_from(data, pos + header)) == number
                elif kind == _MESSAGE:
                    message = message_at(_ID.unpack_from(data, pos + header)[0])
                    live = message is not None and message[0] == number
                elif kind in _CONFIG:
                    live = config_at(_ID.unpack_from(data, pos + header)[0]) == number
                else:
                    live = kind == _TX
                if live:
                    nbytes += end - pos
                    # Only what is copied is checked: a damaged record is never carried on.
                    if crc32c(memoryview(data)[pos + 8 : end]) != crc:
                        self._failed(f"checksum mismatch at offset {reader.offset_of(pos)}")
                        return False
                    if kind != _TX:
                        self.copy(kind, data[pos:end])
                    else:
                        payload = data[pos + header : end]
                        inner = 0
                        for inner_kind, inner_payload in iter_tx(payload):
                            record_size = header + len(inner_payload)
                            self.copy(inner_kind, payload[inner : inner + record_size])
                            inner += record_size
                pos = end
                if records >= max_records or nbytes >= max_bytes:
                    records = nbytes = 0
                    if not await self._pause():
                        return False
                    enqueue_at, message_at, config_at = journal.ledger.lookups()
            data = await reader.more(pos)
            pos = 0
        return not journal.closing

    def copy(self, kind: int, record: bytes) -> None:
        """Copy ``record`` (whole, of this segment) forward if it is live."""
        ids = leading_ids(record, 0, kind)
        segment = self.journal.copy_if_live(self.number, kind, ids, record)
        if segment is not None:
            self.copied += 1
            self._backlog += len(record)
            self.moves.append((kind, ids, segment))

    def undo(self) -> None:
        """The copies may not all be on disk: the ledger counts each record copied (and
        not settled since) in this segment again."""
        ledger = self.journal.ledger
        for kind, ids, segment in self.moves:
            ledger.moved(kind, ids, segment, self.number)
        self.moves.clear()

    async def _pause(self) -> bool:
        """Between two steps: give the loop a turn, and once the copies not yet written
        pass :attr:`Steps.backlog`, wait until the writer has written them."""
        self.steps += 1
        journal = self.journal
        await journal.compaction_pause()
        if self._backlog >= journal.compaction_steps.backlog and not journal.closing:
            self._backlog = 0
            written: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

            def done(ok: bool) -> None:
                if not written.done():
                    written.set_result(ok)

            journal.after_durable(done, written=True)
            if not await written or journal.write_failures != self.failures_before:
                self.copies_lost = True
                return False
        return not journal.closing

    def _failed(self, error: str) -> None:
        journal = self.journal
        journal.log_event("error", "store_compaction_failed", segment=str(self.path), error=error)


_IDS = struct.Struct(">QQ")
_ID = struct.Struct(">Q")
# The kinds as plain ints for the scan's loop (an IntEnum member is an attribute lookup).
_ENQUEUE = int(Kind.ENQUEUE)
_MESSAGE = int(Kind.MESSAGE)
_TX = int(Kind.TX)
_CONFIG = CONFIG_KINDS


def leading_ids(data: bytes, offset: int, kind: int) -> tuple[int, ...]:
    """The ids a live record is known by: (queue, message) of an enqueue, else its own."""
    start = offset + RECORD_HEADER.size
    if kind == Kind.ENQUEUE:
        return _IDS.unpack_from(data, start)
    if kind == Kind.MESSAGE or kind in CONFIG_KINDS:
        return _ID.unpack_from(data, start)
    return ()
