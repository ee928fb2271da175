"""The queue as a copy: entries at positions given from outside, not numbered here.

A queue's message store gives back what it held at a restart (:meth:`CopyMethods.restore`,
in bulk), an HA backup's replicator enqueues the primary's messages at the primary's ids
(``Queue.enqueue`` with a ``position``: one older than the newest here goes in id order,
:meth:`CopyMethods._insert_replicated`) and applies its dequeues
(:meth:`CopyMethods.remove_positions`); replication and the store read every message,
ready or unacknowledged, by position (:meth:`CopyMethods.snapshot`).

:class:`CopyMethods` is a part of :class:`~broker.core.queue.Queue` (as the channel's
methods are parts of ``Channel``); it keeps no state of its own.

THREAD UNSAFE: one event loop owns the queue.
"""

from __future__ import annotations

from abc import abstractmethod
from collections import deque
from collections.abc import Container
from operator import attrgetter
from typing import TYPE_CHECKING, cast

from broker.core.message import Entry, Message
from broker.core.queue_contracts import Consumer, QueueObserver

if TYPE_CHECKING:
    from broker.core.queue import Queue

_by_position = attrgetter("position")


class CopyMethods:
    """Restore, replicated inserts and removals, snapshots; see the module docstring."""

    # Set by Queue.__init__ (broker/core/queue.py).
    _messages: deque[Entry]
    _bytes: int
    _consumers: list[Consumer]
    _unacked_entries: dict[int, Entry]
    last_position: int
    enqueued_total: int
    observers: list[QueueObserver]

    if TYPE_CHECKING:  # provided by Queue

        @abstractmethod
        def dispatch(self) -> None: ...

        @abstractmethod
        def _expiry(self, message: Message, now: float) -> float | None: ...

        @abstractmethod
        def _notify_enqueued(self, entry: Entry) -> None: ...

        @abstractmethod
        def _notify_dequeued(self, entry: Entry) -> None: ...

    def restore(self, entries: list[Entry], body_bytes: int | None = None) -> None:
        """Put back entries recovered from the message store, as ``enqueue`` would one by one
        at their positions (ascending) but in bulk: no limits (they were admitted before),
        their expiry times and delivery counts as the store gives them. Observers are told of
        each (the store detaches itself: it restores them). ``body_bytes``: the sum of their
        body sizes when the caller knows it (the store's recovery counts it on the way)."""
        if not entries:
            return
        messages = self._messages
        if entries[0].position <= self.last_position:  # below what is here: merge in order
            merged = sorted([*messages, *entries], key=_by_position)
            messages.clear()
            messages.extend(merged)
        else:
            messages.extend(entries)
        self.last_position = max(self.last_position, entries[-1].position)
        if body_bytes is None:
            body_bytes = sum([len(entry.message.body) for entry in entries])
        self._bytes += body_bytes
        self.enqueued_total += len(entries)
        for observer in self.observers:
            for entry in entries:
                observer.enqueued(cast("Queue", self), entry)
        if self._consumers:
            self.dispatch()

    def _insert_replicated(self, message: Message, position: int, now: float) -> bool:
        """A replicated message older than the newest one here: insert in id order."""
        entry = Entry(message, position, self._expiry(message, now))
        merged = sorted([*self._messages, entry], key=lambda e: e.position)
        self._messages.clear()
        self._messages.extend(merged)
        self._bytes += len(message.body)
        self.enqueued_total += 1
        self._notify_enqueued(entry)
        if self._consumers:
            self.dispatch()
        return True

    def snapshot(self) -> list[Entry]:
        """Every message on the queue, ready or delivered but unacknowledged, by position."""
        entries = [*self._messages, *self._unacked_entries.values()]
        entries.sort(key=_by_position)
        return entries

    def remove_positions(self, positions: Container[int], expected: int | None = None) -> int:
        """Remove ready messages at these positions (a backup applying dequeues).

        With ``expected`` (how many positions there are), the queue is not scanned past
        its head once that many were found there: the usual case, consumers on the primary
        taking messages from the front. A priority queue looks at the head of each priority
        (a message of a higher priority may have come after those the primary delivered):
        a paged queue is not read and rewritten whole for an acknowledgement.
        """
        messages = self._messages
        removed = 0
        heads = getattr(messages, "pop_heads", None)  # a priority queue: each priority's head
        if heads is not None:
            for entry in heads(positions, expected):
                self._bytes -= len(entry.message.body)
                self._notify_dequeued(entry)
                removed += 1
        while messages and messages[0].position in positions:
            entry = messages.popleft()
            self._bytes -= len(entry.message.body)
            self._notify_dequeued(entry)
            removed += 1
        if expected is not None and removed >= expected:
            return removed
        if messages and any(e.position in positions for e in messages):
            kept: list[Entry] = []
            for entry in messages:
                if entry.position in positions:
                    self._bytes -= len(entry.message.body)
                    self._notify_dequeued(entry)
                    removed += 1
                else:
                    kept.append(entry)
            messages.clear()
            messages.extend(kept)
        return removed
