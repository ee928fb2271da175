"""Delivery watermark, sans-I/O: a primary delivers only what its backups would mark redelivered.

AMQP's ``redelivered`` means "this message may have been delivered before". A promoted
backup must set it on every message the old primary may have delivered, and should not on
the others (``docs/ha-design.md``, "Redelivered after a fail-over"). The protocol, per
queue:

- the primary *announces* on the queue's replication stream to each backup "I may deliver
  ids up to P" (a :class:`~broker.ha.wire.Watermark` event), P running ahead of the
  deliveries by a :data:`WINDOW` of ids;
- it delivers a message at id p only once every backup it guards on that queue (each
  :class:`~broker.ha.queue_guard.QueueGuard`, the same backups its publisher confirms wait
  for: connected, or expected after a promotion, until the role releases them) has
  acknowledged the batch carrying an announcement of at least p;
- a backup raises its queue's :attr:`~broker.core.queue.Queue.redelivered_through` to every
  watermark it receives, so a promoted backup sends exactly the messages at ids up to the
  last announcement it got marked redelivered, and the rest (published after it, never
  delivered) unmarked.

So every message any primary delivered is at or under the watermark of every backup that
might be promoted after it, whatever the timing: the rule rests on acknowledgements, never on
time. The window keeps the wait off the common path: a new announcement goes out when the
deliveries come within half a window of the last one, and is acknowledged long before they
reach it. A backup that connects joins with nothing acknowledged: the queue waits for its
first batch (it carries the current watermark: every id the queue ever held, and a window).
While the queue waits, a basic.get is held, not answered empty: the queue answers it when
the gate reopens (``Queue.hold_get``; ``docs/ha-design.md``).

:class:`DeliveryWatermark` is the queue's :class:`~broker.core.queue_contracts.DeliveryGate`; the
guards :meth:`join` and :meth:`leave` it; the replicating subscriptions send
:attr:`announced` and report :meth:`acknowledged` watermarks. :func:`next_announcement`
and :func:`deliverable` are the rule as pure functions (hypothesis tests:
``tests/ha/test_delivery_watermark.py``).

THREAD UNSAFE: the primary's event loop owns it.
"""

from __future__ import annotations

from collections.abc import Callable

from broker.core.queue import Queue
from broker.core.queue_contracts import NO_GATE

#: Ids a primary announces ahead of its deliveries (the precision given up for speed: at a
#: fail-over, up to this many messages past the last delivery come back redelivered too).
#: Larger than what a backup keeps in flight (``ha-flow-messages`` batches of up to 256
#: messages), so an announcement is acknowledged before deliveries reach it.
WINDOW = 16384


def next_announcement(announced: int, position: int, window: int) -> int | None:
    """The watermark to announce before delivering ``position``, or None while the last
    one, ``announced``, is still more than half a window ahead."""
    if position + window // 2 <= announced:
        return None
    return max(announced, position + window)


def deliverable(position: int, acknowledged: list[int]) -> bool:
    """May the message at ``position`` go to a consumer? Only when every guarded backup
    acknowledged a watermark covering it (none guarded: yes)."""
    return all(position <= watermark for watermark in acknowledged)


class DeliveryWatermark:
    """One queue's delivery watermark on the primary (see the module docstring)."""

    def __init__(self, queue: Queue, window: int = WINDOW) -> None:
        self.queue = queue
        self.window = window
        #: The highest watermark announced: every id ever delivered is at or under it once
        #: a backup is guarded (joined: at least the queue's last id then).
        self.announced = 0
        #: Guard -> the highest watermark its backup acknowledged.
        self.acknowledged_by: dict[object, int] = {}
        #: Told of each new announcement (the subscriptions: send it).
        self.listeners: list[Callable[[], None]] = []
        self.blocked = False
        self.waits = 0
        queue.delivery_gate = self

    @classmethod
    def of(cls, queue: Queue, window: int = WINDOW) -> DeliveryWatermark:
        """The queue's watermark, created on first use."""
        gate = queue.delivery_gate
        if isinstance(gate, DeliveryWatermark):
            return gate
        return cls(queue, window)

    # -- membership (queue guards) -----------------------------------------------------
    def join(self, guard: object) -> None:
        """A backup is guarded on this queue: deliveries wait for its acknowledgement. It
        may have missed every earlier delivery, so the next announcement covers every id
        the queue has held, and a window more."""
        if guard in self.acknowledged_by:
            return
        covering = self.queue.last_position + self.window
        if covering > self.announced:
            self.announced = covering
            self._tell()
        self.acknowledged_by[guard] = 0
        self._update()

    def leave(self, guard: object) -> None:
        """The backup's guard is released: deliveries no longer wait for it."""
        if self.acknowledged_by.pop(guard, None) is not None:
            self._update()

    def acknowledged(self, guard: object, watermark: int) -> None:
        """The guard's backup holds an announcement of ``watermark``."""
        if guard in self.acknowledged_by and watermark > self.acknowledged_by[guard]:
            self.acknowledged_by[guard] = watermark
            self._update()

    # -- the queue's gate --------------------------------------------------------------
    @property
    def limit(self) -> int:
        """The highest id every guarded backup covers (:data:`NO_GATE` with none)."""
        return min(self.acknowledged_by.values(), default=NO_GATE)

    def may_deliver(self, queue: Queue, position: int) -> bool:
        """Queue callback before delivering ``position`` (above ``queue.gate_above``)."""
        if not self.acknowledged_by:
            queue.gate_above = NO_GATE
            return True
        announce = next_announcement(self.announced, position, self.window)
        if announce is not None:
            self.announced = announce
            self._tell()
        self._set_gate_above()
        if deliverable(position, list(self.acknowledged_by.values())):
            return True
        if not self.blocked:
            self.blocked = True
            self.waits += 1
        return False

    def _set_gate_above(self) -> None:
        """Below this the queue delivers without asking: covered, and far from needing a
        new announcement."""
        self.queue.gate_above = (
            min(self.limit, self.announced - self.window // 2) if self.acknowledged_by else NO_GATE
        )

    def _update(self) -> None:
        self._set_gate_above()
        if self.blocked:
            self.blocked = False
            self.queue.dispatch()  # asks again, and blocks again if still not covered

    def _tell(self) -> None:
        for listener in list(self.listeners):
            listener()
