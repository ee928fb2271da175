"""The catch-up fast paths: EnqueuePacker, decode_batch's reuse of repeated fields,
IdSet.from_ascending, ReplicatingSubscription's batches, QueueReplicator.apply's counts,
CatchUpGc and AckCoalescer (bench/catchup.py measures the rate; docs/benchmarks.md)."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.core.message import Message
from broker.core.queue import Queue
from broker.ha.id_set import MAX_ID, IdSet
from broker.ha.queue_guard import QueueGuard
from broker.ha.queue_replicator import AckCoalescer, CatchUpGc, QueueReplicator, heap_blocks
from broker.ha.replicating_subscription import ReplicatingSubscription
from broker.ha.wire import (
    Dequeue,
    Enqueue,
    EnqueuePacker,
    QueueCaughtUp,
    StreamEvent,
    decode_batch,
    encode_batch,
)

names = st.text(max_size=60)
enqueues = st.builds(
    Enqueue,
    id=st.one_of(st.integers(0, 1000), st.just(MAX_ID)),
    exchange=st.sampled_from(["", "amq.direct", "ab", "ba"]) | names,
    routing_key=st.sampled_from(["q", "r", "κ"]) | names,
    properties=st.sampled_from([b"", b"\x00\x00", b"\x01\x02", b"\x02\x01"])
    | st.binary(max_size=8),
    body=st.binary(max_size=40),
)


# -- EnqueuePacker ------------------------------------------------------------------------------


@given(st.lists(enqueues, max_size=8))
def test_packer_makes_the_bytes_of_encode_batch(events: list[Enqueue]) -> None:
    packer = EnqueuePacker()
    parts = [EnqueuePacker.VERSION_BYTE]
    for e in events:
        head, properties, body, size = packer.pack(
            e.id, e.exchange, e.routing_key, e.properties, e.body
        )
        assert size == len(head) + len(properties) + len(body)
        parts += (head, properties, body)
    assert b"".join(parts) == encode_batch(events)


@pytest.mark.parametrize(
    "fields",
    [
        (-1, "", "q", b"", b""),
        (1, None, "q", b"", b""),
        (1, "x" * 256, "q", b"", b""),
        (1, "", "\ud800", b"", b""),
        (1, "", "q", bytearray(b"p"), b""),
        (1, "", "q", b"", "not bytes"),
    ],
)
def test_packer_refuses_what_encode_batch_refuses(fields: tuple) -> None:  # type: ignore[type-arg]
    with pytest.raises((ValueError, TypeError)) as expected:
        encode_batch([Enqueue(*fields)])
    with pytest.raises(expected.type) as got:
        EnqueuePacker().pack(*fields)
    assert str(got.value).split(": ", 1)[1] == str(expected.value).split(": ", 1)[1]


def test_packer_route_follows_each_message() -> None:
    packer = EnqueuePacker()
    events = [
        Enqueue(i, ex, key, b"", b"x")
        for i, (ex, key) in enumerate([("a", "b"), ("a", "b"), ("ab", ""), ("", "ab"), ("a", "b")])
    ]
    parts = [EnqueuePacker.VERSION_BYTE]
    for e in events:
        parts += packer.pack(e.id, e.exchange, e.routing_key, e.properties, e.body)[:3]
    assert decode_batch(b"".join(parts)) == events


# -- decode_batch reuses repeated fields, never wrongly ------------------------------------------


@given(st.lists(enqueues, max_size=10))
def test_decode_round_trip_with_repeated_and_lookalike_fields(events: list[Enqueue]) -> None:
    assert decode_batch(encode_batch(events)) == events


def test_decode_shares_equal_fields_and_tells_same_length_ones_apart() -> None:
    events: list[StreamEvent] = [
        Enqueue(1, "ab", "k", b"\x01\x02", b"1"),
        Enqueue(2, "ab", "k", b"\x01\x02", b"2"),
        Enqueue(3, "ba", "k", b"\x02\x01", b"3"),  # same lengths, other bytes
        Enqueue(4, "a", "bk", b"\x02\x01", b"4"),  # same route bytes, split differently
        Dequeue(IdSet([1])),
        Enqueue(5, "a", "bk", b"\x02\x01", b"5"),
        QueueCaughtUp(),
    ]
    decoded = decode_batch(encode_batch(events))
    assert decoded == events
    first, second, third, fourth, _, fifth, _ = decoded
    assert isinstance(first, Enqueue) and isinstance(second, Enqueue)
    assert second.properties is first.properties and second.routing_key is first.routing_key
    assert isinstance(third, Enqueue) and third.properties == b"\x02\x01"
    assert isinstance(fourth, Enqueue) and (fourth.exchange, fourth.routing_key) == ("a", "bk")
    assert isinstance(fifth, Enqueue) and fifth.exchange is fourth.exchange


def test_decode_still_refuses_invalid_utf8_after_a_valid_route() -> None:
    good = encode_batch([Enqueue(1, "a", "b", b"", b"")])
    bad = encode_batch([Enqueue(2, "a", "c", b"", b"")]).replace(b"ac", b"a\xff")
    with pytest.raises(ValueError, match="UTF-8"):
        decode_batch(good + bad[1:])


# -- IdSet.from_ascending -----------------------------------------------------------------------


@given(st.sets(st.integers(0, 200), max_size=50))
def test_from_ascending_equals_the_set(ids: set[int]) -> None:
    built = IdSet.from_ascending(sorted(ids))
    assert built == IdSet(ids)
    assert len(built) == len(ids) and built.ranges() == IdSet(ids).ranges()


@pytest.mark.parametrize("ids", [[1, 1], [2, 1], [-1], [0, -1], [MAX_ID + 1]])
def test_from_ascending_refuses_bad_input(ids: list[int]) -> None:
    with pytest.raises(ValueError):
        IdSet.from_ascending(ids)


def test_from_ascending_refuses_non_ints() -> None:
    with pytest.raises(TypeError):
        IdSet.from_ascending(["1"])  # type: ignore[list-item]


# -- ReplicatingSubscription batches ------------------------------------------------------------


def _queue(n: int, routing_key: str = "q") -> Queue:
    queue = Queue("q", clock=time.monotonic)
    for i in range(n):
        queue.enqueue(Message("", routing_key, b"\x00\x00", b"m%d" % i))
    return queue


def _drain(sub: ReplicatingSubscription) -> list[StreamEvent]:
    events: list[StreamEvent] = []
    while sub.has_work:
        batch = sub.next_batch()
        if batch is None:
            break
        events += decode_batch(batch[1])
        sub.acknowledged(batch[0])
    return events


def test_batches_respect_the_budget_and_carry_every_message_once() -> None:
    queue = _queue(100)
    sub = ReplicatingSubscription(queue, QueueGuard(queue, "b"), IdSet(), max_batch_bytes=200)
    sizes = []
    events: list[StreamEvent] = []
    while sub.has_work:
        batch = sub.next_batch()
        assert batch is not None
        sizes.append(len(batch[1]))
        events += decode_batch(batch[1])
        sub.acknowledged(batch[0])
    enqueued = [e for e in events if isinstance(e, Enqueue)]
    assert [e.id for e in enqueued] == list(range(1, 101))
    assert [e.body for e in enqueued] == [b"m%d" % i for i in range(100)]
    assert all(size < 200 + 40 for size in sizes)  # the last event may pass the budget
    assert isinstance(events[-1], QueueCaughtUp) and sub.ready and sub.last_sent == 100


def test_reconnect_handshake_with_the_fast_snapshot() -> None:
    queue = _queue(10)
    # The backup holds 1..4 and 20 (gone on the primary), misses 5..10.
    sub = ReplicatingSubscription(queue, QueueGuard(queue, "b"), IdSet([1, 2, 3, 4, 20]))
    events = _drain(sub)
    assert [e.id for e in events if isinstance(e, Enqueue)] == list(range(5, 11))
    dequeues = [e for e in events if isinstance(e, Dequeue)]
    assert len(dequeues) == 1 and list(dequeues[0].ids) == [20]


def test_acks_release_guarded_messages_published_during_catch_up() -> None:
    queue = _queue(5)
    guard = QueueGuard(queue, "b")
    sub = ReplicatingSubscription(queue, guard, IdSet())

    class Handle:
        settled = False
        holds = 0

        def hold(self) -> None:
            self.holds += 1

        def release(self) -> None:
            self.holds -= 1

    handle = Handle()
    message = Message("", "q", b"\x00\x00", b"new")
    message.confirm = handle  # type: ignore[assignment]
    queue.enqueue(message)
    assert guard.held == 1
    _drain(sub)
    assert guard.held == 0 and handle.holds == 0


# -- QueueReplicator ----------------------------------------------------------------------------


def test_apply_counts_what_it_enqueued_before_a_bad_message() -> None:
    queue = Queue("q", clock=time.monotonic)
    replicator = QueueReplicator(queue)
    with pytest.raises(ValueError):
        replicator.apply(
            [Enqueue(1, "", "q", b"\x00\x00", b"a"), Enqueue(2, "", "q", b"\x80", b"b")]
        )
    assert replicator.enqueued_total == 1 and queue.message_count == 1


def test_apply_takes_enqueue_subclasses() -> None:
    class Tagged(Enqueue):
        pass

    queue = Queue("q", clock=time.monotonic)
    QueueReplicator(queue).apply([Tagged(1, "", "q", b"\x00\x00", b"a")])
    assert queue.message_count == 1


@given(st.lists(st.sampled_from(["plain", "persistent", "expiring"]), max_size=12))
def test_apply_reads_each_message_properties_as_the_message_would(kinds: list[str]) -> None:
    """A batch's equal property blocks are scanned once (decode_batch makes them one bytes
    object): each message is still persistent or expiring as its own block says."""
    blocks = {
        "plain": b"\x00\x00",
        "persistent": bytes.fromhex("1000") + b"\x02",
        "expiring": bytes.fromhex("0100") + b"\x045000",
    }
    body = encode_batch(
        [Enqueue(i + 1, "", "q", blocks[kind], b"m") for i, kind in enumerate(kinds)]
    )
    queue = Queue("q", clock=time.monotonic)
    QueueReplicator(queue).apply(decode_batch(body))
    messages = [entry.message for entry in queue.snapshot()]
    assert [m.persistent for m in messages] == [kind == "persistent" for kind in kinds]
    assert [m.expiration_ms for m in messages] == [
        5000 if kind == "expiring" else None for kind in kinds
    ]


# -- CatchUpGc ----------------------------------------------------------------------------------


def test_catch_up_gc_freezes_while_active_and_unfreezes_at_the_end() -> None:
    gc.unfreeze()  # an in-process broker of an earlier test on this worker may have frozen it
    policy = CatchUpGc(unfreeze_max=10**9)  # whatever this test process holds
    policy.end()  # not active: nothing to undo
    keep = [object() for _ in range(10)]  # noqa: F841 - alive while frozen
    try:
        policy.applied()
        assert policy.active and gc.get_freeze_count() > 0
        policy.applied()
    finally:
        policy.end()
    assert not policy.active and gc.get_freeze_count() == 0 and policy.kept_frozen == 0


def test_catch_up_gc_keeps_a_big_heap_frozen_at_the_end() -> None:
    """Unfrozen, a heap of more than ``unfreeze_max`` blocks would be walked by the next
    full collection in one step of the loop: it stays frozen."""
    gc.unfreeze()  # an in-process broker of an earlier test on this worker may have frozen it
    policy = CatchUpGc(unfreeze_max=5)
    keep = [object() for _ in range(10)]  # noqa: F841 - alive while frozen
    try:
        policy.applied()
        policy.end()
        assert not policy.active and policy.kept_frozen == 1
        assert gc.get_freeze_count() > 5
    finally:
        gc.unfreeze()


def test_heap_blocks_bound_the_objects_the_collector_tracks() -> None:
    """What :class:`CatchUpGc` decides by: never fewer than the tracked objects, frozen
    or not (which a full collection after ``gc.unfreeze()`` would walk)."""
    keep: list[list[int]] = [[] for _ in range(20_000)]  # noqa: F841 - tracked, alive while frozen
    gc.freeze()
    try:
        assert heap_blocks() >= gc.get_freeze_count() + len(gc.get_objects())
    finally:
        gc.unfreeze()


def test_catch_up_gc_end_does_not_walk_a_frozen_heap_of_millions() -> None:
    """The end of a catch-up decides in constant time per allocator pool: with 1.5 million
    frozen objects it takes under a millisecond of CPU, where counting them
    (``gc.get_freeze_count()``) took 36 ms on a quiet machine (3 million: 72 ms; 100-144
    ms steps at 10,000 queues on a loaded one)."""
    policy = CatchUpGc()
    gc.disable()  # no collection walks them while they are made
    try:
        keep: list[list[int]] = [[] for _ in range(1_500_000)]  # noqa: F841 - tracked, alive while frozen
        policy.applied()
    finally:
        gc.enable()
    try:
        started = time.thread_time()
        policy.end()
        took = time.thread_time() - started
        assert policy.kept_frozen == 1 and gc.get_freeze_count() > 0
        assert took < 0.01, f"{took * 1000:.1f} ms of CPU"
    finally:
        gc.unfreeze()


# -- AckCoalescer -------------------------------------------------------------------------------


class _Loop:
    def __init__(self) -> None:
        self.soon: list[Callable[[], None]] = []

    def call_soon(self, callback: Callable[[], None]) -> None:
        self.soon.append(callback)

    def run(self) -> None:
        soon, self.soon = self.soon, []
        for callback in soon:
            callback()


def test_acks_every_n_and_flushes_the_rest_when_the_loop_turns() -> None:
    loop = _Loop()
    acks: list[tuple[int, bool]] = []
    coalescer = AckCoalescer(lambda tag, multiple: acks.append((tag, multiple)), loop.call_soon, 3)
    for tag in range(1, 8):
        coalescer.applied(tag)
    assert acks == [(3, True), (6, True)]
    loop.run()
    assert acks == [(3, True), (6, True), (7, True)]
    loop.run()  # nothing pending: no ack
    coalescer.applied(8)
    loop.run()
    assert acks[-1] == (8, True) and len(acks) == 4


def test_scheduled_flush_ignores_a_closed_channel_only() -> None:
    loop = _Loop()

    class Closed(Exception):
        pass

    def closed(tag: int, multiple: bool) -> None:
        raise Closed

    coalescer = AckCoalescer(closed, loop.call_soon, 10, (Closed,))
    coalescer.applied(1)
    loop.run()  # swallowed: the link is going down
    with pytest.raises(Closed):
        AckCoalescer(closed, loop.call_soon, 1, (Closed,)).applied(1)  # direct: raised
