"""Who hears a queue's enqueues and dequeues, and in what order: :class:`QueueObservers`.

A :class:`~broker.core.queue.Queue` owns one. Its members are the queue's observers (the
message store, an HA primary's guards, replicating subscriptions and the streams carrying
them: :class:`~broker.core.queue_contracts.QueueObserver`), kept in the order of their
:class:`~broker.core.queue_contracts.ObserverRole` and, within a role, in the order they
came: the order in which they hear each enqueue, and so the order in which a publish's
holds are taken (:data:`~broker.core.queue_contracts.PUBLISH_HOLDS`). Whoever watches a
queue registers through ``Queue.observe`` and ``Queue.unobserve``; nobody edits the list.

The queue hands itself to each call (the observers are told which queue spoke): this
object keeps no reference back to it. No I/O, no clock.

THREAD UNSAFE: one event loop owns the queue.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Generic, TypeVar

from broker.core.message import Entry
from broker.core.queue_contracts import ObserverRole, QueueObserver

__all__ = ["QueueObservers"]

#: The queue the observers are told about (``broker.core.queue.Queue``).
Q = TypeVar("Q")


class QueueObservers(Generic[Q]):
    """A queue's observers in role order (see the module docstring)."""

    __slots__ = ("_roles", "members")

    def __init__(self) -> None:
        #: Told of every enqueue and dequeue, in :class:`ObserverRole` order: read it,
        #: never edit it (:meth:`add`, :meth:`remove`).
        self.members: list[QueueObserver[Q]] = []
        self._roles: dict[int, ObserverRole] = {}

    def add(self, observer: QueueObserver[Q], role: ObserverRole) -> None:
        """Tell ``observer`` from now on: after the observers of earlier roles and those of
        ``role`` already here, before those of later roles."""
        members, roles = self.members, self._roles
        at = len(members)
        while at and roles.get(id(members[at - 1]), ObserverRole.STREAM) > role:
            at -= 1
        members.insert(at, observer)
        roles[id(observer)] = role

    def remove(self, observer: QueueObserver[Q]) -> None:
        """Stop telling ``observer`` (nothing when it was not told)."""
        if observer in self.members:
            self.members.remove(observer)
            self._roles.pop(id(observer), None)

    def enqueued(self, queue: Q, entry: Entry) -> None:
        for observer in self.members:
            observer.enqueued(queue, entry)

    def enqueued_all(self, queue: Q, entries: Sequence[Entry]) -> None:
        """Each observer told of all of ``entries`` in turn, in one call
        (``QueueObserver.enqueued_all``): entries the queue took at once."""
        if entries:
            for observer in self.members:
                observer.enqueued_all(queue, entries)

    def dequeued(self, queue: Q, entry: Entry) -> None:
        for observer in self.members:
            observer.dequeued(queue, entry)

    def dequeued_all(self, queue: Q, entries: Sequence[Entry]) -> None:
        """Each observer told of all of ``entries`` in turn, in one call
        (``QueueObserver.dequeued_all``): entries that left the queue together."""
        if entries:
            for observer in self.members:
                observer.dequeued_all(queue, entries)
