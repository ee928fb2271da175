"""A queue: ready messages in order, its consumers, and the limits set by its arguments.

A queue hands messages to consumers round robin while they have credit (the consumer says
so); with consumer priorities (a consumer's ``priority``, RabbitMQ's ``x-priority``) only
to the highest-priority consumers with credit, and with ``x-single-active-consumer`` only
to the earliest consumer still subscribed. With ``x-max-priority`` its ready messages go out
highest priority first (:mod:`broker.core.priority`). It expires them (``x-message-ttl``,
per-message ``expiration``), bounds its length (``x-max-length``, ``x-max-length-bytes``,
``x-overflow``) and dead-letters what it drops
through a callback the virtual host gives it. It does no I/O and keeps no clock of its own:
``now`` comes from the clock it is given.

Observers (the message store, the HA module's guards and replicating subscriptions) hear
every enqueue and every dequeue: ``dequeued`` means the message left the queue for good
(acknowledged, consumed with no-ack, expired, purged, dropped or dead-lettered). While a
delivery gate (an HA primary's delivery watermark) holds the head back, a basic.get on ready
messages is held (:meth:`Queue.hold_get`) and answered, first and in order, when the gate
reopens. A queue's *first use* (:attr:`Queue.before_use`: called once before its next
enqueue, delivery, purge or restore) lets an HA primary promoted over thousands of queues guard each
at its first use instead of every one before it serves (:mod:`broker.ha.primary`).

Beside it, one concept each: :mod:`broker.core.consumer_ring` its consumers and whose turn
is next, found without scanning them (a :class:`~broker.core.consumer_ring.ConsumerRing` it
owns; whoever gives a consumer credit back tells the queue, :meth:`Queue.credit_returned`);
:mod:`broker.core.queue_observers` who hears its enqueues and dequeues, in the order of
their roles (a :class:`~broker.core.queue_observers.QueueObservers` it owns);
:mod:`broker.core.queue_contracts` what it asks of its
consumers, gate, held gets and observers (protocols generic in the queue, so that module
does not import this one); :mod:`broker.core.queue_copy` the queue as a copy (entries at
positions given by the store's recovery or an HA primary, snapshots): a
:class:`~broker.core.queue_copy.QueueCopy` the queue owns, which works on the queue through
its small :class:`~broker.core.queue_copy.CopyHost` port.

THREAD UNSAFE: one event loop owns the queue.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Container, Iterable, Sequence
from typing import Any
from uuid import uuid4

from broker.core.consumer_ring import ConsumerRing
from broker.core.message import Entry, Message
from broker.core.priority import PriorityMessages
from broker.core.queue_contracts import NO_GATE as NO_GATE  # re-exported
from broker.core.queue_contracts import (
    Consumer,
    DeliveryGate,
    HeldGet,
    ObserverRole,
    QueueObserver,
)
from broker.core.queue_copy import QueueCopy
from broker.core.queue_limits import (
    OVERFLOW_DROP_HEAD,
    OVERFLOW_REJECT_PUBLISH_DLX,
    QueueLimits,
)
from broker.core.queue_observers import QueueObservers

#: Dead-letter reasons, as RabbitMQ writes them in ``x-death``.
REASON_REJECTED = "rejected"
REASON_EXPIRED = "expired"
REASON_MAXLEN = "maxlen"

#: How a queue dead-letters an entry (the virtual host's): (queue, entry, reason).
DeadLetter = Callable[["Queue", Entry, str], None]


class Queue:
    """A message queue (see the module docstring)."""

    #: The name of the virtual host the queue is in (set by it).
    vhost: str = "/"
    #: Called once, with the queue, before its next enqueue, delivery (a consumer's turn,
    #: basic.get), purge or restore, then cleared (:meth:`first_use`): an HA primary's
    #: guards made at the queue's first use after a promotion
    #: (:meth:`broker.ha.primary.Primary.owe_first_use`). None (the class's): nothing
    #: to do. Set on the queue by whoever needs it.
    before_use: Callable[[Queue], None] | None = None

    def __init__(
        self,
        name: str,
        *,
        clock: Callable[[], float],
        durable: bool = False,
        exclusive_owner: object | None = None,
        auto_delete: bool = False,
        arguments: dict[str, Any] | None = None,
        dead_letter: DeadLetter | None = None,
        default_limit_bytes: int = 0,
        uuid: str | None = None,
    ) -> None:
        self.name = name
        #: Tells this queue from an earlier or later one of the same name (Qpid HA's queue
        #: uuid): replication ids are positions of one queue, so a backup holding a queue of
        #: another uuid holds none of this one's messages. New here, or the primary's on a
        #: backup, or the store's after a restart.
        self.uuid = uuid or uuid4().hex
        self.durable = durable
        self.exclusive_owner = exclusive_owner
        self.auto_delete = auto_delete
        self.arguments: dict[str, Any] = dict(arguments or {})
        self.limits = QueueLimits.from_arguments(name, self.arguments)
        self.dead_letter = dead_letter
        self._clock = clock
        self._messages: deque[Entry] = (
            PriorityMessages(self.limits.max_priority) if self.limits.max_priority else deque()
        )
        #: Its consumers, in the order it serves them (round robin, priorities, single
        #: active); ``_consumers`` is their list, read here.
        self._ring: ConsumerRing[Consumer[Queue]] = ConsumerRing(self.limits.single_active_consumer)
        self._consumers = self._ring.members
        #: Position of the latest enqueue (the HA replication id of that message).
        self.last_position = 0
        #: Every message at a position up to this one may have been delivered before, by
        #: another broker (an HA primary that failed over: ``broker.ha.queue_replicator``): it goes
        #: out with ``redelivered`` set. 0: none.
        self.redelivered_through = 0
        #: Asked before a message at a position above :attr:`gate_above` is delivered (None,
        #: or ``gate_above`` at :data:`NO_GATE`: delivered at once). Set by the gate.
        self.delivery_gate: DeliveryGate[Queue] | None = None
        self.gate_above = NO_GATE
        self._unacked_entries: dict[int, Entry] = {}
        self._held_gets: deque[HeldGet[Queue]] = deque()
        self._bytes = 0
        self._dispatching = False
        self._redispatch = False
        #: Who hears every enqueue and dequeue, in :class:`ObserverRole` order: register
        #: through :meth:`observe` and :meth:`unobserve`; ``observers`` is their list
        #: (read it, never edit it).
        self._observers: QueueObservers[Queue] = QueueObservers()
        self.observers = self._observers.members
        self.unacked = 0
        self.had_consumers = False
        self.deleted = False
        self.last_used = clock()
        # Byte limit: x-max-length-bytes, else the broker's default queue limit (reject).
        self._default_limit_bytes = (
            default_limit_bytes if self.limits.max_length_bytes is None else 0
        )
        # Counters for management and metrics.
        self.enqueued_total = 0
        self.delivered_total = 0
        self.acked_total = 0
        self.expired_total = 0
        self.dropped_total = 0
        self.rejected_publishes = 0

    @property
    def _copy(self) -> QueueCopy:
        """The queue as a copy, made at each use (a slotted object of one field): kept, it
        would point back at this queue, a reference cycle that a deleted queue would leave
        to the cyclic collector, and to nobody once the heap is frozen (broker.collector)."""
        return QueueCopy(self)

    # -- inspection --------------------------------------------------------------------
    @property
    def message_count(self) -> int:
        """Ready messages (not counting delivered, unacknowledged ones)."""
        return len(self._messages)

    @property
    def consumer_count(self) -> int:
        return len(self._consumers)

    @property
    def bytes(self) -> int:
        return self._bytes

    @property
    def consumers(self) -> tuple[Consumer[Queue], ...]:
        return tuple(self._consumers)

    def entries(self) -> tuple[Entry, ...]:
        """Ready entries, head first (for replication and tests)."""
        return tuple(self._messages)

    def is_exclusive_to(self, owner: object) -> bool:
        return self.exclusive_owner is not None and self.exclusive_owner is not owner

    def touch(self) -> None:
        """Record a use, for ``x-expires``."""
        self.last_used = self._clock()

    def first_use(self) -> None:
        """Call :attr:`before_use` now if it is set (once: it is cleared first). Called by
        every enqueue, delivery and purge; by anyone about to rely on what it sets up."""
        hook = self.before_use
        if hook is not None:
            self.before_use = None
            hook(self)

    # -- enqueue -----------------------------------------------------------------------
    def expiry(self, message: Message, now: float) -> float | None:
        """When ``message``, put on the queue ``now``, expires (None: never)."""
        ttl = self.limits.message_ttl_ms
        if message.expiration_ms is not None:
            ttl = message.expiration_ms if ttl is None else min(ttl, message.expiration_ms)
        return None if ttl is None else now + ttl / 1000.0

    def _full_for(self, size: int) -> bool:
        limits = self.limits
        if limits.max_length is not None and len(self._messages) + 1 > limits.max_length:
            return True
        if limits.max_length_bytes is not None and self._bytes + size > limits.max_length_bytes:
            return True
        return bool(self._default_limit_bytes and self._bytes + size > self._default_limit_bytes)

    def enqueue(self, message: Message, position: int | None = None) -> bool:
        """Add a message; False when the queue refuses it (reject-publish overflow).

        ``position`` is given only by HA replication on a backup, to keep the primary's
        replication id as the local position: such a message is taken whatever the limits
        and its expiry (it is on the primary, which tells when it leaves).
        """
        if self.before_use is not None:
            self.first_use()
        now = self._clock()
        size = len(message.body)
        # Limits apply to publishes; a backup replicating its primary takes what it is sent.
        if position is None and self._full_for(size):
            over_default = self._default_limit_bytes and (
                self._bytes + size > self._default_limit_bytes
            )
            if self.limits.overflow != OVERFLOW_DROP_HEAD or over_default:
                self.rejected_publishes += 1
                if self.limits.overflow == OVERFLOW_REJECT_PUBLISH_DLX:
                    self._dead_letter_new(message, REASON_MAXLEN)
                return False
            self._drop_head_for(size)
            limits = self.limits
            if (limits.max_length == 0) or (
                limits.max_length_bytes is not None and size > limits.max_length_bytes
            ):
                # Nothing fits: the new message itself is the one dropped.
                self._dead_letter_new(message, REASON_MAXLEN)
                return True
        replicated = position is not None
        if position is None:
            position = self.last_position + 1
        elif position <= self.last_position:
            return self._copy.insert_replicated(message, position, now)
        self.last_position = position
        if message.expiration_ms is None and self.limits.message_ttl_ms is None:
            entry = Entry(message, position, None)  # (expiry's answer, without its call)
        else:
            entry = Entry(message, position, self.expiry(message, now))
        if entry.expires_at is not None and entry.expires_at <= now and not replicated:
            # Expired on arrival (ttl 0): only a consumer that can take it at once gets it.
            # Not a replicated one: its primary still holds it (a consumer took it there),
            # and only the primary expires or dead-letters; its dequeue comes when it leaves.
            self.enqueued_total += 1
            self._observers.enqueued(self, entry)
            if self._messages or not self._offer(entry):
                self._expire_entry(entry)
            return True
        messages = self._messages
        if (
            not messages
            and self._consumers
            and not self._dispatching
            and not self._held_gets
            and position <= self.gate_above
        ):
            # Nothing ready ahead of it: straight to the next consumer with credit, as
            # dispatch would hand it, without its round through the ready messages (a queue
            # whose consumers keep up: most publishes). A position the delivery gate must
            # be asked about goes the usual way (its gate asked after the observers heard
            # of it).
            chosen = self._ring.next_with_credit()
            if chosen is not None:
                self.enqueued_total += 1
                self._observers.enqueued(self, entry)
                if position <= self.redelivered_through:
                    entry.delivery_count = 1  # may have been delivered before a fail-over
                self.delivered_total += 1
                self._dispatching = True
                self._redispatch = False
                try:
                    chosen.deliver(self, entry)
                finally:
                    self._dispatching = False
                if self._redispatch:
                    self.dispatch()
                return True
        messages.append(entry)
        self._bytes += size
        self.enqueued_total += 1
        self._observers.enqueued(self, entry)
        # A dispatch round only when a consumer may take it: a queue whose consumers are all
        # out of credit (a publisher ahead of its consumers: most publishes then) skips
        # it; whoever returns their credit dispatches (ConsumerRing.credit_returned).
        if self._consumers and (self._held_gets or not self._ring.all_parked):
            self.dispatch()
        return True

    def enqueue_replicated(self, messages: Sequence[Message], positions: Sequence[int]) -> None:
        """As :meth:`enqueue` of each message at its position in turn (a backup applying a
        batch's run of enqueues), the observers told of the run at once: without consumers,
        each at a position past the last one here, in order (expired or not: a replicated
        message leaves when its primary says); any other goes through :meth:`enqueue` (the
        run so far told first)."""
        if self._consumers:
            for message, position in zip(messages, positions, strict=True):
                self.enqueue(message, position)
            return
        if self.before_use is not None:
            self.first_use()
        now = self._clock()
        expiry = self.expiry
        append = self._messages.append
        run: list[Entry] = []
        size = 0
        last = self.last_position
        ttl = self.limits.message_ttl_ms
        for message, position in zip(messages, positions, strict=True):
            if ttl is None and message.expiration_ms is None:
                expires_at = None  # (expiry's answer, without its call)
            else:
                expires_at = expiry(message, now)
            if position <= last:
                self._took_run(run, size, last)
                run, size = [], 0
                self.enqueue(message, position)
                last = self.last_position
                append = self._messages.append
                continue
            entry = Entry(message, position, expires_at)
            append(entry)
            run.append(entry)
            size += len(message.body)
            last = position
        self._took_run(run, size, last)

    def _took_run(self, run: list[Entry], size: int, last: int) -> None:
        """``run`` (``size`` bytes of bodies, the last at ``last``) was put among the
        ready messages: count it, tell the observers."""
        if run:
            self.last_position = last
            self._bytes += size
            self.enqueued_total += len(run)
            self._observers.enqueued_all(self, run)

    def _drop_head_for(self, size: int) -> None:
        limits = self.limits
        while self._messages:
            count_ok = limits.max_length is None or len(self._messages) + 1 <= limits.max_length
            bytes_ok = (
                limits.max_length_bytes is None or self._bytes + size <= limits.max_length_bytes
            )
            if count_ok and bytes_ok:
                return
            entry = self._messages.popleft()
            self._bytes -= len(entry.message.body)
            self.dropped_total += 1
            self._drop(entry, REASON_MAXLEN)

    def _dead_letter_new(self, message: Message, reason: str) -> None:
        if self.dead_letter is not None and self.limits.dead_letter_exchange is not None:
            self.dead_letter(self, Entry(message, 0, None), reason)

    def _drop(self, entry: Entry, reason: str) -> None:
        """The entry leaves the queue for good, dead-lettered when configured."""
        if self.dead_letter is not None and self.limits.dead_letter_exchange is not None:
            self.dead_letter(self, entry, reason)
        self._observers.dequeued(self, entry)

    def _expire_entry(self, entry: Entry) -> None:
        self.expired_total += 1
        self._drop(entry, REASON_EXPIRED)

    # -- delivery ----------------------------------------------------------------------
    def expire(self) -> int:
        """Drop expired messages from the head of the queue; returns how many."""
        now = self._clock()
        count = 0
        messages = self._messages
        while messages:
            head = messages[0]
            if head.expires_at is None or head.expires_at > now:
                break
            messages.popleft()
            self._bytes -= len(head.message.body)
            self._expire_entry(head)
            count += 1
        if self._held_gets and not messages:
            self._answer_held_gets(now)
        return count

    def _pop_live(self, now: float) -> Entry | None:
        messages = self._messages
        while messages:
            entry = messages.popleft()
            self._bytes -= len(entry.message.body)
            if entry.expires_at is not None and entry.expires_at <= now:
                self._expire_entry(entry)
                continue
            if entry.position > self.gate_above and not self._gate_allows(entry.position):
                messages.extendleft((entry,))  # not yet: back at the head
                self._bytes += len(entry.message.body)
                return None
            if entry.position <= self.redelivered_through and not entry.delivery_count:
                entry.delivery_count = 1  # may have been delivered before a fail-over
            return entry
        return None

    def _gate_allows(self, position: int) -> bool:
        gate = self.delivery_gate
        return gate is None or gate.may_deliver(self, position)

    def credit_returned(self, consumer: Consumer[Queue] | None = None) -> None:
        """``consumer`` (None: any of this queue's consumers) may take messages again: an
        acknowledgement, basic.qos, channel.flow, a writable socket or a link's credit gave
        it credit back. The queue asks it again at its next turn (a consumer found without
        credit is not asked again until this is called); call :meth:`dispatch` after."""
        self._ring.credit_returned(consumer)

    def dispatch(self) -> None:
        """Hand ready messages to consumers with credit, round robin (those found without
        credit once wait for :meth:`credit_returned`)."""
        if self.before_use is not None:
            self.first_use()
        if self._dispatching:
            self._redispatch = True
            return
        self._dispatching = True
        try:
            while True:
                self._redispatch = False
                self._dispatch_once()
                if not self._redispatch:
                    break
        finally:
            self._dispatching = False

    def _dispatch_once(self) -> None:
        consumers = self._consumers
        messages = self._messages
        now = self._clock()
        if self._held_gets:
            self._answer_held_gets(now)
        next_with_credit = self._ring.next_with_credit
        while messages and consumers:
            chosen = next_with_credit()
            if chosen is None:
                return
            entry = self._pop_live(now)
            if entry is None:
                return
            self.delivered_total += 1
            chosen.deliver(self, entry)

    def _offer(self, entry: Entry) -> bool:
        """Deliver ``entry`` now to the next consumer with credit; False when none has."""
        if self._dispatching or not self._consumers:
            return False
        if entry.position > self.gate_above and not self._gate_allows(entry.position):
            return False
        chosen = self._ring.next_with_credit()
        if chosen is None:
            return False
        self.delivered_total += 1
        chosen.deliver(self, entry)
        return True

    def get(self) -> Entry | None:
        """Take the head message for basic.get (the caller settles or requeues it)."""
        if self.before_use is not None:
            self.first_use()
        self.touch()
        entry = self._pop_live(self._clock())
        if entry is not None:
            self.delivered_total += 1
        return entry

    def hold_get(self, held: HeldGet[Queue]) -> bool:
        """After :meth:`get` found nothing: hold the basic.get while the delivery gate holds
        back ready messages (an HA primary whose backups have not acknowledged a delivery
        watermark yet) and answer it when the gate lets the head through; False when the
        queue is empty (answer get-empty now)."""
        if not self._messages:
            return False
        self._held_gets.append(held)
        return True

    def cancel_get(self, held: HeldGet[Queue]) -> None:
        """Forget a held basic.get (its channel closed): the message it would have taken
        stays on the queue."""
        if held in self._held_gets:
            self._held_gets.remove(held)

    @property
    def held_gets(self) -> int:
        """basic.get requests waiting for the delivery gate."""
        return len(self._held_gets)

    def _answer_held_gets(self, now: float) -> None:
        """Answer held gets in order: each with the head while the gate lets it through,
        all with None once no ready message is left."""
        held = self._held_gets
        while held:
            entry = self._pop_live(now)
            if entry is None:
                if self._messages:
                    return  # the gate still holds the head back
                break
            self.delivered_total += 1
            held.popleft().answer(self, entry)
        while held:
            held.popleft().answer(self, None)

    def delivered(self, entry: Entry, no_ack: bool) -> None:
        """Book a delivery made through ``Consumer.deliver`` or ``get``.

        The consumer calls this after it has read ``entry.redelivered``. A no-ack
        delivery settles at once; otherwise the entry is unacknowledged until
        :meth:`settle`, :meth:`reject` or :meth:`requeue`.
        """
        entry.delivery_count += 1
        if no_ack:
            self.acked_total += 1
            self._observers.dequeued(self, entry)
        else:
            self.unacked += 1
            self._unacked_entries[entry.position] = entry

    def settle(self, entry: Entry) -> None:
        """An unacknowledged delivery was acknowledged: the message is gone."""
        self.unacked -= 1
        self._unacked_entries.pop(entry.position, None)
        self.acked_total += 1
        self._observers.dequeued(self, entry)

    def settle_all(self, entries: Sequence[Entry]) -> None:
        """As :meth:`settle` for each of ``entries`` (one multiple acknowledgement's on this
        queue), the observers told of the run at once."""
        unacked = self._unacked_entries
        for entry in entries:
            unacked.pop(entry.position, None)
        self.unacked -= len(entries)
        self.acked_total += len(entries)
        self._observers.dequeued_all(self, entries)

    def reject(self, entry: Entry, requeue: bool) -> None:
        """An unacknowledged delivery was rejected or nacked."""
        if requeue:
            self.requeue((entry,))
            return
        self.unacked -= 1
        self._unacked_entries.pop(entry.position, None)
        self._drop(entry, REASON_REJECTED)

    def requeue(self, entries: Iterable[Entry]) -> None:
        """Put unacknowledged deliveries back in their original order, marked redelivered."""
        back = sorted(entries, key=lambda e: e.position)
        if not back:
            return
        self.unacked -= len(back)
        for entry in back:
            self._unacked_entries.pop(entry.position, None)
        if self.deleted:
            for entry in back:
                self._observers.dequeued(self, entry)
            return
        for entry in back:
            entry.delivery_count = max(entry.delivery_count, 1)
            self._bytes += len(entry.message.body)
        messages = self._messages
        if (
            not messages
            or back[-1].position < messages[0].position
            or isinstance(messages, PriorityMessages)  # puts each in place in its priority
        ):
            messages.extendleft(reversed(back))
        else:
            merged = sorted([*messages, *back], key=lambda e: e.position)
            messages.clear()
            messages.extend(merged)
        self.dispatch()

    # -- consumers ---------------------------------------------------------------------
    def add_consumer(self, consumer: Consumer[Queue]) -> None:
        self._ring.add(consumer)
        self.had_consumers = True
        self.touch()
        self.dispatch()

    def remove_consumer(self, consumer: Consumer[Queue]) -> bool:
        """Remove a consumer; True when an auto-delete queue lost its last consumer."""
        if not self._ring.remove(consumer):
            return False
        self.touch()
        return self.auto_delete and not self._consumers

    def has_exclusive_consumer(self) -> bool:
        return self._ring.has_exclusive()

    # -- observers -------------------------------------------------------------------
    def observe(self, observer: QueueObserver[Queue], role: ObserverRole) -> None:
        """Tell ``observer`` of every enqueue and dequeue from now on, in ``role``'s place
        (:meth:`QueueObservers.add`)."""
        self._observers.add(observer, role)

    def unobserve(self, observer: QueueObserver[Queue]) -> None:
        """Stop telling ``observer`` (nothing when it was not told)."""
        self._observers.remove(observer)

    # -- the queue as a copy (its QueueCopy, broker.core.queue_copy) -------------------
    def restore(self, entries: list[Entry], body_bytes: int | None = None) -> None:
        """Put back entries the message store recovered (:meth:`QueueCopy.restore`)."""
        if self.before_use is not None:
            self.first_use()
        self._copy.restore(entries, body_bytes)

    def snapshot(self) -> list[Entry]:
        """Every message, ready or unacknowledged, by position (:meth:`QueueCopy.snapshot`)."""
        return self._copy.snapshot()

    def remove_positions(self, positions: Container[int], expected: int | None = None) -> int:
        """Remove ready messages at these positions (:meth:`QueueCopy.remove_positions`)."""
        return self._copy.remove_positions(positions, expected)

    @property
    def ready(self) -> deque[Entry]:
        return self._messages

    def unacked_entries(self) -> Iterable[Entry]:
        return self._unacked_entries.values()

    def added(self, entries: Sequence[Entry], body_bytes: int) -> None:
        if self.before_use is not None:
            self.first_use()
        self._bytes += body_bytes
        self.enqueued_total += len(entries)
        self._observers.enqueued_all(self, entries)
        if self._consumers:
            self.dispatch()

    def removed(self, entry: Entry) -> None:
        self._bytes -= len(entry.message.body)
        self._observers.dequeued(self, entry)

    def removed_all(self, entries: Sequence[Entry]) -> None:
        self._bytes -= sum([len(entry.message.body) for entry in entries])
        self._observers.dequeued_all(self, entries)

    # -- paging ------------------------------------------------------------------------
    def use_message_list(self, messages: deque[Entry]) -> None:
        """Keep the ready messages in ``messages`` from now on (broker.core.paging's
        PagedMessages, a deque that pages its tail to disk); moves those already here (their
        body sizes, which the queue counts, passed on when the list takes them)."""
        adopt = getattr(messages, "adopt", None)
        if adopt is not None:
            adopt(self._messages, self._bytes)
        else:
            messages.extend(self._messages)
        self._messages = messages

    # -- admin -------------------------------------------------------------------------
    def purge(self) -> int:
        """Remove every ready message (not the unacknowledged ones)."""
        if self.before_use is not None:
            self.first_use()
        count = len(self._messages)
        while self._messages:
            entry = self._messages.popleft()
            self._observers.dequeued(self, entry)
        self._bytes = 0
        if self._held_gets:
            self._answer_held_gets(self._clock())
        return count

    def close(self) -> list[Consumer[Queue]]:
        """The queue is deleted: drop its messages, return the consumers it had."""
        self.deleted = True
        self.purge()
        return self._ring.clear()

    def __repr__(self) -> str:
        return f"Queue({self.name!r}, {len(self._messages)} ready, {self.unacked} unacked)"
