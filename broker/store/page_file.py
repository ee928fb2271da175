"""The file shell of paging: each queue's paged chunks in segment files under the data dir.

:class:`PageFile` is a :class:`~broker.core.paging.PageStore`: chunks are appended to
``<data-dir>/paging/<n>.<segment>.page`` (a new segment past :data:`SEGMENT_BYTES`) and read
back in order with ``pread``; a segment is deleted once read to its end, and every segment
when the queue's tail empties. Only the segment being written and the one being read are
open. Writes are not synced: paging relieves memory, the journal is what keeps messages.

:class:`Pager` gives every queue of a virtual host its :class:`~broker.core.paging.
PagedMessages` (it listens to queue declarations; queues already there are converted when it
is attached) and empties the paging directory at start: pages never outlive the broker. A
priority queue (``x-max-priority``) gets a :class:`~broker.core.priority.PriorityMessages`
whose every priority is a ``PagedMessages`` with its own page file
(``<n>.p<priority>.<segment>.page``), all under the one budget.

THREAD UNSAFE: the broker's event loop owns them (the file calls are plain blocking calls,
of about :data:`~broker.core.paging.CHUNK_BYTES` each, in the page cache).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from broker.core.exchange import Binding, Exchange
from broker.core.paging import PagedMessages, PagingBudget
from broker.core.priority import PriorityMessages
from broker.core.queue import Queue
from broker.core.vhost import VirtualHost
from broker.core.vhosts import VirtualHosts

SEGMENT_BYTES = 64 * 1024 * 1024


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


class PageFile:
    """One queue's page (see the module docstring)."""

    def __init__(self, directory: Path, name: str) -> None:
        self.directory = directory
        self.name = name
        #: [segment number, bytes written] of each live segment, oldest first.
        self._segments: deque[list[int]] = deque()
        self._next_segment = 0
        self._write_fd: int | None = None
        self._read_fd: int | None = None
        self._read_offset = 0

    def _path(self, segment: int) -> Path:
        return self.directory / f"{self.name}.{segment}.page"

    def append(self, data: bytes) -> None:
        segments = self._segments
        if self._write_fd is None or segments[-1][1] >= SEGMENT_BYTES:
            self._close_write()
            number = self._next_segment
            self._next_segment += 1
            fd = os.open(self._path(number), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            segments.append([number, 0])
            self._write_fd = fd
        try:
            _write_all(self._write_fd, data)
        except OSError:
            # A partial chunk must not be read back: cut the segment where it was.
            with contextlib.suppress(OSError):
                os.truncate(self._path(segments[-1][0]), segments[-1][1])
            raise
        segments[-1][1] += len(data)

    def read(self, size: int) -> bytes:
        segments = self._segments
        while segments and self._read_offset >= segments[0][1]:
            self._finish_segment()
        if not segments:
            raise OSError(f"page {self.name}: read past the last chunk")
        number, _written = segments[0]
        if self._read_fd is None:
            self._read_fd = os.open(self._path(number), os.O_RDONLY)
        data = os.pread(self._read_fd, size, self._read_offset)
        if len(data) != size:
            raise OSError(f"page {self._path(number)}: short read at {self._read_offset}")
        self._read_offset += size
        return data

    def read_all(self, sizes: Iterable[int]) -> Iterator[bytes]:
        segments = list(self._segments)
        index, offset = 0, self._read_offset
        for size in sizes:
            while offset >= segments[index][1]:
                index, offset = index + 1, 0
            with open(self._path(segments[index][0]), "rb") as file:
                file.seek(offset)
                data = file.read(size)
            if len(data) != size:
                raise OSError(f"page {self.name}: short read")
            offset += size
            yield data

    def _finish_segment(self) -> None:
        number, _ = self._segments.popleft()
        if self._read_fd is not None:
            os.close(self._read_fd)
            self._read_fd = None
        if not self._segments:
            self._close_write()
        with contextlib.suppress(FileNotFoundError):
            self._path(number).unlink()
        self._read_offset = 0

    def _close_write(self) -> None:
        if self._write_fd is not None:
            os.close(self._write_fd)
            self._write_fd = None

    def clear(self) -> None:
        if not self._segments:
            return
        while self._segments:
            self._finish_segment()
        self._close_write()

    @property
    def segments(self) -> int:
        return len(self._segments)


class Pager:
    """Pages the queues of ``vhost`` under ``directory`` past ``budget`` (a ConfigListener)."""

    def __init__(
        self,
        vhost: VirtualHost | VirtualHosts,
        directory: Path,
        budget: PagingBudget,
        *,
        on_write_failed: Callable[[OSError], None] | None = None,
    ) -> None:
        self.vhost = vhost
        self.directory = directory
        self.budget = budget
        self.on_write_failed = on_write_failed
        self._names = itertools.count(1)
        #: By (vhost, queue): a priority queue's lists are one PagedMessages per priority.
        self.lists: dict[tuple[str, str], PagedMessages | PriorityMessages] = {}

    def start(self) -> Pager:
        """Empty the paging directory, page the queues there now and those declared later."""
        shutil.rmtree(self.directory, ignore_errors=True)
        self.directory.mkdir(parents=True, exist_ok=True)
        for queue in list(self.vhost.queues.values()):
            self.queue_declared(queue)
        self.vhost.listeners.append(self)
        return self

    def stop(self) -> None:
        if self in self.vhost.listeners:
            self.vhost.listeners.remove(self)
        for messages in self.lists.values():
            messages.drop_pages()
        self.lists.clear()

    @property
    def paged(self) -> int:
        """Messages on disk now, over every queue."""
        return sum(m.paged for m in self.lists.values())

    # -- ConfigListener ----------------------------------------------------------------
    def queue_declared(self, queue: Queue) -> None:
        key = (queue.vhost, queue.name)
        if key in self.lists:
            return
        name = str(next(self._names))
        messages: PagedMessages | PriorityMessages
        if queue.limits.max_priority:
            # One paged list (and page file) per priority: each level pages its own tail.
            messages = PriorityMessages(
                queue.limits.max_priority,
                lambda priority: self._paged_list(f"{name}.p{priority}"),
            )
        else:
            messages = self._paged_list(name)
        queue.use_message_list(messages)
        self.lists[key] = messages

    def _paged_list(self, name: str) -> PagedMessages:
        return PagedMessages(
            self.budget,
            PageFile(self.directory, name),
            on_write_failed=self.on_write_failed,
        )

    def queue_deleted(self, queue: Queue) -> None:
        messages = self.lists.pop((queue.vhost, queue.name), None)
        if messages is not None:
            messages.close()

    def exchange_declared(self, exchange: Exchange) -> None:
        pass

    def exchange_deleted(self, exchange: Exchange) -> None:
        pass

    def bound(self, binding: Binding) -> None:
        pass

    def unbound(self, binding: Binding) -> None:
        pass

    def __repr__(self) -> str:
        return f"Pager({str(self.directory)!r}, {len(self.lists)} queues)"
