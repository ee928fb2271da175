"""A backup applies a transaction all or nothing (issue 10, item 3; docs/ha-design.md
"Transactions"), sans I/O: real subscriptions on a primary's queues, the real wire format,
queue replicators sharing one TxStaging, batches delivered in any interleaving."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.core.message import Message, TxMark
from broker.core.vhost import VirtualHost
from broker.ha.id_set import IdSet
from broker.ha.queue_replicator import QueueReplicator
from broker.ha.replicating_subscription import ReplicatingSubscription
from broker.ha.tx_staging import TxStaging
from broker.ha.wire import Enqueue, Tx, TxBase, decode_batch

QUEUES = ("q1", "q2", "q3")


@pytest.fixture(autouse=True)
def _fresh_tx_ids() -> Iterator[None]:
    """Transaction ids count per process (one broker per process): give them back, so a
    later in-process primary of the same test worker starts as if no transaction was ever
    committed (its first batch without TXBASE, as tests/ha/test_streams.py expects)."""
    saved = TxMark._next_id
    yield
    TxMark._next_id = saved


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


class Link:
    """A primary's queues, their copies on a backup, one subscription per queue."""

    def __init__(self, max_batch_events: int = 4) -> None:
        self.primary = VirtualHost(clock=Clock())
        self.backup = VirtualHost(clock=Clock())
        self.staging = TxStaging()
        self.replicators: dict[str, QueueReplicator] = {}
        self.subs: dict[str, ReplicatingSubscription] = {}
        for name in QUEUES:
            self.primary.declare_queue(name)
            copy = self.backup.declare_queue(name)
            self.replicators[name] = QueueReplicator(copy, self.staging)
        self.max_batch_events = max_batch_events
        self.tx_of: dict[bytes, int] = {}  # body -> transaction number (test's own)

    def subscribe(self, name: str) -> None:
        queue = self.primary.queues[name]
        self.subs[name] = ReplicatingSubscription(
            queue, None, self.replicators[name].ids(), max_batch_events=self.max_batch_events
        )

    def commit(self, number: int, routes: list[str]) -> None:
        """A transaction as tx.commit makes it: one mark, then each message routed."""
        mark = TxMark()
        exchange = self.primary.exchange("")
        for i, name in enumerate(routes):
            body = f"t{number}-{i}".encode()
            message = Message("", name, body=body)
            message.tx = mark
            self.tx_of[body] = number
            self.primary.publish(exchange, message)

    def publish(self, name: str, body: bytes) -> None:
        self.primary.publish(self.primary.exchange(""), Message("", name, body=body))

    def batches(self, name: str) -> list[bytes]:
        sub = self.subs[name]
        out = []
        while (batch := sub.next_batch()) is not None:
            out.append(batch[1])
        return out

    def visible(self, name: str) -> list[bytes]:
        return [entry.message.body for entry in self.backup.queues[name].snapshot()]

    def primary_bodies(self, name: str) -> list[bytes]:
        return [entry.message.body for entry in self.primary.queues[name].snapshot()]


def _all_or_none(link: Link, sizes: dict[int, int]) -> None:
    held: dict[int, int] = {}
    for name in QUEUES:
        for body in link.visible(name):
            if body in link.tx_of:
                held[link.tx_of[body]] = held.get(link.tx_of[body], 0) + 1
    for number, count in held.items():
        assert count == sizes[number], f"transaction {number}: {count} of {sizes[number]}"


def test_a_transaction_over_three_queues_is_invisible_until_whole() -> None:
    link = Link()
    base = TxMark.next_id()
    for name in QUEUES:
        link.subscribe(name)
    link.commit(1, ["q1", "q2", "q3", "q3"])
    batches = {name: link.batches(name) for name in QUEUES}
    events = decode_batch(batches["q3"][0])
    if base > 1:  # no TxBase while no transaction was ever committed in this process
        assert events.pop(0) == TxBase(base)
    assert isinstance(events[0], Tx) and events[0].id == base
    assert isinstance(events[0], Tx) and (events[0].total, events[0].count) == (4, 2)
    link.replicators["q1"].apply(decode_batch(batches["q1"][0]))
    link.replicators["q3"].apply(decode_batch(batches["q3"][0]))
    assert [link.visible(n) for n in QUEUES] == [[], [], []]
    assert link.staging.staged == 1
    link.replicators["q2"].apply(decode_batch(batches["q2"][0]))
    assert [link.visible(n) for n in QUEUES] == [[b"t1-0"], [b"t1-1"], [b"t1-2", b"t1-3"]]
    assert link.staging.staged == 0 and link.staging.applied_total == 1


def test_later_events_of_a_queue_wait_behind_its_staged_part() -> None:
    link = Link(max_batch_events=1)
    for name in QUEUES:
        link.subscribe(name)
    link.commit(1, ["q1", "q2"])
    link.publish("q1", b"after")
    q1 = link.batches("q1")
    for body in q1:
        link.replicators["q1"].apply(decode_batch(body))
    assert link.visible("q1") == []  # "after" waits behind the staged t1-0
    for body in link.batches("q2"):
        link.replicators["q2"].apply(decode_batch(body))
    assert link.visible("q1") == [b"t1-0", b"after"]
    assert link.visible("q2") == [b"t1-1"]


def test_a_message_consumed_before_it_was_sent_still_completes_its_transaction() -> None:
    link = Link()
    for name in QUEUES:
        link.subscribe(name)
    link.commit(1, ["q1", "q2"])
    queue = link.primary.queues["q1"]
    entry = queue.snapshot()[0]
    queue.remove_positions(_ids(entry.position), 1)
    for name in ("q1", "q2"):
        for body in link.batches(name):
            link.replicators[name].apply(decode_batch(body))
    assert link.visible("q1") == [] and link.visible("q2") == [b"t1-1"]
    assert link.staging.applied_total == 1


def _ids(position: int) -> IdSet:
    return IdSet([position])


def test_the_primary_dying_after_one_queues_batch_leaves_none_of_it() -> None:
    """The fail-over mid-commit: q1's batch arrived, q2's did not; at promotion the staged
    part is discarded and logged, and the events behind it on q1 are kept."""
    link = Link()
    for name in QUEUES:
        link.subscribe(name)
    link.publish("q1", b"before")
    link.commit(1, ["q1", "q2", "q3"])
    link.publish("q1", b"after")
    for body in link.batches("q1"):
        link.replicators["q1"].apply(decode_batch(body))
    discarded = link.staging.abandon()  # what _drop_link does at promotion
    assert [(d.total, d.arrived, d.queues) for d in discarded] == [(3, 1, {"q1": 1})]
    assert link.visible("q1") == [b"before", b"after"]
    assert link.visible("q2") == link.visible("q3") == []
    assert link.staging.staged == 0


def test_abandon_writes_the_whole_transactions_behind_a_dropped_one_at_once() -> None:
    """At promotion, a whole transaction blocked behind one that will never be whole is
    applied inside one store transaction (one TX record on the backup's disk), as it would
    have been on time: a crash during that write leaves none of it."""
    link = Link()
    written: list[dict[str, list[bytes]]] = []

    @contextmanager
    def store_transaction() -> Iterator[None]:
        before = {name: len(link.visible(name)) for name in QUEUES}
        yield
        written.append({name: link.visible(name)[before[name] :] for name in QUEUES})

    link.staging.store_transaction = store_transaction
    for name in QUEUES:
        link.subscribe(name)
    link.commit(1, ["q1", "q2", "q3"])  # q3's part never arrives
    link.commit(2, ["q1", "q2"])  # whole, but behind transaction 1 on q1 and q2
    for name in ("q1", "q2"):
        for body in link.batches(name):
            link.replicators[name].apply(decode_batch(body))
    assert written == [] and link.visible("q1") == link.visible("q2") == []
    discarded = link.staging.abandon()
    assert [d.total for d in discarded] == [3]
    assert written == [{"q1": [b"t2-0"], "q2": [b"t2-1"], "q3": []}]


def test_a_stream_started_after_a_commit_releases_it() -> None:
    staging = TxStaging()
    vhost = VirtualHost(clock=Clock())
    r1 = QueueReplicator(vhost.declare_queue("q1"), staging)
    r2 = QueueReplicator(vhost.declare_queue("q2"), staging)
    r1.apply([Tx(7, 2, 1), Enqueue(1, "", "q1", b"\x00\x00", b"a")])
    assert vhost.queues["q1"].snapshot() == []
    r2.apply([TxBase(8), Enqueue(1, "", "q2", b"\x00\x00", b"b")])  # its part may come unmarked
    assert [e.message.body for e in vhost.queues["q1"].snapshot()] == [b"a"]
    r1.apply([Tx(7, 2, 1), Enqueue(2, "", "q1", b"\x00\x00", b"c")])  # released: applied at once
    assert [e.message.body for e in vhost.queues["q1"].snapshot()] == [b"a", b"c"]


def test_a_queue_gone_releases_what_may_miss_a_part_there() -> None:
    staging = TxStaging()
    vhost = VirtualHost(clock=Clock())
    r1 = QueueReplicator(vhost.declare_queue("q1"), staging)
    r2 = QueueReplicator(vhost.declare_queue("q2"), staging)
    r1.apply(
        [
            Tx(7, 2, 1),
            Enqueue(1, "", "q1", b"\x00\x00", b"a"),
            Enqueue(2, "", "q1", b"\x00\x00", b"x"),
        ]
    )
    staging.queue_gone(r2)
    assert [e.message.body for e in vhost.queues["q1"].snapshot()] == [b"a", b"x"]


def test_without_staging_a_transaction_applies_as_it_comes() -> None:
    vhost = VirtualHost(clock=Clock())
    replicator = QueueReplicator(vhost.declare_queue("q1"))
    replicator.apply([TxBase(3), Tx(7, 2, 1), Enqueue(1, "", "q1", b"\x00\x00", b"a")])
    assert [e.message.body for e in vhost.queues["q1"].snapshot()] == [b"a"]


# -- any interleaving --------------------------------------------------------------------------

workloads = st.lists(
    st.one_of(
        st.lists(st.sampled_from(QUEUES), min_size=1, max_size=5).map(lambda r: ("tx", r)),
        st.sampled_from(QUEUES).map(lambda q: ("plain", [q])),
    ),
    min_size=1,
    max_size=8,
)


@given(workloads, st.integers(1, 4), st.randoms(use_true_random=False), st.booleans())
@settings(max_examples=150, deadline=None)
def test_any_interleaving_shows_all_of_a_transaction_or_none_in_the_primarys_order(
    workload: list[tuple[str, list[str]]], batch_events: int, rnd: object, cut: bool
) -> None:
    import random

    assert isinstance(rnd, random.Random)
    link = Link(max_batch_events=batch_events)
    for name in QUEUES:
        link.subscribe(name)
    sizes: dict[int, int] = {}
    for number, (kind, routes) in enumerate(workload):
        if kind == "tx":
            link.commit(number, routes)
            sizes[number] = len(routes)
        else:
            link.publish(routes[0], f"p{number}".encode())
    queued = {name: link.batches(name) for name in QUEUES}
    order = [name for name in QUEUES for _ in queued[name]]
    rnd.shuffle(order)
    if cut:  # the primary dies: some batches never arrive
        order = order[: rnd.randrange(len(order) + 1)]
    for name in order:
        link.replicators[name].apply(decode_batch(queued[name].pop(0)))
        _all_or_none(link, sizes)
        for queue_name in QUEUES:
            visible = link.visible(queue_name)
            primary = link.primary_bodies(queue_name)
            assert visible == primary[: len(visible)] or _is_subsequence(visible, primary)
    if cut:
        link.staging.abandon()
        _all_or_none(link, sizes)
    else:
        for name in QUEUES:
            assert link.visible(name) == link.primary_bodies(name)
    for name in QUEUES:
        assert _is_subsequence(link.visible(name), link.primary_bodies(name))


def _is_subsequence(part: list[bytes], whole: list[bytes]) -> bool:
    it = iter(whole)
    return all(item in it for item in part)
