"""Ready messages of a priority queue (``x-max-priority``): highest priority first, and in
order of arrival (queue position) within a priority, as RabbitMQ delivers them.

:class:`PriorityMessages` stands in for the :class:`collections.deque` a plain queue keeps
its ready entries in, with the operations :class:`~broker.core.queue.Queue` uses: append
(by the message's ``priority`` property, capped at the queue's maximum; none is 0),
popleft and ``[0]`` (the head: the oldest entry of the highest priority held), extendleft
(entries given back, each put in position order within its priority), extend, clear, len
and iteration (delivery order). A backup replicating the queue holds the same arguments,
so it keeps the same order and a promoted backup delivers as the primary would have. No I/O.

Paging (:mod:`broker.core.paging`): with a memory budget, each priority's entries are a
:class:`~broker.core.paging.PagedMessages` of their own (:meth:`PriorityMessages.page_levels`
or the ``levels`` factory; the pager gives each its own page file), all sharing the broker's
budget: a level keeps a head in memory and pages its tail, in position order, so delivery is
still highest priority first and in order of arrival within a priority. A level emptied
keeps its list (and page file name) for the next message of that priority.

THREAD UNSAFE: the queue's event loop.
"""

from __future__ import annotations

from bisect import insort
from collections import deque
from collections.abc import Callable, Container, Iterable, Iterator
from typing import SupportsIndex

from broker.core import properties
from broker.core.message import Entry
from broker.core.paging import PagedMessages

#: Makes the list of one priority's entries (given the priority).
LevelFactory = Callable[[int], deque[Entry]]

#: The highest ``x-max-priority`` (RabbitMQ's limit).
MAX_PRIORITY = 255


def message_priority(entry: Entry) -> int:
    """The entry's ``priority`` property, 0 when unset."""
    try:
        return properties.scan(entry.message.properties_raw).priority
    except ValueError:  # checked when published: not expected here
        return 0


def _memory_level(_priority: int) -> deque[Entry]:
    return deque()


class PriorityMessages(deque[Entry]):
    """See the module docstring. The deque it subclasses stays empty: entries live in one
    deque per priority held."""

    def __init__(self, max_priority: int, levels: LevelFactory | None = None) -> None:
        super().__init__()
        self.max_priority = max_priority
        self._new_level: LevelFactory = levels or _memory_level
        #: One list per priority seen; those holding entries are in ``_order``.
        self._levels: dict[int, deque[Entry]] = {}
        #: The priorities held, as negative numbers in ascending order (highest first).
        self._order: list[int] = []
        self._size = 0

    def _level(self, entry: Entry) -> deque[Entry]:
        priority = min(message_priority(entry), self.max_priority)
        level = self._levels.get(priority)
        if level is None:
            level = self._levels[priority] = self._new_level(priority)
        if not level:
            insort(self._order, -priority)
        return level

    def page_levels(self, levels: LevelFactory) -> None:
        """Keep each priority's entries in ``levels(priority)`` from now on (a
        :class:`~broker.core.paging.PagedMessages`); moves those already here, in order."""
        self._new_level = levels
        for priority, old in list(self._levels.items()):
            level = self._levels[priority] = levels(priority)
            level.extend(old)

    @property
    def paged(self) -> int:
        """Entries on disk now, over every priority."""
        return sum([getattr(level, "paged", 0) for level in self._levels.values()])

    def drop_pages(self) -> None:
        """Remove every priority's page files (the broker stops)."""
        for level in self._levels.values():
            if isinstance(level, PagedMessages):
                level.drop_pages()

    def close(self) -> None:
        """The queue is gone: give back its memory and its pages."""
        self.clear()
        self._levels.clear()

    def priority_counts(self) -> dict[int, int]:
        """How many ready entries each priority held has."""
        return {-p: len(self._levels[-p]) for p in self._order}

    # -- the deque operations Queue uses ------------------------------------------------
    def append(self, entry: Entry, /) -> None:
        self._level(entry).append(entry)
        self._size += 1

    def extend(self, entries: Iterable[Entry], /) -> None:
        for entry in entries:
            self.append(entry)

    def extendleft(self, entries: Iterable[Entry], /) -> None:
        """Entries given back: each goes where its position puts it within its priority."""
        for entry in entries:
            level = self._level(entry)
            if not level or entry.position < level[0].position:
                level.extendleft((entry,))
            elif isinstance(level, PagedMessages):
                level.insert_in_order(entry)
            else:
                index = len(level)
                while index and level[index - 1].position > entry.position:
                    index -= 1
                level.insert(index, entry)
            self._size += 1

    def popleft(self) -> Entry:
        if not self._order:
            raise IndexError("pop from an empty PriorityMessages")
        level = self._levels[-self._order[0]]
        entry = level.popleft()
        self._size -= 1
        if not level:
            self._order.pop(0)
        return entry

    def pop_heads(self, positions: Container[int], expected: int | None = None) -> list[Entry]:
        """Take the entries at ``positions`` found at the head of their priority, highest
        priority first, until ``expected`` are taken (a backup applying the primary's
        dequeues: what the primary delivered came from the heads)."""
        taken: list[Entry] = []
        for priority in list(self._order):
            if expected is not None and len(taken) >= expected:
                break
            level = self._levels[-priority]
            while level and level[0].position in positions:
                taken.append(level.popleft())
            if not level:
                self._order.remove(priority)
        self._size -= len(taken)
        return taken

    def __getitem__(self, index: SupportsIndex, /) -> Entry:  # type: ignore[override]
        position = index.__index__()
        if position == 0 and self._order:
            return self._levels[-self._order[0]][0]
        if position < 0:
            position += self._size
        if not 0 <= position < self._size:
            raise IndexError("PriorityMessages index out of range")
        for entry in self:
            if position == 0:
                return entry
            position -= 1
        raise IndexError("PriorityMessages index out of range")  # pragma: no cover

    def clear(self) -> None:
        for priority in self._order:
            self._levels[-priority].clear()
        self._order.clear()
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def __bool__(self) -> bool:
        return self._size > 0

    def __iter__(self) -> Iterator[Entry]:
        for priority in list(self._order):
            yield from self._levels[-priority]

    def __repr__(self) -> str:
        return f"PriorityMessages(max={self.max_priority}, {self.priority_counts()})"
