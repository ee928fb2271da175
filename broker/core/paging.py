"""Paging: the ready messages of queues longer than memory, kept on disk past a budget.

The broker-wide :class:`PagingBudget` counts what ready messages cost in memory (body bytes
plus :data:`ENTRY_OVERHEAD` each). A queue's :class:`PagedMessages` is the deque of its ready
messages (:meth:`broker.core.queue.Queue.use_message_list`): while the budget has room, an
appended entry stays in memory; once it is spent, or while the queue already has a paged
tail, the entry goes to the tail instead. The tail is written in chunks of about
:data:`CHUNK_BYTES` through a :class:`PageStore` (the file shell is
:mod:`broker.store.page_file`) and read back a chunk at a time, in order, when the messages
in memory run out (a delivery, a ``basic.get``, an expiry at the head). So a queue is a
head in memory followed by a tail on disk, and its order is the order of positions.

Nothing of a paged entry stays in memory but one ``(bytes, count)`` pair per chunk. An entry
whose message still has an unsettled publisher confirm, or belongs to a transaction (the HA
streams read ``Message.tx``), keeps its :class:`~broker.core.message.Message` object in a
side table, so what comes back is the very object the confirm holders and observers know;
every other paged message comes back as an equal copy (exchange, routing key, raw
properties, body, the store id, and the entry's position, expiry and delivery count).

Entries are encoded only when a chunk is written, never while they are being enqueued: the
queue's observers (the message store sets ``Message.store_id``) have run by then.

Paging is memory relief, not durability: page files are transient and removed at start; the
journal keeps persistent messages. Rare whole-queue operations (replication snapshots,
inserting a replicated message out of order, a requeue that must merge) read the tail
without taking it into memory; a purge reads it back a chunk at a time.

THREAD UNSAFE: one event loop owns the queues and the budget.
"""

from __future__ import annotations

import itertools
import math
import struct
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol, SupportsIndex

from broker.core.message import Entry, Message

#: What an entry costs in memory beyond its body (Entry, Message, strings, deque slot).
ENTRY_OVERHEAD = 400
#: Paged entries are written and read in chunks of about this size.
CHUNK_BYTES = 64 * 1024

# position, expires_at (NaN: none), delivery_count, store_id, lengths of exchange,
# routing key, properties and body.
_RECORD = struct.Struct(">qdIQBBII")


class PagingBudget:
    """The memory ready messages may use before queues page (``limit`` 0: never page)."""

    __slots__ = ("limit", "used")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def has_room(self, cost: int) -> bool:
        return not self.limit or self.used + cost <= self.limit


class PageStore(Protocol):
    """Where one queue's paged chunks go: written in order, read back in the same order."""

    def append(self, data: bytes) -> None:
        """Write one chunk after the others."""
        ...

    def read(self, size: int) -> bytes:
        """Read the oldest chunk not read yet (``size`` bytes, as appended)."""
        ...

    def read_all(self, sizes: Iterable[int]) -> Iterator[bytes]:
        """The chunks not read yet, oldest first, leaving them unread."""
        ...

    def clear(self) -> None:
        """Forget every chunk (the queue emptied its tail or was deleted)."""
        ...


def cost(entry: Entry) -> int:
    return len(entry.message.body) + ENTRY_OVERHEAD


def encode_entries(entries: Iterable[Entry]) -> bytes:
    """Entries as one chunk of records."""
    out = bytearray()
    pack = _RECORD.pack
    for entry in entries:
        message = entry.message
        exchange = message.exchange.encode()
        routing_key = message.routing_key.encode()
        expires_at = math.nan if entry.expires_at is None else entry.expires_at
        out += pack(
            entry.position,
            expires_at,
            entry.delivery_count,
            getattr(message, "store_id", 0),
            len(exchange),
            len(routing_key),
            len(message.properties_raw),
            len(message.body),
        )
        out += exchange
        out += routing_key
        out += message.properties_raw
        out += message.body
    return bytes(out)


def decode_entries(data: bytes, kept: dict[int, Message]) -> list[Entry]:
    """The entries of one chunk; a message in ``kept`` (by position) is taken from there."""
    entries: list[Entry] = []
    unpack = _RECORD.unpack_from
    head = _RECORD.size
    view = memoryview(data)
    pos = 0
    end = len(data)
    while pos < end:
        position, expires_at, count, store_id, n_ex, n_rk, n_props, n_body = unpack(data, pos)
        pos += head
        message = kept.pop(position, None)
        if message is None:
            exchange = str(view[pos : pos + n_ex], "utf-8")
            pos += n_ex
            routing_key = str(view[pos : pos + n_rk], "utf-8")
            pos += n_rk
            props = bytes(view[pos : pos + n_props])
            pos += n_props
            message = Message(exchange, routing_key, props, bytes(view[pos : pos + n_body]))
            if store_id:
                setattr(message, "store_id", store_id)  # noqa: B010 (set by the store)
            pos += n_body
        else:
            pos += n_ex + n_rk + n_props + n_body
        entry = Entry(message, position, None if math.isnan(expires_at) else expires_at)
        entry.delivery_count = count
        entries.append(entry)
    if pos != end:
        raise ValueError(f"page chunk of {end} bytes has a record running to {pos}")
    return entries


#: Stands in the deque for each paged entry, so that ``len`` and truth are the deque's own.
PAGED = Entry(Message("", ""), -1, None)


class PagedMessages(deque[Entry]):
    """A queue's ready messages: a deque in memory, then a tail paged out.

    Supports what :class:`~broker.core.queue.Queue` does with its deque: ``append``,
    ``extend``, ``extendleft``, ``popleft``, ``[0]``, ``len``, truth, iteration and
    ``clear``. Each paged entry is :data:`PAGED` in the deque (8 bytes), so ``len`` and
    truth cost nothing extra; only ``append`` and ``popleft`` are Python calls on the
    delivery path.
    """

    def __init__(
        self,
        budget: PagingBudget,
        store: PageStore,
        *,
        on_write_failed: Callable[[OSError], None] | None = None,
        chunk_bytes: int = CHUNK_BYTES,
    ) -> None:
        super().__init__()
        self.chunk_bytes = chunk_bytes
        self.budget = budget
        self.store = store
        #: Told when a chunk could not be written (the entries stay in memory meanwhile).
        self.on_write_failed = on_write_failed
        self._write_at = self.chunk_bytes
        #: Paged entries (the PAGED tail): in written chunks, then in ``_pending``.
        self.paged = 0
        self._chunks: deque[tuple[int, int]] = deque()
        self._pending: list[Entry] = []
        self._pending_bytes = 0
        self._kept: dict[int, Message] = {}
        self.chunks_written = 0
        self.chunks_read = 0

    # -- the deque's interface -----------------------------------------------------------
    def append(self, entry: Entry) -> None:
        size = len(entry.message.body) + ENTRY_OVERHEAD
        budget = self.budget
        if not self.paged and (not budget.limit or budget.used + size <= budget.limit):
            deque.append(self, entry)
            budget.used += size
            return
        self._page(entry, size)

    def adopt(self, entries: deque[Entry], body_bytes: int) -> None:
        """:meth:`extend` with what a queue already knows: the sum of the entries' body
        sizes (Queue.use_message_list, 1M recovered entries at a restart: no second pass)."""
        budget = self.budget
        size = body_bytes + ENTRY_OVERHEAD * len(entries)
        if not self.paged and (not budget.limit or budget.used + size <= budget.limit):
            deque.extend(self, entries)
            budget.used += size
            return
        self.extend(entries)

    def extend(self, entries: Iterable[Entry]) -> None:
        entries = list(entries)
        if not self.paged:  # all in memory if all fit: as many appends would do, in bulk
            size = sum([len(entry.message.body) for entry in entries])
            size += ENTRY_OVERHEAD * len(entries)
            budget = self.budget
            if not budget.limit or budget.used + size <= budget.limit:
                deque.extend(self, entries)
                budget.used += size
                return
        for entry in entries:
            self.append(entry)

    def extendleft(self, entries: Iterable[Entry]) -> None:
        entries = list(entries)
        deque.extendleft(self, entries)
        self.budget.used += sum(cost(e) for e in entries)

    def popleft(self) -> Entry:
        entry = deque.popleft(self)
        if entry is PAGED:
            deque.appendleft(self, entry)
            self._load_head()
            entry = deque.popleft(self)
        self.budget.used -= len(entry.message.body) + ENTRY_OVERHEAD
        return entry

    def __getitem__(self, index: SupportsIndex) -> Entry:  # type: ignore[override]
        entry = deque.__getitem__(self, index)
        if entry is PAGED:
            if int(index) != 0:
                raise IndexError("only the head of a paged queue can be looked at")
            self._load_head()
            entry = deque.__getitem__(self, 0)
        return entry

    def __iter__(self) -> Iterator[Entry]:
        if not self.paged:  # nothing on disk: the deque's own iterator, at C speed
            return deque.__iter__(self)
        return self._iter_with_pages()

    def _iter_with_pages(self) -> Iterator[Entry]:
        paged = self._iter_paged()
        for entry in deque.__iter__(self):
            yield next(paged) if entry is PAGED else entry

    def clear(self) -> None:
        self.budget.used -= sum(cost(e) for e in deque.__iter__(self) if e is not PAGED)
        deque.clear(self)
        self._drop_tail()

    def close(self) -> None:
        """The queue is gone: give back its memory and its pages."""
        self.clear()

    # -- paging ------------------------------------------------------------------------
    @property
    def in_memory(self) -> int:
        return deque.__len__(self) - self.paged

    def _page(self, entry: Entry, size: int) -> None:
        if self._pending_bytes >= self._write_at:
            self._write_pending()
        self._pending.append(entry)
        self._pending_bytes += size
        self.paged += 1
        deque.append(self, PAGED)

    def _write_pending(self) -> None:
        # Observers of every pending entry have run (see the module docstring).
        pending = self._pending
        data = encode_entries(pending)
        try:
            self.store.append(data)
        except OSError as exc:
            # Keep them in memory; try again one chunk later (the disk alarm is raised).
            self._write_at = self._pending_bytes + self.chunk_bytes
            if self.on_write_failed is not None:
                self.on_write_failed(exc)
            return
        self._write_at = self.chunk_bytes
        self._chunks.append((len(data), len(pending)))
        self.chunks_written += 1
        for entry in pending:
            message = entry.message
            confirm = message.confirm
            if message.tx is not None or (confirm is not None and not confirm.settled):
                self._kept[entry.position] = message
        self._pending = []
        self._pending_bytes = 0

    def _next_chunk(self) -> list[Entry]:
        if self._chunks:
            size, count = self._chunks.popleft()
            entries = decode_entries(self.store.read(size), self._kept)
            if len(entries) != count:
                raise ValueError(f"page chunk held {len(entries)} entries, expected {count}")
            self.chunks_read += 1
            return entries
        entries, self._pending, self._pending_bytes = self._pending, [], 0
        return entries

    def insert_in_order(self, entry: Entry) -> None:
        """Put ``entry`` before the first entry of a later position (a requeue in the middle
        of a priority level: :mod:`broker.core.priority`). The entries in memory are looked
        at first; only when every one of them is older is the oldest paged chunk read back
        (a requeued entry belongs before the tail it was delivered ahead of)."""
        position = entry.position
        index = 0
        while True:
            for held in itertools.islice(deque.__iter__(self), index, None):
                if held is PAGED or held.position > position:
                    break
                index += 1
            else:
                break  # every entry is older: it goes last
            if held is not PAGED:
                break
            self._load_chunk_at(index)
        deque.insert(self, index, entry)
        self.budget.used += cost(entry)

    def drop_pages(self) -> None:
        """Remove the page files (the broker stops; pages never outlive it)."""
        self.store.clear()

    def _load_head(self) -> None:
        """Replace the PAGED entries at the head by the oldest paged chunk."""
        self._load_chunk_at(0)

    def _load_chunk_at(self, index: int) -> None:
        """Replace the first PAGED entries (the tail starts at ``index``, after the entries
        in memory) by the oldest paged chunk."""
        entries = self._next_chunk()
        if index:
            self.rotate(-index)
        for _ in entries:
            if deque.popleft(self) is not PAGED:
                raise AssertionError("paged entries are not after those in memory")
        self.paged -= len(entries)
        deque.extendleft(self, reversed(entries))
        if index:
            self.rotate(index)
        self.budget.used += sum(cost(e) for e in entries)
        if not self.paged:
            self._drop_tail()

    def _iter_paged(self) -> Iterator[Entry]:
        """The paged entries, oldest first, read without taking them."""
        kept = dict(self._kept)
        for chunk in self.store.read_all(size for size, _ in self._chunks):
            yield from decode_entries(chunk, kept)
        yield from self._pending

    def _drop_tail(self) -> None:
        self.store.clear()
        self._chunks.clear()
        self._pending = []
        self._pending_bytes = 0
        self._write_at = self.chunk_bytes
        self._kept.clear()
        self.paged = 0
