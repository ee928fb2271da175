"""What a queue asks of the objects around it, and what it tells them.

A :class:`~broker.core.queue.Queue` hands entries to :class:`Consumer` objects (a channel's
subscriptions), asks a :class:`DeliveryGate` (an HA primary's delivery watermark) before it
delivers, answers a :class:`HeldGet` (a basic.get it holds while that gate is closed), tells
each :class:`QueueObserver` of its enqueues and dequeues, and dead-letters through a
``DeadLetter`` callback (``broker.core.queue``). Protocols only, so the core names none of
the packages that implement them. Each is generic in the queue it is handed (``Q``: the
queue module uses ``Consumer[Queue]`` and so on), so this module does not import the
queue's, which imports it.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

from broker.core.message import Entry

#: The queue a contract's methods are handed (``broker.core.queue.Queue``).
Q = TypeVar("Q", contravariant=True)


class Consumer(Protocol[Q]):
    """What a queue needs of a consumer: credit and a way to hand over an entry."""

    tag: str
    exclusive: bool

    def can_deliver(self) -> bool: ...

    def deliver(self, queue: Q, entry: Entry) -> None: ...


class DeliveryGate(Protocol[Q]):
    """Decides whether a queue may deliver a message now (an HA primary's delivery
    watermark, :mod:`broker.ha.delivery_watermark`). Asked only for positions above the
    queue's :attr:`Queue.gate_above`, which the gate sets; once it lets a refused position
    through it calls :meth:`Queue.dispatch`."""

    def may_deliver(self, queue: Q, position: int) -> bool: ...


#: ``Queue.gate_above`` without a gate: no position is above it.
NO_GATE = 2**63


class HeldGet(Protocol[Q]):
    """A basic.get the queue holds: it found ready messages but the delivery gate held
    back the head (:meth:`Queue.hold_get`). Answered once, in the order held: with the
    entry when the gate lets it through (booked as ``get`` books it), or None (get-empty)
    when the queue has no ready message left."""

    def answer(self, queue: Q, entry: Entry | None) -> None: ...


class QueueObserver(Protocol[Q]):
    """Hears a queue's enqueues and dequeues (HA guards, replication)."""

    def enqueued(self, queue: Q, entry: Entry) -> None: ...

    def dequeued(self, queue: Q, entry: Entry) -> None: ...


def consumer_priority(consumer: Consumer[Any]) -> int:
    """A consumer's priority (``x-priority``); consumers without one have 0."""
    priority = getattr(consumer, "priority", 0)
    return priority if isinstance(priority, int) else 0
