"""The commit core both protocols use (``broker/core/transaction.py``), without sockets:
a real virtual host and queue, a fake in-sync backup (a queue observer in the GUARD role
holding each message's confirm, as the HA module's ``QueueGuard`` does) and a fake
replication barrier for the dequeues.

The rule (hypothesis): whatever the interleaving of publishes, acknowledgements, commits
and rollbacks, the queue holds exactly the committed publishes, in order, the committed
acknowledgements' deliveries are gone and every other one is still unacknowledged; and
each commit's answer comes once, only after the backup holds its messages and the
barrier passed its dequeues, never before.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from broker.core.message import Entry, Message
from broker.core.queue import Queue
from broker.core.queue_contracts import ObserverRole
from broker.core.transaction import Transaction
from broker.core.vhost import VirtualHost
from tests.core.fakes import FakeClock, GuardingBackup

DELIVERED = 6


class Barrier:
    """The replication barrier: the dequeues' callbacks wait here until passed."""

    def __init__(self) -> None:
        self.waiting: list[tuple[Callable[[], None], tuple[Queue, ...]]] = []

    def __call__(self, done: Callable[[], None], queues: tuple[Queue, ...]) -> None:
        self.waiting.append((done, queues))

    def pass_all(self) -> None:
        waiting, self.waiting = self.waiting, []
        for done, _ in waiting:
            done()


class Ack:
    """An acknowledgement a transaction holds (a TxSettlement)."""

    def __init__(self, queue: Queue, entry: Entry, rolled: list[Entry]) -> None:
        self.queue, self.entry, self.rolled = queue, entry, rolled

    def apply(self) -> list[Queue]:
        self.queue.settle(self.entry)
        return [self.queue]

    def rolled_back(self) -> None:
        self.rolled.append(self.entry)


def setup() -> tuple[VirtualHost, Queue, list[Entry], GuardingBackup]:
    vhost = VirtualHost(clock=FakeClock())
    queue = vhost.declare_queue("q")
    for i in range(DELIVERED):
        vhost.publish(vhost.exchanges[""], Message("", "q", body=b"d%d" % i))
    entries = []
    for _ in range(DELIVERED):
        entry = queue.get()
        assert entry is not None
        queue.delivered(entry, False)
        entries.append(entry)
    backup = GuardingBackup()
    queue.observe(backup, ObserverRole.GUARD)
    return vhost, queue, entries, backup


def _count(answers: list[int]) -> Callable[[], None]:
    return lambda: answers.append(1)


def ready_bodies(queue: Queue) -> list[bytes]:
    bodies = []
    while (entry := queue.get()) is not None:
        bodies.append(entry.message.body)
        queue.delivered(entry, True)
    return bodies


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("publish"), st.integers(0, 99)),
        st.tuples(st.just("ack"), st.integers(0, DELIVERED - 1)),
        st.tuples(st.just("commit"), st.booleans()),
        st.tuples(st.just("rollback"), st.just(0)),
    ),
    max_size=30,
)


@given(OPS)
@example([])
@example([("commit", False)])  # an empty commit answers at once
@example([("publish", 1), ("rollback", 0), ("commit", True)])
@example([("ack", 0), ("ack", 1), ("commit", False), ("ack", 2), ("rollback", 0)])
@example([("publish", 1), ("ack", 3), ("commit", True), ("publish", 2), ("commit", False)])
@settings(max_examples=200, deadline=None)
def test_only_committed_work_takes_effect_and_each_answer_waits_for_the_backup(
    ops: list[tuple[str, int]],
) -> None:
    vhost, queue, entries, backup = setup()
    barrier = Barrier()
    txn = Transaction()
    committed: list[bytes] = []
    settled: set[int] = set()
    held_publishes: list[bytes] = []
    held_acks: set[int] = set()
    rolled: list[Entry] = []
    for op, arg in ops:
        if op == "publish":
            body = b"p%d" % arg
            txn.publish(vhost.exchanges[""], Message("", "q", body=body))
            held_publishes.append(body)
        elif op == "ack":
            if arg in settled or arg in held_acks:
                continue  # a delivery is acknowledged once
            txn.settle(Ack(queue, entries[arg], rolled))
            held_acks.add(arg)
        elif op == "rollback":
            rolled.clear()
            txn.rollback()
            assert sorted(e.message.body for e in rolled) == sorted(b"d%d" % i for i in held_acks)
            held_publishes, held_acks = [], set()
            assert txn.empty
        else:
            answers: list[int] = []
            txn.commit(vhost, None, barrier, _count(answers))
            assert txn.empty  # the next transaction starts empty
            committed += held_publishes
            settled |= held_acks
            waits_backup, waits_barrier = bool(held_publishes), bool(held_acks)
            held_publishes, held_acks = [], set()
            if waits_backup or waits_barrier:
                assert answers == []  # neither the backup nor the barrier has it yet
            # the two in either order (``arg``): the answer only after both
            for step in (backup.acknowledge_all, barrier.pass_all)[:: 1 if arg else -1]:
                step()
            assert answers == [1]
        assert queue.unacked == DELIVERED - len(settled)
        assert queue.message_count == len(committed)
    assert ready_bodies(queue) == committed


def test_a_commit_routes_under_one_mark_in_one_store_transaction_and_returns_unroutable() -> None:
    vhost, queue, _, backup = setup()
    txn = Transaction()
    first, second = Message("", "q", body=b"a"), Message("", "q", body=b"b")
    lost = Message("", "nowhere", body=b"c")
    returned: list[Message] = []
    txn.publish(vhost.exchanges[""], first)
    txn.publish(vhost.exchanges[""], second)
    txn.publish(vhost.exchanges[""], lost, lambda: returned.append(lost))
    stored: list[str] = []

    class StoreTransaction:
        def __enter__(self) -> None:
            stored.append("begin")
            assert queue.message_count == 0

        def __exit__(self, *exc: object) -> None:
            stored.append("end")
            assert queue.message_count == 2  # every enqueue inside it

    answers: list[int] = []
    txn.commit(vhost, StoreTransaction, Barrier(), lambda: answers.append(1))
    assert stored == ["begin", "end"] and returned == [lost]
    assert first.tx is not None and first.tx is second.tx  # applied all or none by backups
    assert answers == []
    backup.acknowledge_all()
    assert answers == [1]


class _Channel:
    """What a commit's answer holds (the 0-9-1 channel, the 1.0 coordinator link)."""

    def __init__(self) -> None:
        self.answers = 0

    def committed(self) -> None:
        self.answers += 1


@pytest.mark.usefixtures("no_cyclic_collector")
def test_an_answered_commit_leaves_no_reference_cycle_to_its_channel() -> None:
    """Once answered, the commit's confirms and its answer let go of each other and of the
    channel's callback: freed by reference counting, not kept by the cyclic collector (a
    heap frozen meanwhile would keep the channel and its connection for good)."""
    vhost, _, _, backup = setup()
    txn = Transaction()
    txn.publish(vhost.exchanges[""], Message("", "q", body=b"a"))
    channel = _Channel()
    barrier = Barrier()
    txn.commit(vhost, None, barrier, channel.committed)
    backup.acknowledge_all()
    assert channel.answers == 1
    gone = weakref.ref(channel)
    del channel
    assert gone() is None
