"""A paged priority queue (``x-max-priority`` under a memory budget: one
:class:`~broker.core.paging.PagedMessages` per priority) delivers exactly as the same queue
in memory does: any interleaving of publishes at random priorities, gets, acks, requeues,
rejects, expiries, replicated removals and purges, under a budget of a few messages (pages in
memory: the core is sans-I/O; the file shell is tested in tests/store/)."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.core.message import Entry
from broker.core.paging import PagedMessages, PagingBudget
from broker.core.priority import PriorityMessages
from broker.core.queue import Queue
from tests.core.fakes import FakeClock, FakeConsumer, message
from tests.core.queue_support import DeadLetters

MAX_PRIORITY = 5
CHUNK = 600  # a chunk is a few messages


class MemoryPages:
    """A PageStore in memory: chunks in order, read back in the same order."""

    def __init__(self) -> None:
        self.chunks: deque[bytes] = deque()
        self.written = 0

    def append(self, data: bytes) -> None:
        self.chunks.append(data)
        self.written += 1

    def read(self, size: int) -> bytes:
        data = self.chunks.popleft()
        assert len(data) == size
        return data

    def read_all(self, sizes: Iterable[int]) -> Iterator[bytes]:
        for size, data in zip(sizes, list(self.chunks), strict=True):
            assert len(data) == size
            yield data

    def clear(self) -> None:
        self.chunks.clear()


class PagedLevels:
    """The pager's part, in memory: one PagedMessages and page store per priority."""

    def __init__(self, budget: PagingBudget) -> None:
        self.budget = budget
        self.stores: dict[int, MemoryPages] = {}
        self.lists: dict[int, PagedMessages] = {}

    def __call__(self, priority: int) -> PagedMessages:
        store = self.stores[priority] = MemoryPages()
        level = self.lists[priority] = PagedMessages(self.budget, store, chunk_bytes=CHUNK)
        return level

    @property
    def chunks_written(self) -> int:
        return sum(store.written for store in self.stores.values())


def make_queue(dead: DeadLetters) -> Queue:
    return Queue(
        "pq",
        clock=FakeClock(),
        arguments={"x-max-priority": MAX_PRIORITY, "x-dead-letter-exchange": "dlx"},
        dead_letter=dead,
    )


def paged_queue(dead: DeadLetters, limit: int) -> tuple[Queue, PagedLevels]:
    queue = make_queue(dead)
    levels = PagedLevels(PagingBudget(limit))
    queue.use_message_list(PriorityMessages(MAX_PRIORITY, levels))
    return queue, levels


def view(entries: Iterable[Entry]) -> list[tuple[int, bytes, int]]:
    return [(e.position, e.message.body, e.delivery_count) for e in entries]


def publish(queue: Queue, n: int, priority: int | None, size: int, ttl: int | None) -> None:
    props: dict[str, Any] = {}
    if priority is not None:
        props["priority"] = priority
    if ttl is not None:
        props["expiration"] = str(ttl)
    body = f"{n}:".encode() + bytes([n % 251]) * size
    assert queue.enqueue(message(body, "pq", **props))


PUBLISH = st.tuples(
    st.just("publish"),
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.integers(0, MAX_PRIORITY + 2)),
            st.integers(0, 300),
            st.one_of(st.none(), st.none(), st.none(), st.integers(1, 5000)),
        ),
        min_size=1,
        max_size=8,
    ),
)
OPS = st.lists(
    st.one_of(
        PUBLISH,
        st.tuples(st.just("get")),
        st.tuples(st.just("get")),
        st.tuples(st.just("ack"), st.integers(0, 50)),
        st.tuples(st.just("requeue"), st.lists(st.integers(0, 50), max_size=6)),
        st.tuples(st.just("reject"), st.integers(0, 50), st.booleans()),
        st.tuples(st.just("expire"), st.integers(0, 3000)),
        st.tuples(st.just("remove"), st.integers(0, 100)),
        st.tuples(st.just("consume"), st.integers(1, 6)),
        st.tuples(st.just("purge")),
        st.tuples(st.just("replicate"), st.integers(0, MAX_PRIORITY), st.booleans()),
    ),
    min_size=20,
    max_size=150,
)


@settings(max_examples=150, deadline=None)
@given(ops=OPS, limit=st.integers(1, 2500))
def test_a_paged_priority_queue_delivers_as_one_in_memory(
    ops: list[tuple[Any, ...]], limit: int
) -> None:
    dead_ref, dead_paged = DeadLetters(), DeadLetters()
    reference = make_queue(dead_ref)
    paged, levels = paged_queue(dead_paged, limit)
    queues = (reference, paged)
    unacked: tuple[list[Entry], list[Entry]] = ([], [])
    published = 0
    gaps: list[int] = []
    for op in ops:
        kind = op[0]
        if kind == "publish":
            for priority, size, ttl in op[1]:
                published += 1
                for queue in queues:
                    publish(queue, published, priority, size, ttl)
        elif kind == "get":
            first, second = reference.get(), paged.get()
            assert (first is None) == (second is None)
            if first is not None and second is not None:
                assert first.redelivered == second.redelivered
                assert view([first]) == view([second])
                for queue, entry, held in zip(queues, (first, second), unacked, strict=True):
                    queue.delivered(entry, False)
                    held.append(entry)
        elif kind == "ack" and unacked[0]:
            index = op[1] % len(unacked[0])
            for queue, held in zip(queues, unacked, strict=True):
                queue.settle(held.pop(index))
        elif kind == "requeue" and unacked[0]:
            picked = sorted({i % len(unacked[0]) for i in op[1]}, reverse=True)
            for queue, held in zip(queues, unacked, strict=True):
                queue.requeue([held.pop(i) for i in picked])
        elif kind == "reject" and unacked[0]:
            index = op[1] % len(unacked[0])
            for queue, held in zip(queues, unacked, strict=True):
                queue.reject(held.pop(index), op[2])
        elif kind == "expire":
            for queue in queues:
                queue._clock.advance(op[1] / 1000)  # type: ignore[attr-defined]
                queue.expire()
        elif kind == "remove" and reference.message_count:
            ready = reference.entries()
            positions = {ready[op[1] % len(ready)].position, ready[-1].position}
            assert reference.remove_positions(positions) == paged.remove_positions(positions)
        elif kind == "consume":
            consumers = [FakeConsumer(credit=op[1]) for _ in queues]
            for queue, consumer in zip(queues, consumers, strict=True):
                queue.add_consumer(consumer)
                queue.remove_consumer(consumer)
            ref_got, paged_got = (c.deliveries for c in consumers)
            assert [r for _, r in ref_got] == [r for _, r in paged_got]
            assert view(e for e, _ in ref_got) == view(e for e, _ in paged_got)
            for consumer, held in zip(consumers, unacked, strict=True):
                held.extend(consumer.unacked)
        elif kind == "replicate":
            # A backup's enqueue at the primary's id: past a gap, or filling the oldest gap
            # (Queue._insert_replicated: in id order among the ready messages).
            if op[2] or not gaps:
                position = reference.last_position + 2
                gaps.append(position - 1)
            else:
                position = gaps.pop(0)
            published += 1
            for queue in queues:
                props = {"priority": op[1]}
                body = f"{published}:".encode() + bytes(50)
                assert queue.enqueue(message(body, "pq", **props), position)
        elif kind == "purge":
            assert reference.purge() == paged.purge()
        assert view(reference.entries()) == view(paged.entries())
        assert reference.message_count == paged.message_count
        assert reference.bytes == paged.bytes
        assert dead_ref.calls == dead_paged.calls
    # Drain both: the same messages in the same order, then nothing in memory or on disk.
    while (head := reference.get()) is not None:
        other = paged.get()
        assert other is not None
        assert view([head]) == view([other])
        assert head.redelivered == other.redelivered
    assert paged.get() is None
    assert levels.budget.used == 0
    assert all(not store.chunks for store in levels.stores.values())
    assert all(level.paged == 0 for level in levels.lists.values())


def test_a_long_priority_queue_keeps_only_the_budget_in_memory() -> None:
    dead = DeadLetters()
    queue, levels = paged_queue(dead, 10_000)
    reference = make_queue(DeadLetters())
    priorities = [(n * 7919) % (MAX_PRIORITY + 1) for n in range(2000)]
    for n, priority in enumerate(priorities):
        publish(queue, n, priority, 200, None)
        publish(reference, n, priority, 200, None)
        assert levels.budget.used <= 10_000
    messages = queue._messages
    assert isinstance(messages, PriorityMessages)
    assert messages.paged > 1900  # the rest is on "disk", in every priority
    assert all(level.paged for level in levels.lists.values())
    assert levels.chunks_written > 100
    # Highest priority first, in order of arrival within a priority.
    expected = sorted(range(2000), key=lambda n: (-priorities[n], n))
    got = []
    while (entry := queue.get()) is not None:
        queue.delivered(entry, True)
        got.append(int(entry.message.body.split(b":")[0]))
        assert levels.budget.used <= 10_000 + CHUNK * 2
    assert got == expected
    assert levels.budget.used == 0


def test_requeued_messages_go_back_in_place_in_a_paged_priority() -> None:
    queue, levels = paged_queue(DeadLetters(), 1)  # everything pages
    for n in range(1, 40):
        publish(queue, n, 2, 100, None)
    first, second = queue.get(), queue.get()
    assert first is not None and second is not None
    for entry in (first, second):
        queue.delivered(entry, False)
    queue.requeue([first])
    queue.requeue([second])
    assert [e.position for e in queue.entries()] == list(range(1, 40))
    assert [queue.get().position for _ in range(3)] == [1, 2, 3]  # type: ignore[union-attr]
    assert levels.lists[2].chunks_read >= 1


def test_an_entry_put_back_after_those_in_memory_reads_the_oldest_chunk_first() -> None:
    """Memory holds [1], the pages 5..10: 3 goes between them, after 5's chunk is read back
    (and counted in the budget)."""
    budget = PagingBudget(1)
    level = PagedMessages(budget, MemoryPages(), chunk_bytes=CHUNK)

    def entry(position: int) -> Entry:
        return Entry(message(bytes(100)), position, None)

    for position in range(5, 11):
        level.append(entry(position))
    level.extendleft([entry(1)])
    assert level.paged == 6 and level.in_memory == 1
    level.insert_in_order(entry(3))
    assert level.chunks_read == 1 and level.paged < 6
    assert [e.position for e in level] == [1, 3, 5, 6, 7, 8, 9, 10]
    assert budget.used == (level.in_memory) * (100 + 400)
    level.insert_in_order(entry(12))  # after everything: every chunk is read back
    assert level.paged == 0
    assert [level.popleft().position for _ in range(len(level))] == [1, 3, 5, 6, 7, 8, 9, 10, 12]
    assert budget.used == 0


def test_a_backup_removes_delivered_messages_from_below_a_newer_higher_priority() -> None:
    """The primary delivered 1-3 (priority 0) before 41 (priority 5) arrived: the backup's
    dequeue of 1-3 takes them from the head of priority 0, without reading and rewriting
    the pages of the whole queue."""
    queue, levels = paged_queue(DeadLetters(), 1)
    for n in range(1, 41):
        publish(queue, n, 0, 100, None)
    publish(queue, 41, 5, 100, None)
    written = levels.chunks_written
    assert queue.remove_positions({1, 2, 3}, 3) == 3
    assert levels.chunks_written == written
    assert [e.position for e in queue.entries()] == [41, *range(4, 41)]
    assert queue.message_count == 38
    assert queue.remove_positions({41, 4, 20}, 3) == 3  # 20 is no head: the whole queue
    assert [e.position for e in queue.entries()] == [*range(5, 20), *range(21, 41)]
