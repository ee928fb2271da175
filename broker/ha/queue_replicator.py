"""QueueReplicator: the backup's side of one queue's replication.

It owns the backup's copy of a replicated queue. On (re)connect it reports the replication
ids it holds (:meth:`ids`, sent in the subscribe request); then it applies the batches the
primary's :class:`~broker.ha.replicating_subscription.ReplicatingSubscription` sends:
an ``Enqueue`` adds the message at its replication id (ids are the queue positions on every
broker), a ``Dequeue`` removes ids, ``Ready`` marks this queue caught up. The backup
acknowledges a batch once :meth:`apply` has returned, so the primary may then release the
publisher confirms it held.

A backup never delivers to clients, never expires or dead-letters on its own: those happen
on the primary and arrive as dequeues.

THREAD UNSAFE: the backup's event loop owns it.
"""

from __future__ import annotations

from broker.core.message import Message
from broker.core.queue import Queue
from broker.ha.id_set import IdSet
from broker.ha.wire import Dequeue, Enqueue, Event, Ready


class QueueReplicator:
    """Applies one queue's replication stream to the local copy."""

    def __init__(self, queue: Queue) -> None:
        self.queue = queue
        self.caught_up = False
        self.enqueued_total = 0
        self.dequeued_total = 0

    def ids(self) -> IdSet:
        """Replication ids held locally (the reconnect handshake's ``qpid.ha-ids``)."""
        ids = IdSet()
        for entry in self.queue.snapshot():
            ids.add(entry.position)
        return ids

    def apply(self, events: list[Event]) -> None:
        """Apply one batch, in order. Raises ValueError for a malformed message."""
        queue = self.queue
        for event in events:
            if isinstance(event, Enqueue):
                message = Message(event.exchange, event.routing_key, event.properties, event.body)
                queue.enqueue(message, position=event.id)
                self.enqueued_total += 1
            elif isinstance(event, Dequeue):
                self.dequeued_total += queue.remove_positions(event.ids, len(event.ids))
            elif isinstance(event, Ready):
                self.caught_up = True
