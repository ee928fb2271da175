"""Answers that promise a removal, sans I/O: QueueGuard's removal holds and the replicating
subscription's removal point (purge-ok, the commit-ok of acknowledgements; issue 10).

The rule: a reply held with :meth:`ReplicatingSubscription.hold_removal` goes out only once
the backup has applied every dequeue the primary made before it was held, whatever happens
meanwhile (batches in flight, reconnects with the handshake, the backup dropped), and it
does go out once every batch is through.
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

from broker.core.message import Message
from broker.core.vhost import VirtualHost
from broker.ha.config_guard import NEXT_STREAM, ReplyHandle
from broker.ha.queue_guard import QueueGuard
from broker.ha.queue_replicator import QueueReplicator
from broker.ha.replicating_subscription import ReplicatingSubscription
from broker.ha.wire import decode_batch


def _replies(sent: list[str], name: str) -> ReplyHandle:
    return ReplyHandle(lambda: sent.append(name))


def test_held_until_the_stream_acknowledged_through_the_tag() -> None:
    primary = VirtualHost()
    guard = QueueGuard(primary.declare_queue("q"), "b1")
    sent: list[str] = []
    first, second = _replies(sent, "first"), _replies(sent, "second")
    guard.hold_removal(first, 5, 2)
    guard.hold_removal(second, 5, 4)
    first.arm()
    second.arm()
    guard.removals_acknowledged(5, 1)
    assert sent == []
    guard.removals_acknowledged(5, 3)
    assert sent == ["first"]
    guard.removals_acknowledged(5, 4)
    assert sent == ["first", "second"]


def test_a_newer_streams_first_batch_releases_older_holds_and_cancel_releases_all() -> None:
    guard = QueueGuard(VirtualHost().declare_queue("q"), "b1")
    sent: list[str] = []
    old, new = _replies(sent, "old"), _replies(sent, "new")
    guard.hold_removal(old, 3, NEXT_STREAM)  # no open stream: the next one's handshake
    guard.hold_removal(new, 7, 9)
    old.arm()
    new.arm()
    guard.removals_acknowledged(7, 0)  # a newer stream, nothing acknowledged yet
    assert sent == []
    guard.removals_acknowledged(7, 1)
    assert sent == ["old"]
    guard.cancel()
    assert sent == ["old", "new"]


def test_take_removals_hands_the_holds_over() -> None:
    guard = QueueGuard(VirtualHost().declare_queue("q"), "b1")
    sent: list[str] = []
    reply = _replies(sent, "ok")
    guard.hold_removal(reply, 1, 1)
    reply.arm()
    (taken,) = guard.take_removals()
    assert taken is reply and sent == [] and not guard.removals
    taken.release()
    assert sent == ["ok"]


def test_purge_ok_waits_for_the_batch_carrying_the_dequeues() -> None:
    primary, backup = VirtualHost(), VirtualHost()
    queue = primary.declare_queue("q")
    replicator = QueueReplicator(backup.declare_queue("q"))
    guard = QueueGuard(queue, "b1")
    sub = ReplicatingSubscription(queue, guard, replicator.ids())
    for i in range(5):
        primary.publish(primary.exchange(""), Message("", "q", body=str(i).encode()))
    tag, body = sub.next_batch() or (0, b"")
    replicator.apply(decode_batch(body))
    queue.purge()
    sent: list[str] = []
    reply = _replies(sent, "purge-ok")
    sub.hold_removal(reply)
    reply.arm()
    sub.acknowledged(tag)  # the enqueues: not the purge
    assert sent == []
    tag, body = sub.next_batch() or (0, b"")
    replicator.apply(decode_batch(body))
    assert replicator.queue.message_count == 0
    sub.acknowledged(tag)
    assert sent == ["purge-ok"]
    # Nothing owed now: the next purge-ok goes at once.
    again = _replies(sent, "again")
    sub.hold_removal(again)
    again.arm()
    assert sent == ["purge-ok", "again"]


class RemovalPromise(RuleBasedStateMachine):
    """One queue replicated to one backup over a link that delivers, applies and
    acknowledges batches in order, and may drop (what was in flight is lost) and come back
    with the reconnect handshake. Purges and single dequeues on the primary; each purge's
    reply is held as purge-ok is."""

    def __init__(self) -> None:
        super().__init__()
        self.primary, self.backup = VirtualHost(), VirtualHost()
        self.queue = self.primary.declare_queue("q")
        self.replicator = QueueReplicator(self.backup.declare_queue("q"))
        self.guard = QueueGuard(self.queue, "b1")
        self.sub: ReplicatingSubscription | None = None
        self.last_key = 0
        self.in_flight: list[tuple[int, bytes]] = []  # sent, not yet applied
        self.applied: list[int] = []  # applied, not yet acknowledged
        self.removed: set[int] = set()  # positions dequeued on the primary
        self.sent: list[int] = []
        self.replies = 0
        self.dropped = False
        self._connect()

    def _connect(self) -> None:
        self.sub = ReplicatingSubscription(
            self.queue, self.guard, self.replicator.ids(), max_batch_events=3
        )
        self.last_key = self.sub.key
        self.in_flight, self.applied = [], []

    @rule(n=st.integers(1, 4))
    def publish(self, n: int) -> None:
        for _ in range(n):
            self.primary.publish(self.primary.exchange(""), Message("", "q", body=b"m"))

    @rule()
    def dequeue_one(self) -> None:
        entries = self.queue.snapshot()
        if entries:
            self.removed.add(entries[0].position)
            self.queue.remove_positions([entries[0].position], 1)

    @rule()
    def purge_with_reply(self) -> None:
        self.removed.update(e.position for e in self.queue.snapshot())
        self.queue.purge()
        number = self.replies
        self.replies += 1
        owed = set(self.removed)

        def reply() -> None:
            if not self.dropped:
                held = {e.position for e in self.replicator.queue.snapshot()}
                assert not held & owed, f"reply {number} before the backup applied the purge"
            self.sent.append(number)

        handle = ReplyHandle(reply)
        if self.sub is None:
            self.guard.hold_removal(handle, self.last_key, NEXT_STREAM)
        else:
            self.sub.hold_removal(handle)
        handle.arm()

    @precondition(lambda self: self.sub is not None)
    @rule()
    def send(self) -> None:
        assert self.sub is not None
        batch = self.sub.next_batch()
        if batch is not None:
            self.in_flight.append(batch)

    @precondition(lambda self: bool(self.in_flight))
    @rule()
    def deliver(self) -> None:
        tag, body = self.in_flight.pop(0)
        self.replicator.apply(decode_batch(body))
        self.applied.append(tag)

    @precondition(lambda self: bool(self.applied) and self.sub is not None)
    @rule(multiple=st.booleans())
    def acknowledge(self, multiple: bool) -> None:
        assert self.sub is not None
        if multiple:
            self.sub.acknowledged(self.applied[-1], multiple=True)
            self.applied = []
        else:
            self.sub.acknowledged(self.applied.pop(0))

    @precondition(lambda self: self.sub is not None)
    @rule()
    def link_drops(self) -> None:
        assert self.sub is not None
        self.sub.close()
        self.sub = None
        self.in_flight, self.applied = [], []

    @precondition(lambda self: self.sub is None)
    @rule()
    def link_back(self) -> None:
        self._connect()

    def teardown(self) -> None:
        # Liveness: once every batch is through, every reply has gone out.
        if self.sub is None:
            self._connect()
        sub = self.sub
        assert sub is not None
        for _ in range(1000):
            batch = sub.next_batch()
            if batch is None and not self.in_flight and not self.applied:
                break
            if batch is not None:
                self.in_flight.append(batch)
            while self.in_flight:
                self.deliver()
            while self.applied:
                sub.acknowledged(self.applied.pop(0))
        assert sorted(self.sent) == list(range(self.replies))
        self.dropped = True
        self.guard.cancel()


TestRemovalPromise = RemovalPromise.TestCase
TestRemovalPromise.settings = settings(max_examples=300, stateful_step_count=15, deadline=None)
