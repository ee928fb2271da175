"""What a queue asks of the objects around it, and what it tells them.

A :class:`~broker.core.queue.Queue` hands entries to :class:`Consumer` objects (a channel's
subscriptions), asks a :class:`DeliveryGate` (an HA primary's delivery watermark) before it
delivers, answers a :class:`HeldGet` (a basic.get it holds while that gate is closed), tells
each :class:`QueueObserver` of its enqueues and dequeues (in the order of their
:class:`ObserverRole`), and dead-letters through a ``DeadLetter`` callback
(``broker.core.queue``). :data:`PUBLISH_HOLDS` is what holds a publish's confirm, in the
order the holds are taken, and :data:`CONFIRM_PATH` that sequence with the gate its reply
passes as it is written (:data:`CONFIRM_GATES`): invariant 1 in one place. Protocols
only, so the core names none of the packages that implement them. Each is generic in the
queue it is handed (``Q``: the queue module uses ``Consumer[Queue]`` and so on), so this
module does not import the queue's, which imports it.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum, IntEnum
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

    def enqueued_all(self, queue: Q, entries: Sequence[Entry]) -> None:
        """As :meth:`enqueued` for each of ``entries`` in turn (a backup's run of replicated
        messages, a restore): one call for the run."""
        ...

    def dequeued(self, queue: Q, entry: Entry) -> None: ...

    def dequeued_all(self, queue: Q, entries: Sequence[Entry]) -> None:
        """As :meth:`dequeued` for each of ``entries`` in turn (a multiple acknowledgement,
        a backup's dequeue of a range): one call for the run."""
        ...


class ObserverRole(IntEnum):
    """Who hears a queue's enqueues and dequeues. A queue tells its observers in this
    order (``Queue.observe``), those of one role in the order they came."""

    #: The message store (``broker/store/message_store.py``): writes the enqueue and
    #: dequeue records; holds a persistent message's confirm until its enqueue is on disk.
    STORE = 1
    #: An HA primary's ``QueueGuard``, one per backup it guards: holds the confirm until
    #: that backup acknowledged the message (or it was dequeued, or the backup dropped).
    GUARD = 2
    #: An HA primary's ``ReplicatingSubscription``: notes what to send its backup.
    REPLICATION = 3
    #: Last: an observer that only acts on what the others noted. (The stream carrying a
    #: subscription, ``broker/ha/streams.py``, was one; it now hears of new work through
    #: its subscription's ``on_work``, one call a message and backup fewer.)
    STREAM = 4


class Hold(Enum):
    """A hold on a publish's confirm (``ConfirmHandle.hold``)."""

    ROUTING = "routing"
    DISK = "disk"
    BACKUP = "backup"


#: What holds a publish's confirm, in the order the holds are taken, with who takes each
#: (None: the publishing channel) and what releases it. The channel takes ROUTING when the
#: publish gets its confirm handle and releases it once ``VirtualHost.publish`` returned;
#: meanwhile each queue the message is routed to (in routing order) tells its observers of
#: the enqueue in :class:`ObserverRole` order, and the STORE and each GUARD take their hold
#: there. So every hold is taken before ROUTING is released, and the confirm (basic.ack;
#: basic.nack if a queue refused the message) goes out only once the last is released:
#: invariant 1 of docs/ha-design.md ("What holds a publish"). A tx.commit-ok waits for the
#: same holds on each of its publishes.
PUBLISH_HOLDS: tuple[tuple[Hold, ObserverRole | None, str], ...] = (
    (Hold.ROUTING, None, "routing done: every queue took the message or refused it"),
    (Hold.DISK, ObserverRole.STORE, "the enqueue record is on disk (durable queue)"),
    (Hold.BACKUP, ObserverRole.GUARD, "that backup acknowledged the message, or lost it"),
)


class Gate(Enum):
    """What a settled confirm's reply waits for after its holds, as it is written."""

    #: The broker serves: an HA primary not fenced, whose cluster manager's lease and
    #: member lease hold (``AdmissionPolicy.may_confirm``; always, stand-alone).
    SERVING = "serving"


#: After the holds, the gates a settled confirm's reply passes as its connection writes it,
#: with who asks and what opens each. A gate is a query that changes nothing (the wire asks
#: it; the decisions are taken elsewhere: the HA role fences on its Tick when the cluster
#: manager's lease ran out, the lease keeper notes a lapse), and it holds the reply, never
#: the settlement: the publish stays settled and its reply goes out once the gate opens
#: (woken when the primary serves again), or never (fenced).
CONFIRM_GATES: tuple[tuple[Gate, str, str], ...] = (
    (
        Gate.SERVING,
        "the publisher's connection, as it writes (AdmissionPolicy.may_confirm)",
        "the primary serves: not fenced, both leases hold",
    ),
)

#: The confirm path as one sequence (invariant 1 of docs/ha-design.md, "What holds a
#: publish"): the holds in the order they are taken, then the gates of the reply.
CONFIRM_PATH: tuple[Hold | Gate, ...] = (
    *(hold for hold, _role, _released in PUBLISH_HOLDS),
    *(gate for gate, _asker, _opens in CONFIRM_GATES),
)


def consumer_priority(consumer: Consumer[Any]) -> int:
    """A consumer's priority (``x-priority``); consumers without one have 0."""
    priority = getattr(consumer, "priority", 0)
    return priority if isinstance(priority, int) else 0
