"""The journal's group writer: a thread that writes and syncs what the event loop hands over.

:class:`ThreadGroupWriter` is the writer in Python; the C one (``broker/store/_group_write.c``,
the same contract) is used when it is built, because a Python thread waits for the GIL
after every system call, and a busy event loop holds it for up to the interpreter's switch
interval each time (docs/benchmarks.md, "Group commit without the GIL").
:func:`group_writer` picks one.

Contract (both):

- ``submit(number, fd, data, sync, dir_fd=-1, header=None, last=True)``: a job of the
  journal's flush ``number`` (``last``: the flush's last one). The thread writes
  ``data`` to ``fd`` (``header`` first when the file is still empty; a failed write is cut
  off again, so that the file ends at a record boundary), in the order of submission, and
  when ``sync`` is set it fdatasyncs the file before it writes another file's job and
  before it reports the job done; ``dir_fd`` (a new segment's directory) is fsynced before
  the job is done. ``data`` may be None (a sync only). ``number`` is the journal's flush
  number; jobs are submitted with numbers that do not decrease.
- After each batch the thread writes 1 to the eventfd ``done_fd``.
  ``take_done()`` (on the loop) returns ``(highest number whose last job is done,
  [(number, errno), ...])``, the second list naming the jobs done since the last call that
  failed (a flush's failures may come before its last job is done).
- ``close()`` finishes every submitted job, then stops the thread.
- ``syncs`` and ``bytes_written``: counters for ``/api/status`` and the bench.

THREAD SAFE: submit and take_done from the event loop's thread, the writer its own.
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Protocol

try:
    from broker.store import _group_write
except ImportError:  # not built (no C compiler at install): the Python writer
    _group_write = None  # type: ignore[assignment]

Buffer = bytes | bytearray | memoryview


class GroupWriter(Protocol):
    syncs: int
    bytes_written: int

    def submit(
        self,
        number: int,
        fd: int,
        data: Buffer | None,
        sync: bool,
        dir_fd: int = -1,
        header: Buffer | None = None,
        last: bool = True,
    ) -> None: ...

    def take_done(self) -> tuple[int, list[tuple[int, int]]]: ...

    def close(self) -> None: ...


class _Job:
    __slots__ = ("data", "dir_fd", "error", "fd", "header", "last", "number", "sync")

    def __init__(
        self,
        number: int,
        fd: int,
        data: Buffer | None,
        sync: bool,
        dir_fd: int,
        header: Buffer | None,
        last: bool,
    ) -> None:
        self.number = number
        self.last = last
        self.fd = fd
        self.data = data
        self.sync = sync
        self.dir_fd = dir_fd
        self.header = header
        self.error = 0


def _write_all(fd: int, data: Buffer) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class ThreadGroupWriter:
    """The group writer in Python (see the module docstring)."""

    def __init__(self, done_fd: int) -> None:
        self.done_fd = done_fd
        self.syncs = 0
        self.bytes_written = 0
        self._cond = threading.Condition()
        self._todo: list[_Job] = []
        self._done: list[_Job] = []
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="store-writer", daemon=True)
        self._thread.start()

    def submit(
        self,
        number: int,
        fd: int,
        data: Buffer | None,
        sync: bool,
        dir_fd: int = -1,
        header: Buffer | None = None,
        last: bool = True,
    ) -> None:
        with self._cond:
            if self._stopping:
                raise RuntimeError("GroupWriter is closed")
            self._todo.append(_Job(number, fd, data, sync, dir_fd, header, last))
            self._cond.notify()

    def take_done(self) -> tuple[int, list[tuple[int, int]]]:
        with self._cond:
            done, self._done = self._done, []
        upto = max((job.number for job in done if job.last), default=0)
        return upto, [(job.number, job.error) for job in done if job.error]

    def close(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join()

    # -- the thread ------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._todo and not self._stopping:
                    self._cond.wait()
                if not self._todo:
                    return
                batch, self._todo = self._todo, []
            self._run_batch(batch)
            with self._cond:
                self._done.extend(batch)
            os.eventfd_write(self.done_fd, 1)

    def _run_batch(self, batch: list[_Job]) -> None:
        current, dirty, run = -1, False, 0
        for i, job in enumerate(batch):
            if job.fd != current:
                if dirty:  # the previous file is synced before the next one is written
                    self._sync(batch[run:i], current)
                current, dirty, run = job.fd, False, i
            job.error = self._write(job)
            dirty = dirty or job.sync
        if dirty:
            self._sync(batch[run:], current)
        for job in batch:
            if job.dir_fd >= 0:
                try:
                    os.fsync(job.dir_fd)
                except OSError as exc:
                    job.error = job.error or exc.errno or 5

    def _write(self, job: _Job) -> int:
        if job.data is None:
            return 0
        try:
            start = os.lseek(job.fd, 0, os.SEEK_END)
        except OSError as exc:
            return exc.errno or 5
        try:
            size = len(job.data)
            if start == 0 and job.header is not None:
                _write_all(job.fd, job.header)
                size += len(job.header)
            _write_all(job.fd, job.data)
        except OSError as exc:
            # Leave no partial record behind: the next write starts at a boundary.
            with contextlib.suppress(OSError):
                os.ftruncate(job.fd, start)
            return exc.errno or 5
        self.bytes_written += size
        return 0

    def _sync(self, jobs: list[_Job], fd: int) -> None:
        self.syncs += 1
        try:
            os.fdatasync(fd)
        except OSError as exc:
            for job in jobs:
                if job.fd == fd and job.sync and not job.error:
                    job.error = exc.errno or 5


def group_writer(done_fd: int, *, native: bool | None = None) -> GroupWriter:
    """The C writer when it is built (or ``native=True``, which then requires it), else
    :class:`ThreadGroupWriter`."""
    if native is None:
        native = _group_write is not None
    if native:
        if _group_write is None:
            raise RuntimeError("broker/store/_group_write.c is not built")
        writer: GroupWriter = _group_write.GroupWriter(done_fd)
        return writer
    return ThreadGroupWriter(done_fd)


#: True when the C writer is built.
NATIVE = _group_write is not None

__all__ = ["NATIVE", "GroupWriter", "ThreadGroupWriter", "group_writer"]
