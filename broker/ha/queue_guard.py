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

Answers that promise a removal wait for the same backups too (issue 10): purge-ok, and the
commit-ok of a transaction with acknowledgements, go out only once the backup has applied
the dequeues (:meth:`hold_removal`, a :class:`~broker.ha.config_guard.ReplyHandle` held
until the backup acknowledged the batch of the queue's stream that carries them). A hold
is taken at a (stream key, batch tag): released when that stream has acknowledged every
batch through the tag, or when a *newer* stream (keys grow) acknowledged its first batch,
whose reconnect handshake dequeues whatever the backup holds that the primary does not
(:meth:`removals_acknowledged`). A backup without an open stream on the queue is held at
:data:`~broker.ha.config_guard.NEXT_STREAM`. :meth:`cancel` releases them with the confirms
(the backup is dropped); a deleted queue's holds are handed to the backup's configuration
guard by its owner (:meth:`take_removals`): the deletion event carries them.

THREAD UNSAFE: the primary's event loop owns the guard. Call direction: the replicating
subscription calls the guard, never the reverse.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from broker.core.confirms import ConfirmHandle
from broker.core.message import Entry
from broker.core.queue import Queue
from broker.core.queue_contracts import ObserverRole
from broker.ha.config_guard import ReplyHandle
from broker.ha.delivery_watermark import DeliveryWatermark


class HeldTally:
    """The confirms held by a backup's guards, all queues together, kept as they are held
    and released: the primary's status asked it at every agent check (twice a second per
    agent), and summing 10,000 guards there was a loop step of 100 ms at load 25."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0


class QueueGuard:
    """Holds the confirms of one queue's new messages on behalf of one backup; counts
    them in ``tally`` too (the backup's, :class:`HeldTally`) when given."""

    def __init__(self, queue: Queue, backup: str, tally: HeldTally | None = None) -> None:
        self.queue = queue
        self.backup = backup
        self.first_guarded = queue.last_position + 1
        self._held: dict[int, ConfirmHandle] = {}
        self._tally = tally
        self.cancelled = False
        #: Replies held until the backup applied a removal: (stream key, batch tag, reply).
        self.removals: list[tuple[int, int, ReplyHandle]] = []
        queue.observe(self, ObserverRole.GUARD)
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
            held = self._held
            if entry.position not in held and self._tally is not None:
                self._tally.count += 1
            held[entry.position] = handle

    def enqueued_all(self, queue: Queue, entries: Sequence[Entry]) -> None:
        for entry in entries:
            self.enqueued(queue, entry)

    def dequeued(self, queue: Queue, entry: Entry) -> None:
        if self._held:  # (most were released by the backup's acknowledgement already)
            self._release(entry.position)

    def dequeued_all(self, queue: Queue, entries: Sequence[Entry]) -> None:
        if self._held:
            self.acknowledged_all([entry.position for entry in entries])

    # -- backup ------------------------------------------------------------------------
    def acknowledged(self, position: int) -> None:
        """The backup holds the message with this replication id."""
        self._release(position)

    def acknowledged_all(self, positions: Iterable[int]) -> None:
        """The backup holds the messages with these replication ids (one batch's): as
        :meth:`acknowledged` for each, in one call (the confirm path: two calls a message
        and backup were 3 % of a loaded primary's loop)."""
        held = self._held
        if not held:
            return
        pop = held.pop
        for position in positions:
            handle = pop(position, None)
            if handle is not None:
                if self._tally is not None:
                    self._tally.count -= 1
                handle.release()

    def _release(self, position: int) -> None:
        handle = self._held.pop(position, None)
        if handle is not None:
            if self._tally is not None:
                self._tally.count -= 1
            handle.release()

    def untally(self) -> None:
        """No longer counted in its backup's tally (replaced by a new queue's guard)."""
        if self._tally is not None:
            self._tally.count -= len(self._held)
            self._tally = None

    # -- removals (purge-ok, commit-ok of acknowledgements) -------------------------------
    def hold_removal(self, handle: ReplyHandle, stream: int, through: int) -> None:
        """Hold ``handle`` until ``stream`` acknowledged every batch through tag ``through``
        (or a newer stream its first batch)."""
        if self.cancelled:
            return
        handle.hold()
        self.removals.append((stream, through, handle))

    def removals_acknowledged(self, stream: int, through: int) -> None:
        """``stream`` has every batch through tag ``through`` acknowledged (0: none yet)."""
        if through < 1 or not self.removals:
            return
        kept: list[tuple[int, int, ReplyHandle]] = []
        released: list[ReplyHandle] = []
        for entry in self.removals:
            key, tag, handle = entry
            if (key == stream and tag <= through) or key < stream:
                released.append(handle)
            else:
                kept.append(entry)
        self.removals = kept
        for handle in released:
            handle.release()

    def take_removals(self) -> list[ReplyHandle]:
        """The held removal replies, no longer held here (the queue was deleted: the owner
        holds them on the deletion's configuration event)."""
        taken, self.removals = self.removals, []
        return [handle for _key, _tag, handle in taken]

    def cancel(self) -> None:
        """The backup is gone: release every held confirm and stop guarding."""
        if self.cancelled:
            return
        self.cancelled = True
        self.untally()
        held, self._held = self._held, {}
        for handle in held.values():
            handle.release()
        removals, self.removals = self.removals, []
        for _key, _tag, reply in removals:
            reply.release()
        self.queue.unobserve(self)
        DeliveryWatermark.of(self.queue).leave(self)

    def __repr__(self) -> str:
        return f"QueueGuard({self.queue.name!r}, backup={self.backup!r}, held={self.held})"
