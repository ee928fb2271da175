"""The test's reference model of a queue's choice of consumer: :class:`QueueConsumers`.

This is the chooser the broker used until ``broker/core/consumer_ring.py`` replaced it (it
asked every consumer's ``can_deliver`` in turn: O(consumers) per delivery), kept here to
check the ring against (``tests/core/test_consumer_ring.py``). Two changes, both marked
``FIX``, make it mean what its docstring says when consumers come and go: a cancel no
longer moves the turn past the next consumer (the turn was a list index; removing a
consumer before it made it skip one), and the first consumer with a priority no longer
restarts the turn of the consumers already there (it moved from ``_rr`` to a fresh
``_rr_by_priority`` entry); a priority left without consumers forgets its turn.

It was:

Round robin among the consumers with credit (the consumer says so: ``can_deliver``); with
consumer priorities (a consumer's ``priority``, RabbitMQ's ``x-priority``) round robin
among the highest-priority consumers with credit only, each priority keeping its own turn;
with ``x-single-active-consumer`` only the earliest consumer still subscribed, while it has
credit. Consumers of equal priority are served in the order they subscribed.

Owned by a :class:`~broker.core.queue.Queue` (one per queue), which asks
:meth:`QueueConsumers.next_with_credit` before each delivery and reads
:attr:`QueueConsumers.members`; it knows nothing of the queue. No I/O, no clock.

THREAD UNSAFE: one event loop owns the queue.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from broker.core.queue_contracts import Consumer, consumer_priority

C = TypeVar("C", bound="Consumer[Any]")


class QueueConsumers(Generic[C]):
    """See the module docstring."""

    __slots__ = ("_ordered", "_rr", "_rr_by_priority", "_single_active", "members")

    def __init__(self, single_active: bool) -> None:
        #: Every consumer, in serving order (highest priority first, then by subscription).
        self.members: list[C] = []
        self._rr = 0
        self._single_active = single_active
        #: Single active consumer or consumer priorities: choose by _choose_ordered.
        self._ordered = single_active
        self._rr_by_priority: dict[int, int] = {}

    def add(self, consumer: C) -> None:
        members = self.members
        priority = consumer_priority(consumer)
        if priority or self._ordered:
            # Highest priority first; among equals, in the order they subscribed.
            if not self._ordered:  # FIX: priority 0 keeps its turn
                self._rr_by_priority[0] = self._rr
            self._ordered = True
            index = len(members)
            while index and consumer_priority(members[index - 1]) < priority:
                index -= 1
            members.insert(index, consumer)
        else:
            members.append(consumer)

    def remove(self, consumer: C) -> bool:
        """Remove ``consumer``; False when it was not here."""
        members = self.members
        if consumer not in members:
            return False
        index = members.index(consumer)
        priority = consumer_priority(consumer)
        del members[index]
        # FIX: the turn is an index; one removed before it moves it back by one.
        if not self._ordered:
            if index < self._rr:
                self._rr -= 1
            return True
        group_start = index
        while group_start and consumer_priority(members[group_start - 1]) == priority:
            group_start -= 1
        turn = self._rr_by_priority.get(priority, 0)
        if index - group_start < turn:
            self._rr_by_priority[priority] = turn - 1
        if not any(consumer_priority(m) == priority for m in members):
            self._rr_by_priority.pop(priority, None)
        return True

    def has_exclusive(self) -> bool:
        return any(c.exclusive for c in self.members)

    def next_with_credit(self) -> C | None:
        """The consumer for the next message (its turn taken), None when none has credit."""
        if self._ordered:
            return self._choose_ordered()
        consumers = self.members
        count = len(consumers)
        if not count:
            return None
        start = self._rr % count
        for i in range(count):
            candidate = consumers[(start + i) % count]
            if candidate.can_deliver():
                self._rr = (start + i + 1) % count
                return candidate
        return None

    def _choose_ordered(self) -> C | None:
        """The consumer for the next message when the queue has a single active consumer
        (the earliest subscribed, if it has credit) or consumer priorities (round robin
        among the highest-priority consumers with credit)."""
        consumers = self.members
        if self._single_active:
            first = consumers[0] if consumers else None
            return first if first is not None and first.can_deliver() else None
        index, count = 0, len(consumers)
        while index < count:
            priority = consumer_priority(consumers[index])
            end = index + 1
            while end < count and consumer_priority(consumers[end]) == priority:
                end += 1
            size = end - index
            start = self._rr_by_priority.get(priority, 0) % size
            for i in range(size):
                candidate = consumers[index + (start + i) % size]
                if candidate.can_deliver():
                    self._rr_by_priority[priority] = (start + i + 1) % size
                    return candidate
            index = end
        return None
