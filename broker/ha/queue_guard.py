"""QueueGuard: withholds publisher confirms until one backup has the message.

One guard per replicated queue x expected backup, on the primary. From the moment it is
created, every message enqueued on the queue takes a hold on its publisher confirm
(:class:`~broker.core.confirms.ConfirmHandle`). The hold is released when

- the backup acknowledges the message's replication id (:meth:`acknowledged`),
- the message leaves the queue on the primary: consumed and acknowledged, expired,
  purged... (:meth:`dequeued`, heard as a queue observer), or
- the backup is dropped: disconnected, silent too long, or not back before
  ``ha-backup-timeout`` (:meth:`cancel` releases everything).

So a confirm goes out only when every expected backup has the message or it was consumed:
invariant 1 of the architecture. Messages published without confirms are not tracked.

``first_guarded`` is the position of the first message the guard covers; the backup is
caught up on this queue once it holds everything before it (Qpid's "guard position").

Deliveries wait for the same backups: a guard is a member of its queue's
:class:`~broker.ha.delivery_watermark.DeliveryWatermark` from creation to :meth:`cancel`.

THREAD UNSAFE: the primary's event loop owns the guard. Call direction: the replicating
subscription calls the guard, never the reverse.
"""

from __future__ import annotations

from broker.core.confirms import ConfirmHandle
from broker.core.message import Entry
from broker.core.queue import Queue
from broker.ha.delivery_watermark import DeliveryWatermark


class QueueGuard:
    """Holds the confirms of one queue's new messages on behalf of one backup."""

    def __init__(self, queue: Queue, backup: str) -> None:
        self.queue = queue
        self.backup = backup
        self.first_guarded = queue.last_position + 1
        self._held: dict[int, ConfirmHandle] = {}
        self.cancelled = False
        queue.observers.append(self)
        DeliveryWatermark.of(queue).join(self)

    @property
    def held(self) -> int:
        """How many confirms this guard is holding now."""
        return len(self._held)

    def held_positions(self) -> list[int]:
        return sorted(self._held)

    # -- queue observer ----------------------------------------------------------------
    def enqueued(self, queue: Queue, entry: Entry) -> None:
        handle = entry.message.confirm
        if handle is not None and not handle.settled and not self.cancelled:
            handle.hold()
            self._held[entry.position] = handle

    def dequeued(self, queue: Queue, entry: Entry) -> None:
        self._release(entry.position)

    # -- backup ------------------------------------------------------------------------
    def acknowledged(self, position: int) -> None:
        """The backup holds the message with this replication id."""
        self._release(position)

    def _release(self, position: int) -> None:
        handle = self._held.pop(position, None)
        if handle is not None:
            handle.release()

    def cancel(self) -> None:
        """The backup is gone: release every held confirm and stop guarding."""
        if self.cancelled:
            return
        self.cancelled = True
        held, self._held = self._held, {}
        for handle in held.values():
            handle.release()
        if self in self.queue.observers:
            self.queue.observers.remove(self)
        DeliveryWatermark.of(self.queue).leave(self)

    def __repr__(self) -> str:
        return f"QueueGuard({self.queue.name!r}, backup={self.backup!r}, held={self.held})"
