"""A queue's consumers, and whose turn is next, without scanning them: :class:`ConsumerRing`.

Who is served (unchanged from the scanning chooser it replaced, which
``tests/core/reference_chooser.py`` keeps as the test's reference): round robin among the
consumers with credit (the consumer says so: ``can_deliver``); with consumer priorities (a
consumer's ``priority``, RabbitMQ's ``x-priority``) round robin among the highest-priority
consumers with credit only, each priority keeping its own turn; with
``x-single-active-consumer`` only the earliest consumer still subscribed (the highest
priority first), while it has credit. Consumers of equal priority are served in the order
they subscribed; the turn passes to the first one with credit after the last served, in
that order, wrapping round.

How, without asking every consumer: each consumer gets a subscription number, and each
priority level keeps the sorted numbers of its consumers not known to lack credit (its
*ready* list) and the number of the last one served. The next is the first ready number
after that one (a bisection, wrapping round; a round ends with the latest subscribed, so a
consumer that subscribes meanwhile waits for the next round). A ready consumer found
without credit is *parked*: out of the ready list until
:meth:`ConsumerRing.credit_returned` says it may have credit again. So a choice asks
``can_deliver`` of the consumer it returns and of each consumer at most once each time that
consumer runs out of credit; the lists are searched by bisection and kept by C-level
insertion, never walked in Python.

Contract: whoever may give a consumer its credit back (an acknowledgement, basic.qos,
channel.flow, a socket writable again, an AMQP 1.0 flow) calls :meth:`credit_returned`
(through :meth:`~broker.core.queue.Queue.credit_returned`) before the queue dispatches
again. A parked consumer never told so is never asked again.

Owned by a :class:`~broker.core.queue.Queue` (one per queue), which asks
:meth:`ConsumerRing.next_with_credit` before each delivery and reads
:attr:`ConsumerRing.members`; it knows nothing of the queue. No I/O, no clock.

THREAD UNSAFE: one event loop owns the queue.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from typing import Any, Generic, TypeVar

from broker.core.queue_contracts import Consumer, consumer_priority

C = TypeVar("C", bound="Consumer[Any]")


class _Level:
    """The consumers of one priority: their ready subscription numbers and the turn."""

    __slots__ = ("last_served", "numbers", "priority", "ready")

    def __init__(self, priority: int) -> None:
        self.priority = priority
        #: Subscription numbers of this level's consumers not known to lack credit, sorted.
        self.ready: list[int] = []
        #: The subscription number of the last consumer served; -1: none yet, or the last
        #: served was the latest subscribed (a round ends there: those who subscribed
        #: since wait for the next round, as they did with the scanning chooser).
        self.last_served = -1
        #: Subscription numbers of every consumer of this priority (ready or parked), sorted.
        self.numbers: list[int] = []


class ConsumerRing(Generic[C]):
    """See the module docstring."""

    __slots__ = (
        "_by_number",
        "_exclusive",
        "_level_of",
        "_levels",
        "_next_number",
        "_parked",
        "_place",
        "_single_active",
        "members",
    )

    def __init__(self, single_active: bool) -> None:
        #: Every consumer, in serving order (highest priority first, then by subscription).
        self.members: list[C] = []
        self._single_active = single_active
        #: The priority levels with consumers, highest first.
        self._levels: list[_Level] = []
        self._level_of: dict[int, _Level] = {}
        #: id(consumer) -> (its level, its subscription number), for every member.
        self._place: dict[int, tuple[_Level, int]] = {}
        self._by_number: dict[int, C] = {}
        #: id(consumer) -> consumer, for the members found without credit.
        self._parked: dict[int, C] = {}
        self._next_number = 0
        self._exclusive = 0

    # -- membership --------------------------------------------------------------------
    def add(self, consumer: C) -> None:
        members = self.members
        priority = consumer_priority(consumer)
        # Highest priority first; among equals, in the order they subscribed.
        index = len(members)
        while index and consumer_priority(members[index - 1]) < priority:
            index -= 1
        members.insert(index, consumer)
        level = self._level_of.get(priority)
        if level is None:
            level = self._level_of[priority] = _Level(priority)
            levels = self._levels
            at = len(levels)
            while at and levels[at - 1].priority < priority:
                at -= 1
            levels.insert(at, level)
        number = self._next_number
        self._next_number = number + 1
        self._by_number[number] = consumer
        self._place[id(consumer)] = (level, number)
        level.ready.append(number)  # numbers only grow: still sorted
        level.numbers.append(number)
        if consumer.exclusive:
            self._exclusive += 1

    def remove(self, consumer: C) -> bool:
        """Remove ``consumer``; False when it was not here."""
        place = self._place.pop(id(consumer), None)
        if place is None:
            return False
        level, number = place
        self.members.remove(consumer)
        del self._by_number[number]
        if self._parked.pop(id(consumer), None) is None:
            ready = level.ready
            del ready[bisect_left(ready, number)]
        if consumer.exclusive:
            self._exclusive -= 1
        numbers = level.numbers
        del numbers[bisect_left(numbers, number)]
        if not numbers:  # the level's turn goes with its last consumer
            del self._level_of[level.priority]
            self._levels.remove(level)
        return True

    def clear(self) -> list[C]:
        """Remove every consumer; returns them in serving order."""
        members = list(self.members)
        self.members.clear()
        self._levels.clear()
        self._level_of.clear()
        self._place.clear()
        self._by_number.clear()
        self._parked.clear()
        self._exclusive = 0
        return members

    def has_exclusive(self) -> bool:
        return self._exclusive > 0

    # -- credit ------------------------------------------------------------------------
    def credit_returned(self, consumer: C | None = None) -> None:
        """``consumer`` (None: any of them) may have credit again: ask it at its next turn."""
        parked = self._parked
        if not parked:
            return
        if consumer is None:
            back = list(parked.values())
            parked.clear()
        else:
            one = parked.pop(id(consumer), None)
            if one is None:
                return
            back = [one]
        place = self._place
        for member in back:
            level, number = place[id(member)]
            insort(level.ready, number)

    @property
    def parked(self) -> int:
        """Consumers found without credit and not told of credit since."""
        return len(self._parked)

    @property
    def all_parked(self) -> bool:
        """Would :meth:`next_with_credit` return None without asking anyone? (Every member
        parked: none told of credit since it was found without. Never with a single active
        consumer, which is asked each time.)"""
        return not self._single_active and len(self._parked) == len(self.members)

    # -- the choice --------------------------------------------------------------------
    def next_with_credit(self) -> C | None:
        """The consumer for the next message (its turn taken), None when none has credit."""
        if self._single_active:
            members = self.members
            if members and members[0].can_deliver():
                return members[0]
            return None
        by_number = self._by_number
        for level in self._levels:
            ready = level.ready
            while ready:
                index = bisect_right(ready, level.last_served)
                if index == len(ready):
                    index = 0
                number = ready[index]
                consumer = by_number[number]
                if consumer.can_deliver():
                    level.last_served = -1 if number == level.numbers[-1] else number
                    return consumer
                del ready[index]
                self._parked[id(consumer)] = consumer
        return None
