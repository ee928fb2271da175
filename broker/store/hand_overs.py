"""The journal's hand-overs to its group writer thread, and their callbacks (the I/O shell).

The journal (:class:`~broker.store.journal.Journal`) buffers what is appended and, after
each read, between publishes past its mark and at the end of each turn of the loop, hands
it over here (:meth:`HandOvers.submit`). Each hand-over gets the next number; its segment
data go to the writer thread (:mod:`broker.store.group_writer`) as jobs on the segments'
files, opened here on the loop as the data reach a new segment (a file the writer may
still use is closed once it is done with it). The writer signals an eventfd after each
batch; :meth:`HandOvers.reap` then runs, in order, the callbacks of every hand-over done,
each with ``ok`` as the journal's ``written(failure)`` decides from the hand-over's
failure (a full disk), if any.

The journal asks here whether a segment was written whole (compaction reads only such
a segment: :meth:`HandOvers.written_whole`).

THREAD UNSAFE: the journal's event loop; the group writer thread only writes and syncs.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
from collections import deque
from collections.abc import Callable
from pathlib import Path

from broker.store.group_writer import GroupWriter, group_writer
from broker.store.records import MAGIC
from broker.store.segment_files import segment_path

_OPEN_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC

Durable = Callable[[bool], None]


def describe(exc: OSError) -> str:
    """A write error in one line: ``No space left on device (ENOSPC)``."""
    return f"{exc.strerror or exc} ({errno.errorcode.get(exc.errno or 0, '?')})"


class HandOvers:
    """See the module docstring."""

    def __init__(
        self,
        directory: Path,
        *,
        written: Callable[[OSError | None], bool],
        log_event: Callable[..., None],
        native_writer: bool | None = None,
    ) -> None:
        """``written(failure)``: a hand-over is done (``failure``: None, or why its write
        failed); its callbacks are called with what it returns."""
        self.directory = directory
        self._written = written
        self._log_event = log_event
        self._native_writer = native_writer
        self._writer: GroupWriter | None = None
        self._done_fd = -1  # the eventfd the group writer signals
        self._dir_fd = -1  # the store directory, fsynced after a new segment's first write
        self._fd = -1
        self._written_segment = -1  # segment whose file is open for writing
        self._count = 0  # hand-overs to the writer so far
        self._done_upto = 0  # every hand-over up to this one is done
        self._last: dict[int, int] = {}  # segment -> the last hand-over with its bytes
        self._retired: list[tuple[int, int]] = []  # (fd, last hand-over) to close once done
        self._failures: dict[int, OSError] = {}  # hand-over -> its failure, until done
        #: Callbacks per hand-over, run once it is done.
        self.waiting: deque[tuple[int, list[Durable]]] = deque()

    @property
    def started(self) -> bool:
        return self._writer is not None

    def start(self, on_done: Callable[[], None]) -> None:
        """Start the writer thread; ``on_done`` runs on the loop each time it signals
        (it calls :meth:`reap`)."""
        self._done_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._dir_fd = os.open(self.directory, os.O_RDONLY | os.O_CLOEXEC)
        self._writer = group_writer(self._done_fd, native=self._native_writer)
        done_fd = self._done_fd

        def signalled() -> None:
            with contextlib.suppress(BlockingIOError):
                os.eventfd_read(done_fd)
            on_done()

        asyncio.get_running_loop().add_reader(done_fd, signalled)

    def submit(
        self,
        pending: list[tuple[int, bytearray]],
        callbacks: list[Durable],
        sync: bool,
        headers: dict[int, bytes],
    ) -> None:
        """Hand over ``pending`` (segment, data) in order, synced when ``sync``; the
        ``callbacks`` run once it is done. ``headers``: each segment's header, written
        first into a file found empty (one lost after a failed first write)."""
        writer = self._writer
        assert writer is not None
        self._count = number = self._count + 1
        self.waiting.append((number, callbacks))
        last = len(pending) - 1
        for i, (segment, data) in enumerate(pending):
            new_file = segment != self._written_segment
            if new_file:
                if not sync and self._fd >= 0:  # synced whatever the policy: copies may be
                    # in it, and the sync before a compacted segment's deletion is the tail's
                    writer.submit(number, self._fd, None, True, -1, None, False)
                self._switch_file(segment)
            self._last[segment] = number
            writer.submit(
                number,
                self._fd,
                data,
                sync,
                self._dir_fd if new_file and sync else -1,
                None if data.startswith(MAGIC) else headers.get(segment),
                i == last,
            )
        if not pending:  # callbacks only: a sync of what earlier hand-overs wrote
            writer.submit(number, self._fd, None, sync and self._fd >= 0)

    def _switch_file(self, number: int) -> None:
        """On the loop: open segment ``number``'s file; the previous one is closed once
        the writer is done with it."""
        if self._fd >= 0:
            self._retired.append((self._fd, self._count))
        self._fd = -1
        try:
            self._fd = os.open(segment_path(self.directory, number), _OPEN_FLAGS, 0o640)
        except OSError as exc:
            # Its jobs fail (EBADF on -1), their callbacks hear it; a later write tries
            # to open it again.
            self._log_event("error", "store_write_failed", error=describe(exc))
            return
        self._written_segment = number

    def reap(self) -> bool:
        """Run the callbacks of every hand-over the writer is done with, in order; True
        when one of them was written (False too before :meth:`start`)."""
        writer = self._writer
        if writer is None:
            return False
        upto, errors = writer.take_done()
        failures = self._failures
        for number, code in errors:
            failures.setdefault(number, OSError(code, os.strerror(code)))
        if upto > self._done_upto:
            self._done_upto = upto
        waiting = self.waiting
        any_ok = False
        while waiting and waiting[0][0] <= self._done_upto:
            number, callbacks = waiting.popleft()
            ok = self._written(failures.pop(number, None) if failures else None)
            any_ok = any_ok or ok
            for callback in callbacks:
                callback(ok)
        retired = self._retired
        while retired and retired[0][1] <= self._done_upto:
            with contextlib.suppress(OSError):
                os.close(retired.pop(0)[0])
        return any_ok

    def written_whole(self, segment: int) -> bool:
        """Is every byte handed over of ``segment`` written, and the writer past it (its
        file no longer the one written)?"""
        return segment < self._written_segment and self._last.get(segment, 0) <= self._done_upto

    def forget(self, segment: int) -> None:
        """``segment`` was deleted."""
        self._last.pop(segment, None)

    @property
    def syncs(self) -> int:
        return 0 if self._writer is None else self._writer.syncs

    @property
    def bytes_written(self) -> int:
        return 0 if self._writer is None else self._writer.bytes_written

    def close(self) -> None:
        """Stop the writer (nothing may be left to write) and close the files."""
        writer = self._writer
        if writer is not None:
            writer.close()  # nothing is left to write: the thread ends at once
            asyncio.get_running_loop().remove_reader(self._done_fd)
        for fd in [self._fd, self._dir_fd, self._done_fd, *(f for f, _ in self._retired)]:
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._fd = self._dir_fd = self._done_fd = -1
        self._retired.clear()


__all__ = ["Durable", "HandOvers", "describe"]
