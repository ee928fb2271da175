"""Random queue operation sequences (hypothesis stateful): the books always balance."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from broker.core.message import Entry, Message
from broker.core.queue import Queue
from tests.core.fakes import FakeClock, raw_props


# -- random operation sequences ----------------------------------------------------------
class _MachineConsumer:
    def __init__(self, machine: QueueMachine, tag: str, credit: int | None, no_ack: bool):
        self.machine = machine
        self.tag = tag
        self.exclusive = False
        self.credit = credit
        self.no_ack = no_ack

    def can_deliver(self) -> bool:
        return self.credit is None or self.credit > 0

    def deliver(self, queue: Queue, entry: Entry) -> None:
        assert self.can_deliver()
        if self.credit is not None:
            self.credit -= 1
        self.machine.handed_out(entry, self.no_ack)


class QueueMachine(RuleBasedStateMachine):
    """Random enqueue/deliver/ack/requeue/reject/expire/purge sequences keep the books."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.queue: Queue | None = None
        self.enq: set[Entry] = set()
        self.deq: set[Entry] = set()
        self.unacked: list[Entry] = []
        self.delivered_before: set[Entry] = set()
        self.dead: list[tuple[Entry, str]] = []
        self.consumers: list[_MachineConsumer] = []
        self.bodies = 0

    # observer interface (the machine observes the queue)
    def enqueued(self, queue: Queue, entry: Entry) -> None:
        assert entry not in self.enq, "enqueued twice"
        self.enq.add(entry)

    def enqueued_all(self, queue: Queue, entries: Sequence[Entry]) -> None:
        for entry in entries:
            self.enqueued(queue, entry)

    def dequeued(self, queue: Queue, entry: Entry) -> None:
        assert entry in self.enq, "dequeued without enqueue"
        assert entry not in self.deq, "dequeued twice"
        assert entry not in queue.entries(), "dequeued but still ready"
        self.deq.add(entry)

    def dequeued_all(self, queue: Queue, entries: Sequence[Entry]) -> None:
        for entry in entries:
            self.dequeued(queue, entry)

    def dead_letter(self, queue: Queue, entry: Entry, reason: str) -> None:
        self.dead.append((entry, reason))
        if reason == "expired":
            assert entry.expires_at is not None and entry.expires_at <= self.clock.now

    def handed_out(self, entry: Entry, no_ack: bool) -> None:
        q = self.q
        assert entry in self.enq
        assert entry not in q.entries()
        assert entry.redelivered == (entry in self.delivered_before)
        self.delivered_before.add(entry)
        q.delivered(entry, no_ack)
        if not no_ack:
            self.unacked.append(entry)

    @property
    def q(self) -> Queue:
        assert self.queue is not None
        return self.queue

    @initialize(
        max_length=st.none() | st.integers(0, 4),
        max_bytes=st.none() | st.integers(0, 12),
        overflow=st.sampled_from(["drop-head", "reject-publish", "reject-publish-dlx"]),
        ttl=st.none() | st.integers(0, 50),
        default_limit=st.sampled_from([0, 0, 15]),
    )
    def setup(
        self,
        max_length: int | None,
        max_bytes: int | None,
        overflow: str,
        ttl: int | None,
        default_limit: int,
    ) -> None:
        args: dict[str, Any] = {"x-overflow": overflow, "x-dead-letter-exchange": "dlx"}
        for name, value in (
            ("x-max-length", max_length),
            ("x-max-length-bytes", max_bytes),
            ("x-message-ttl", ttl),
        ):
            if value is not None:
                args[name] = value
        self.queue = Queue(
            "q",
            clock=self.clock,
            arguments=args,
            dead_letter=self.dead_letter,
            default_limit_bytes=default_limit,
        )
        self.queue.observers.append(self)

    @rule(size=st.integers(0, 6), expiration=st.none() | st.integers(0, 60))
    def enqueue(self, size: int, expiration: int | None) -> None:
        self.bodies += 1
        body = str(self.bodies).encode().ljust(size, b".")[: max(size, 1)]
        props = {} if expiration is None else {"expiration": str(expiration)}
        msg = Message("", "q", raw_props(**props) if props else b"\x00\x00", body)
        before_enq, before_dead = len(self.enq), len(self.dead)
        accepted = self.q.enqueue(msg)
        heard = [e for e in self.enq if e.message is msg]
        dead_new = [e for e, _ in self.dead[before_dead:] if e.message is msg and e.position == 0]
        if accepted:
            # on the queue (or delivered), or dropped at once as the one that cannot fit
            assert len(heard) + len(dead_new) == 1
        else:
            assert not heard
            assert len(self.enq) == before_enq
            assert len(dead_new) == (1 if self.q.limits.overflow == "reject-publish-dlx" else 0)

    @rule(credit=st.none() | st.integers(0, 3), no_ack=st.booleans())
    def add_consumer(self, credit: int | None, no_ack: bool) -> None:
        consumer = _MachineConsumer(self, f"c{len(self.consumers)}", credit, no_ack)
        self.consumers.append(consumer)
        self.q.add_consumer(consumer)

    @precondition(lambda self: self.consumers)
    @rule(index=st.integers(0, 100))
    def remove_consumer(self, index: int) -> None:
        consumer = self.consumers.pop(index % len(self.consumers))
        self.q.remove_consumer(consumer)

    @precondition(lambda self: self.consumers)
    @rule(index=st.integers(0, 100), credit=st.none() | st.integers(0, 3))
    def set_credit(self, index: int, credit: int | None) -> None:
        self.consumers[index % len(self.consumers)].credit = credit
        self.q.credit_returned(self.consumers[index % len(self.consumers)])
        self.q.dispatch()

    @rule(no_ack=st.booleans())
    def get(self, no_ack: bool) -> None:
        entry = self.q.get()
        if entry is not None:
            self.handed_out(entry, no_ack)

    @precondition(lambda self: self.unacked)
    @rule(index=st.integers(0, 100))
    def ack(self, index: int) -> None:
        entry = self.unacked.pop(index % len(self.unacked))
        self.q.settle(entry)
        assert entry in self.deq

    @precondition(lambda self: self.unacked)
    @rule(index=st.integers(0, 100), requeue=st.booleans())
    def reject(self, index: int, requeue: bool) -> None:
        entry = self.unacked.pop(index % len(self.unacked))
        dead_before = len(self.dead)
        self.q.reject(entry, requeue)
        if not requeue:
            assert entry in self.deq
            assert self.dead[dead_before] == (entry, "rejected")

    @precondition(lambda self: self.unacked)
    @rule(picks=st.lists(st.integers(0, 100), min_size=1, max_size=5))
    def requeue(self, picks: list[int]) -> None:
        chosen: list[Entry] = []
        for pick in picks:
            if self.unacked:
                chosen.append(self.unacked.pop(pick % len(self.unacked)))
        self.q.requeue(chosen)
        for entry in chosen:
            assert entry.redelivered
            assert entry in self.q.entries() or entry in self.unacked or entry in self.deq

    @rule(ms=st.integers(0, 40))
    def advance_and_expire(self, ms: int) -> None:
        self.clock.advance(ms / 1000)
        self.q.expire()
        head = self.q.entries()[:1]
        assert not head or head[0].expires_at is None or head[0].expires_at > self.clock.now

    @rule()
    def purge(self) -> None:
        count = self.q.message_count
        assert self.q.purge() == count
        assert self.q.message_count == 0

    @rule()
    def dispatch(self) -> None:
        self.q.dispatch()

    @invariant()
    def books_balance(self) -> None:
        if self.queue is None:
            return
        q = self.queue
        ready = q.entries()
        ready_set = set(ready)
        unacked_set = set(self.unacked)
        assert len(ready_set) == len(ready)
        assert len(unacked_set) == len(self.unacked)
        assert not ready_set & unacked_set
        assert not ready_set & self.deq
        assert not unacked_set & self.deq
        # every enqueued message is dequeued exactly once, or still ready, or unacked
        assert self.enq == self.deq | ready_set | unacked_set
        assert q.message_count == len(ready)
        assert q.unacked == len(self.unacked)
        assert q.bytes == sum(len(e.message.body) for e in ready)
        assert q.enqueued_total == len(self.enq)
        positions = [e.position for e in ready]
        assert positions == sorted(positions)
        assert len(set(positions)) == len(positions)
        for entry, reason in self.dead:
            if entry.position:  # it had been on the queue: it left for good
                assert entry in self.deq
            assert reason in ("expired", "maxlen", "rejected")

    def teardown(self) -> None:
        if self.queue is None:
            return
        for entry in self.unacked:
            self.queue.settle(entry)
        self.unacked.clear()
        self.queue.purge()
        assert self.deq == self.enq
        assert self.queue.unacked == 0
        assert self.queue.bytes == 0


TestQueueMachine = QueueMachine.TestCase
TestQueueMachine.settings = settings(max_examples=300, stateful_step_count=50, deadline=None)
