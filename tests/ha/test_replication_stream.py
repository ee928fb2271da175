"""Primary -> backup replication of one queue, sans I/O: guard, subscription, replicator.

A primary virtual host and a backup virtual host are joined by a fake link that encodes and
decodes every batch with the real wire format (h11's ConnectionPair idea).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from broker.core.confirms import ConfirmHandle, PublisherConfirms
from broker.core.message import Entry, Message
from broker.core.queue import Queue
from broker.core.vhost import VirtualHost
from broker.ha.id_set import IdSet
from broker.ha.queue_guard import QueueGuard
from broker.ha.queue_replicator import QueueReplicator
from broker.ha.replicating_subscription import ReplicatingSubscription
from broker.ha.wire import Dequeue, Enqueue, decode_batch


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Taker:
    """A consumer on the primary that takes what it is given and acks on demand."""

    tag: str = "c"
    exclusive: bool = False
    credit: int = 0
    taken: list[tuple[Queue, Entry]] = field(default_factory=list)

    def can_deliver(self) -> bool:
        return self.credit > 0

    def deliver(self, queue: Queue, entry: Entry) -> None:
        self.credit -= 1
        queue.delivered(entry, False)
        self.taken.append((queue, entry))

    def ack_all(self) -> None:
        for queue, entry in self.taken:
            queue.settle(entry)
        self.taken.clear()


class Pair:
    """One queue on a primary and its copy on a backup, joined by a fake link."""

    def __init__(self, backup_ids: IdSet | None = None) -> None:
        self.primary = VirtualHost(clock=Clock())
        self.backup = VirtualHost(clock=Clock())
        self.queue = self.primary.declare_queue("q")
        self.copy = self.backup.declare_queue("q")
        self.confirms = PublisherConfirms()
        self.handles: list[ConfirmHandle] = []
        self.replicator = QueueReplicator(self.copy)
        self.guard: QueueGuard | None = None
        self.sub: ReplicatingSubscription | None = None
        self.in_flight: list[int] = []

    def connect(self, guard: bool = True) -> None:
        if self.guard is None and guard:
            self.guard = QueueGuard(self.queue, "b1")
        self.sub = ReplicatingSubscription(
            self.queue, self.guard, self.replicator.ids(), max_batch_events=8
        )
        self.in_flight = []

    def disconnect(self) -> None:
        assert self.sub is not None
        self.sub.close()
        self.sub = None
        self.in_flight = []

    def publish(self, n: int = 1) -> None:
        exchange = self.primary.exchange("")
        for i in range(n):
            handle = self.confirms.publish()
            message = Message("", "q", body=f"m{len(self.handles)}-{i}".encode(), confirm=handle)
            self.primary.publish(exchange, message)
            handle.release()
            self.handles.append(handle)

    def send(self) -> bool:
        """One batch over the link; the backup applies it. False when nothing to send."""
        assert self.sub is not None
        batch = self.sub.next_batch()
        if batch is None:
            return False
        tag, body = batch
        self.replicator.apply(decode_batch(body))
        self.in_flight.append(tag)
        return True

    def ack(self) -> None:
        assert self.sub is not None
        for tag in self.in_flight:
            self.sub.acknowledged(tag)
        self.in_flight = []

    def drain(self) -> None:
        while self.send():
            pass
        self.ack()

    def ids(self, queue: Queue) -> list[int]:
        return [e.position for e in queue.snapshot()]

    def bodies(self, queue: Queue) -> list[bytes]:
        return [e.message.body for e in queue.snapshot()]


def test_confirm_held_until_backup_acknowledges() -> None:
    pair = Pair()
    pair.connect()
    pair.publish(3)
    assert not any(h.settled for h in pair.handles)
    assert pair.guard is not None and pair.guard.held == 3
    pair.send()
    assert not any(h.settled for h in pair.handles)  # sent, not yet acknowledged
    pair.ack()
    assert all(h.settled for h in pair.handles)
    assert pair.bodies(pair.copy) == pair.bodies(pair.queue)
    assert pair.ids(pair.copy) == [1, 2, 3]
    assert pair.confirms.take_replies()[0].delivery_tag == 3


def test_consumed_before_sent_is_skipped_and_releases_the_confirm() -> None:
    pair = Pair()
    pair.connect()
    pair.drain()  # the backup acknowledges the first delivery watermark
    pair.publish(2)
    taker = Taker(credit=1)
    pair.queue.add_consumer(taker)
    taker.ack_all()  # message 1 consumed and acknowledged on the primary
    assert pair.handles[0].settled and not pair.handles[1].settled
    pair.drain()
    assert pair.ids(pair.copy) == [2]
    assert pair.sub is not None and pair.sub.skipped_total == 1
    assert all(h.settled for h in pair.handles)


def test_dequeue_after_send_reaches_the_backup() -> None:
    pair = Pair()
    pair.connect()
    pair.publish(3)
    pair.drain()
    taker = Taker(credit=2)
    pair.queue.add_consumer(taker)
    taker.ack_all()
    pair.drain()
    assert pair.ids(pair.copy) == [3]


def test_unacked_deliveries_are_replicated_too() -> None:
    pair = Pair()
    pair.publish(2)
    taker = Taker(credit=1)
    pair.queue.add_consumer(taker)  # message 1 delivered, not acknowledged
    pair.connect()
    pair.drain()
    assert pair.ids(pair.copy) == [1, 2]


def test_reconnect_handshake_sends_only_what_is_missing() -> None:
    pair = Pair()
    pair.connect()
    pair.publish(4)
    pair.drain()
    pair.disconnect()
    taker = Taker(credit=2)
    pair.queue.add_consumer(taker)
    taker.ack_all()  # 1 and 2 gone while the backup was away
    pair.queue.remove_consumer(taker)
    pair.publish(2)  # 5 and 6 new
    pair.connect()
    assert pair.sub is not None
    sent_before = pair.sub.sent_total
    pair.drain()
    assert pair.sub.sent_total - sent_before == 2  # 3 and 4 were not sent again
    assert pair.ids(pair.copy) == [3, 4, 5, 6] == pair.ids(pair.queue)


def test_ready_after_catch_up_is_acknowledged() -> None:
    pair = Pair()
    pair.publish(20)  # before the backup connects: not guarded
    pair.connect()
    assert pair.sub is not None and not pair.sub.ready
    while pair.send():
        assert not pair.sub.ready
    assert pair.replicator.caught_up
    pair.ack()
    assert pair.sub.ready


def test_empty_queue_is_ready_at_once() -> None:
    pair = Pair()
    pair.connect()
    pair.drain()
    assert pair.sub is not None and pair.sub.ready


def test_cancelled_guard_releases_held_confirms() -> None:
    pair = Pair()
    pair.connect()
    pair.publish(3)
    assert pair.guard is not None
    pair.guard.cancel()
    assert all(h.settled for h in pair.handles)
    pair.publish(1)
    assert pair.handles[-1].settled  # a cancelled guard holds nothing new


def test_messages_before_the_guard_are_not_held() -> None:
    pair = Pair()
    pair.publish(2)  # no backup yet: confirmed at once
    assert all(h.settled for h in pair.handles)


class ReplicationMachine(RuleBasedStateMachine):
    """Random publishes, consumption, batches, acks and reconnects keep the copy exact."""

    def __init__(self) -> None:
        super().__init__()
        self.pair = Pair()
        self.pair.connect()
        self.taker = Taker()
        self.pair.queue.add_consumer(self.taker)

    @rule(n=st.integers(1, 5))
    def publish(self, n: int) -> None:
        self.pair.publish(n)

    @rule(n=st.integers(1, 4))
    def consume(self, n: int) -> None:
        self.taker.credit += n
        self.pair.queue.credit_returned(self.taker)
        self.pair.queue.dispatch()

    @rule()
    def ack_consumed(self) -> None:
        self.taker.ack_all()

    @precondition(lambda self: self.pair.sub is not None)
    @rule()
    def send(self) -> None:
        self.pair.send()

    @precondition(lambda self: self.pair.sub is not None)
    @rule()
    def ack_batches(self) -> None:
        self.pair.ack()

    @precondition(lambda self: self.pair.sub is not None)
    @rule()
    def disconnect(self) -> None:
        self.pair.disconnect()

    @precondition(lambda self: self.pair.sub is None)
    @rule()
    def reconnect(self) -> None:
        self.pair.connect()

    @invariant()
    def copy_holds_only_known_ids(self) -> None:
        primary = set(self.pair.ids(self.pair.queue))
        ever = set(range(1, self.pair.queue.last_position + 1))
        assert set(self.pair.ids(self.pair.copy)) <= ever
        assert primary <= ever

    @invariant()
    def confirmed_messages_are_on_the_backup_or_consumed(self) -> None:
        on_backup = {e.message.body for e in self.pair.copy.snapshot()}
        on_primary = {e.message.body for e in self.pair.queue.snapshot()}
        for entry in self.pair.queue.snapshot():
            handle = entry.message.confirm
            guard = self.pair.guard
            if (
                handle is not None
                and handle.settled
                and guard is not None
                and entry.position >= guard.first_guarded
            ):
                assert entry.message.body in on_backup
        assert on_primary is not None

    def teardown(self) -> None:
        if self.pair.sub is None:
            self.pair.connect()
        self.taker.ack_all()
        self.pair.drain()
        self.pair.drain()
        assert self.pair.ids(self.pair.copy) == self.pair.ids(self.pair.queue)
        assert all(h.settled for h in self.pair.handles)


ReplicationMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=30, deadline=None
)
TestReplicationMachine = ReplicationMachine.TestCase


@settings(max_examples=200, deadline=None)
@given(
    on_primary=st.sets(st.integers(1, 60)),
    backup_ranges=st.lists(st.tuples(st.integers(1, 70), st.integers(0, 12)), max_size=5),
)
def test_the_handshake_sends_what_the_backup_lacks_and_dequeues_what_it_should_not_hold(
    on_primary: set[int], backup_ranges: list[tuple[int, int]]
) -> None:
    """Whatever the primary holds and the backup says it holds (queue positions, in ranges),
    the first batches carry exactly the ids it lacks, ascending, and one dequeue of those
    the primary no longer has (the range walk of the handshake against the set model)."""
    queue = VirtualHost(clock=Clock()).declare_queue("q")
    for position in sorted(on_primary):
        queue.enqueue(Message("", "q", body=b"x"), position)
    backup = IdSet.from_ranges((first, first + span) for first, span in backup_ranges)
    sub = ReplicatingSubscription(queue, None, backup, max_batch_events=7)
    sent: list[int] = []
    dequeued: set[int] = set()
    while (batch := sub.next_batch()) is not None:
        for event in decode_batch(batch[1]):
            if isinstance(event, Enqueue):
                sent.append(event.id)
            elif isinstance(event, Dequeue):
                dequeued |= set(event.ids)
    assert sent == sorted(on_primary - set(backup))
    assert dequeued == set(backup) - on_primary
