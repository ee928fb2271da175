"""The queue as a copy: entries at positions given from outside, not numbered here.

A queue's message store gives back what it held at a restart (:meth:`QueueCopy.restore`,
in bulk), an HA backup's replicator enqueues the primary's messages at the primary's ids
(``Queue.enqueue`` with a ``position``: one older than the newest here goes in id order,
:meth:`QueueCopy.insert_replicated`) and applies its dequeues
(:meth:`QueueCopy.remove_positions`); replication and the store read every message,
ready or unacknowledged, by position (:meth:`QueueCopy.snapshot`).

:class:`QueueCopy` is owned by a :class:`~broker.core.queue.Queue` (one per queue) and
keeps no state of its own: it works on the queue's ready messages through a
:class:`CopyHost` (the ready list, the unacknowledged entries, the newest position, a
message's expiry, and the bookkeeping of entries put in or taken out), nothing else of the
queue. Call direction: the queue calls its copy, the copy calls its host.

THREAD UNSAFE: one event loop owns the queue.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Container, Iterable, Sequence
from operator import attrgetter
from typing import Protocol

from broker.core.message import Entry, Message

_by_position = attrgetter("position")


class CopyHost(Protocol):
    """What a :class:`QueueCopy` needs of its queue."""

    #: Position of the newest entry (the HA replication id of that message).
    last_position: int

    @property
    def ready(self) -> deque[Entry]:
        """The ready messages, in position order (per priority on a priority queue)."""
        ...

    def unacked_entries(self) -> Iterable[Entry]:
        """The delivered, unacknowledged entries."""
        ...

    def expiry(self, message: Message, now: float) -> float | None:
        """When a message put on the queue ``now`` expires (None: never)."""
        ...

    def added(self, entries: Sequence[Entry], body_bytes: int) -> None:
        """``entries`` (their bodies ``body_bytes`` in all) were put among the ready
        messages: count them, tell the observers of each, dispatch."""
        ...

    def removed(self, entry: Entry) -> None:
        """``entry`` was taken from the ready messages for good: uncount it, tell the
        observers."""
        ...

    def removed_all(self, entries: Sequence[Entry]) -> None:
        """As :meth:`removed` for each of ``entries``, the observers told of the run at once."""
        ...


class QueueCopy:
    """Restore, replicated inserts and removals, snapshots; see the module docstring."""

    __slots__ = ("_host",)

    def __init__(self, host: CopyHost) -> None:
        self._host = host

    def restore(self, entries: list[Entry], body_bytes: int | None = None) -> None:
        """Put back entries recovered from the message store, as ``enqueue`` would one by one
        at their positions (ascending) but in bulk: no limits (they were admitted before),
        their expiry times and delivery counts as the store gives them. Observers are told of
        each (the store detaches itself: it restores them). ``body_bytes``: the sum of their
        body sizes when the caller knows it (the store's recovery counts it on the way)."""
        if not entries:
            return
        host = self._host
        messages = host.ready
        if entries[0].position <= host.last_position:  # below what is here: merge in order
            merged = sorted([*messages, *entries], key=_by_position)
            messages.clear()
            messages.extend(merged)
        else:
            messages.extend(entries)
        host.last_position = max(host.last_position, entries[-1].position)
        if body_bytes is None:
            body_bytes = sum([len(entry.message.body) for entry in entries])
        host.added(entries, body_bytes)

    def insert_replicated(self, message: Message, position: int, now: float) -> bool:
        """A replicated message older than the newest one here: insert in id order."""
        host = self._host
        entry = Entry(message, position, host.expiry(message, now))
        messages = host.ready
        merged = sorted([*messages, entry], key=lambda e: e.position)
        messages.clear()
        messages.extend(merged)
        host.added((entry,), len(message.body))
        return True

    def snapshot(self) -> list[Entry]:
        """Every message on the queue, ready or delivered but unacknowledged, by position."""
        host = self._host
        entries = [*host.ready, *host.unacked_entries()]
        entries.sort(key=_by_position)
        return entries

    def _remove_head_ranges(self, ranges: Iterable[tuple[int, int]]) -> int:
        """Remove the ready messages at the head whose positions lie in ``ranges``
        (ascending, inclusive), up to the first that does not; how many. The head is walked
        along the ranges: a comparison a message, not a lookup in a set (the backup's
        dequeue path). The observers hear of them as one run (``removed_all``)."""
        taken = self._take_head_ranges(ranges)
        self._host.removed_all(taken)
        return len(taken)

    def _take_head_ranges(self, ranges: Iterable[tuple[int, int]]) -> list[Entry]:
        messages = self._host.ready
        popleft = messages.popleft
        taken: list[Entry] = []
        take = taken.append
        for first, last in ranges:
            while messages:
                position = messages[0].position
                if position > last:
                    break  # the next range, maybe
                if position < first:
                    return taken  # a head not to remove: no further
                take(popleft())
            if not messages:
                break
        return taken

    def remove_positions(self, positions: Container[int], expected: int | None = None) -> int:
        """Remove ready messages at these positions (a backup applying dequeues).

        With ``expected`` (how many positions there are), the queue is not scanned past
        its head once that many were found there: the usual case, consumers on the primary
        taking messages from the front. A priority queue looks at the head of each priority
        (a message of a higher priority may have come after those the primary delivered):
        a paged queue is not read and rewritten whole for an acknowledgement.
        """
        host = self._host
        messages = host.ready
        removed_one = host.removed
        removed = 0
        heads = getattr(messages, "pop_heads", None)  # a priority queue: each priority's head
        if heads is not None:
            for entry in heads(positions, expected):
                removed_one(entry)
                removed += 1
        ranges = getattr(positions, "ranges", None)  # an IdSet: its ascending (first, last)
        if heads is None and ranges is not None:
            removed += self._remove_head_ranges(ranges())
        else:
            while messages and messages[0].position in positions:
                entry = messages.popleft()
                removed_one(entry)
                removed += 1
        if expected is not None and removed >= expected:
            return removed
        if messages and any(e.position in positions for e in messages):
            kept: list[Entry] = []
            for entry in messages:
                if entry.position in positions:
                    removed_one(entry)
                    removed += 1
                else:
                    kept.append(entry)
            messages.clear()
            messages.extend(kept)
        return removed
