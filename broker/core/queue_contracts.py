"""What a queue asks of the objects around it, and what it tells them.

A :class:`~broker.core.queue.Queue` hands entries to :class:`Consumer` objects (a channel's
subscriptions), asks a :class:`DeliveryGate` (an HA primary's delivery watermark) before it
delivers, answers a :class:`HeldGet` (a basic.get it holds while that gate is closed), tells
each :class:`QueueObserver` of its enqueues and dequeues, and dead-letters through a
:data:`DeadLetter` callback. Protocols only, so the core names none of the packages that
implement them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from broker.core.message import Entry

if TYPE_CHECKING:
    from broker.core.queue import Queue


class Consumer(Protocol):
    """What a queue needs of a consumer: credit and a way to hand over an entry."""

    tag: str
    exclusive: bool

    def can_deliver(self) -> bool: ...

    def deliver(self, queue: Queue, entry: Entry) -> None: ...


class DeliveryGate(Protocol):
    """Decides whether a queue may deliver a message now (an HA primary's delivery
    watermark, :mod:`broker.ha.delivery_watermark`). Asked only for positions above the
    queue's :attr:`Queue.gate_above`, which the gate sets; once it lets a refused position
    through it calls :meth:`Queue.dispatch`."""

    def may_deliver(self, queue: Queue, position: int) -> bool: ...


#: ``Queue.gate_above`` without a gate: no position is above it.
NO_GATE = 2**63


class HeldGet(Protocol):
    """A basic.get the queue holds: it found ready messages but the delivery gate held
    back the head (:meth:`Queue.hold_get`). Answered once, in the order held: with the
    entry when the gate lets it through (booked as ``get`` books it), or None (get-empty)
    when the queue has no ready message left."""

    def answer(self, queue: Queue, entry: Entry | None) -> None: ...


class QueueObserver(Protocol):
    """Hears a queue's enqueues and dequeues (HA guards, replication)."""

    def enqueued(self, queue: Queue, entry: Entry) -> None: ...

    def dequeued(self, queue: Queue, entry: Entry) -> None: ...


DeadLetter = Callable[["Queue", Entry, str], None]


def consumer_priority(consumer: Consumer) -> int:
    """A consumer's priority (``x-priority``); consumers without one have 0."""
    priority = getattr(consumer, "priority", 0)
    return priority if isinstance(priority, int) else 0
