"""Paging: a queue's ready messages past the memory budget go to page files and come back
in order (broker.core.paging with the real file shell, broker.store.page_file)."""

from __future__ import annotations

import errno
import tempfile
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.core.confirms import PublisherConfirms
from broker.core.message import Entry, Message
from broker.core.paging import ENTRY_OVERHEAD, PAGED, PagedMessages, PagingBudget, cost
from broker.core.queue import Queue
from broker.core.vhost import VirtualHost
from broker.store import page_file
from broker.store.page_file import PageFile, Pager
from tests.core.fakes import FakeClock, FakeConsumer

CHUNK = 2000


def entry(position: int, size: int = 100, expires_at: float | None = None) -> Entry:
    body = bytes([position % 251]) * size
    return Entry(Message("ex", f"key.{position}", b"\x00\x00", body), position, expires_at)


def same(a: Entry, b: Entry) -> bool:
    return (
        a.position == b.position
        and a.message.body == b.message.body
        and a.message.routing_key == b.message.routing_key
        and a.message.exchange == b.message.exchange
        and a.message.properties_raw == b.message.properties_raw
        and a.expires_at == b.expires_at
        and a.delivery_count == b.delivery_count
    )


def paged_list(directory: Path, limit: int, name: str = "1") -> PagedMessages:
    return PagedMessages(PagingBudget(limit), PageFile(directory, name), chunk_bytes=CHUNK)


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(0, 700)),
        st.tuples(st.just("extend"), st.integers(1, 6)),
        st.tuples(st.just("popleft"), st.just(0)),
        st.tuples(st.just("head"), st.just(0)),
        st.tuples(st.just("requeue"), st.integers(1, 4)),
        st.tuples(st.just("iterate"), st.just(0)),
        st.tuples(st.just("clear"), st.just(0)),
    ),
    max_size=150,
)


@settings(max_examples=60, deadline=None)
@given(ops=OPS, limit=st.integers(0, 6000))
def test_paged_messages_behave_as_a_deque(ops: list[tuple[str, int]], limit: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        paged = paged_list(Path(tmp), limit)
        model: deque[Entry] = deque()
        taken: list[Entry] = []
        position = 0
        for op, arg in ops:
            if op == "append":
                position += 1
                new = entry(position, arg)
                paged.append(new)
                model.append(new)
            elif op == "extend":  # in bulk when all of it fits, else one by one
                new_entries = [entry(position + k, 300) for k in range(1, arg + 1)]
                position += arg
                paged.extend(new_entries)
                model.extend(new_entries)
            elif op == "popleft" and model:
                got = paged.popleft()
                assert same(got, model.popleft())
                taken.append(got)
            elif op == "head" and model:
                assert same(paged[0], model[0])
            elif op == "requeue" and taken:
                back = sorted(taken[-arg:], key=lambda e: e.position)
                del taken[-arg:]
                if not model or back[-1].position < model[0].position:
                    paged.extendleft(reversed(back))
                    model.extendleft(reversed(back))
            elif op == "iterate":
                assert [e.position for e in paged] == [e.position for e in model]
            elif op == "clear":
                paged.clear()
                model.clear()
            assert len(paged) == len(model)
            assert bool(paged) == bool(model)
            in_memory = [e for e in deque.__iter__(paged) if e is not PAGED]
            assert paged.budget.used == sum(cost(e) for e in in_memory)
            assert paged.in_memory == len(in_memory)
            if limit and paged.paged:
                # Only what fit in the budget is in memory (requeued entries excepted).
                assert paged.in_memory <= len(model)
        while model:
            assert same(paged.popleft(), model.popleft())
        assert not paged and paged.budget.used == 0
        assert list(Path(tmp).iterdir()) == []  # an empty tail leaves no page file


def test_a_long_queue_keeps_only_the_budget_in_memory(tmp_path: Path) -> None:
    budget = 10 * (1000 + ENTRY_OVERHEAD)
    paged = paged_list(tmp_path, budget)
    for position in range(1, 1001):
        paged.append(entry(position, 1000))
    assert paged.in_memory == 10 and paged.paged == 990
    assert paged.budget.used == budget
    assert paged.chunks_written > 400  # written as it came, not held in memory
    assert [paged.popleft().position for _ in range(1000)] == list(range(1, 1001))
    assert paged.budget.used == 0 and paged.chunks_read == paged.chunks_written


def test_page_segments_are_deleted_as_they_are_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(page_file, "SEGMENT_BYTES", 10_000)
    paged = paged_list(tmp_path, 1)
    for position in range(1, 201):
        paged.append(entry(position, 500))
    files = len(list(tmp_path.iterdir()))
    assert files > 5
    for _ in range(100):
        paged.popleft()
    assert len(list(tmp_path.iterdir())) < files
    assert [e.position for e in paged] == list(range(101, 201))  # iteration reads, no take
    assert [paged.popleft().position for _ in range(100)] == list(range(101, 201))
    assert list(tmp_path.iterdir()) == []


def test_the_budget_is_shared_by_every_queue(tmp_path: Path) -> None:
    budget = PagingBudget(4 * (100 + ENTRY_OVERHEAD))
    first = PagedMessages(budget, PageFile(tmp_path, "a"), chunk_bytes=CHUNK)
    second = PagedMessages(budget, PageFile(tmp_path, "b"), chunk_bytes=CHUNK)
    for position in range(1, 4):
        first.append(entry(position))
    for position in range(1, 4):
        second.append(entry(position))
    assert (first.in_memory, second.in_memory) == (3, 1)
    assert (first.paged, second.paged) == (0, 2)


def test_a_message_with_a_pending_confirm_comes_back_as_the_same_object(tmp_path: Path) -> None:
    confirms = PublisherConfirms()
    paged = paged_list(tmp_path, 1)
    held = entry(1, 900)
    held.message.confirm = confirms.publish()
    held.message.confirm.hold()
    held.message.confirm.release()  # routing done; another holder (a guard) still holds
    paged.append(held)
    for position in range(2, 10):
        paged.append(entry(position, 900))
    assert paged.chunks_written >= 1
    back = paged.popleft()
    assert back.message is held.message and back is not held
    assert paged.popleft().message is not None


class FullDisk:
    """A page store on a full disk: every write fails with ENOSPC until ``space()``."""

    def __init__(self, directory: Path) -> None:
        self.file = PageFile(directory, "full")
        self.full = True

    def space(self) -> None:
        self.full = False

    def append(self, data: bytes) -> None:
        if self.full:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.file.append(data)

    def read(self, size: int) -> bytes:
        return self.file.read(size)

    def read_all(self, sizes: Iterable[int]) -> Iterator[bytes]:
        return self.file.read_all(sizes)

    def clear(self) -> None:
        self.file.clear()


def test_a_failed_page_write_keeps_the_messages_and_reports_it(tmp_path: Path) -> None:
    disk = FullDisk(tmp_path)
    failures: list[OSError] = []
    paged = PagedMessages(PagingBudget(1), disk, on_write_failed=failures.append, chunk_bytes=CHUNK)
    for position in range(1, 51):
        paged.append(entry(position, 300))
    assert failures and failures[0].errno == errno.ENOSPC
    assert len(failures) < 50  # retried a chunk later, not on every append
    disk.space()
    for position in range(51, 101):
        paged.append(entry(position, 300))
    assert paged.chunks_written >= 1
    assert [paged.popleft().position for _ in range(100)] == list(range(1, 101))


def test_a_paged_queue_delivers_in_order_and_expires_at_the_head(tmp_path: Path) -> None:
    clock = FakeClock()
    queue = Queue("q", clock=clock, arguments={"x-message-ttl": 10_000})
    queue.use_message_list(paged_list(tmp_path, 5 * (200 + ENTRY_OVERHEAD)))
    for n in range(100):
        queue.enqueue(Message("", "q", b"\x00\x00", f"{n:03d}".encode() * 50))
    clock.advance(5)
    for n in range(100, 150):
        queue.enqueue(Message("", "q", b"\x00\x00", f"{n:03d}".encode() * 50))
    assert queue.message_count == 150
    clock.advance(6)  # the first 100 expired
    assert queue.expire() == 100
    consumer = FakeConsumer(credit=10)
    queue.add_consumer(consumer)
    assert [b[:3] for b in consumer.bodies] == [f"{n:03d}".encode() for n in range(100, 110)]
    consumer.credit = None
    queue.credit_returned(consumer)
    queue.dispatch()
    assert [b[:3] for b in consumer.bodies] == [f"{n:03d}".encode() for n in range(100, 150)]
    assert queue.message_count == 0


def test_the_pager_pages_every_queue_of_the_host_and_cleans_up(tmp_path: Path) -> None:
    vhost = VirtualHost(clock=FakeClock())
    before = vhost.declare_queue("before", durable=False, exclusive=False, auto_delete=False)
    for _ in range(20):
        before.enqueue(Message("", "before", b"\x00\x00", b"x" * 1000))
    (tmp_path / "paging").mkdir()
    (tmp_path / "paging" / "stale.0.page").write_bytes(b"old")
    pager = Pager(vhost, tmp_path / "paging", PagingBudget(5 * (1000 + ENTRY_OVERHEAD))).start()
    assert not (tmp_path / "paging" / "stale.0.page").exists()
    assert before.message_count == 20 and pager.paged == 15
    after = vhost.declare_queue("after", durable=False, exclusive=False, auto_delete=False)
    for _ in range(20):
        after.enqueue(Message("", "after", b"\x00\x00", b"y" * 1000))
    assert pager.paged == 35
    vhost.delete_queue("after")
    assert pager.paged == 15
    pager.stop()
    assert list((tmp_path / "paging").iterdir()) == []


@settings(deadline=None)
@given(st.lists(st.integers(0, 900), max_size=30), st.integers(0, 10), st.integers(0, 6000))
def test_a_queue_moves_its_messages_to_a_paged_list_as_appends_would(
    sizes: list[int], taken: int, limit: int
) -> None:
    """use_message_list hands over the body sizes the queue counts (PagedMessages.adopt):
    the same budget and the same paging as one append per message, after a restore,
    deliveries and requeues."""
    with tempfile.TemporaryDirectory() as directory:
        queue = Queue("q", clock=FakeClock())
        restored = [entry(i + 1, size) for i, size in enumerate(sizes)]
        queue.restore(restored[: len(restored) // 2])
        for item in restored[len(restored) // 2 :]:
            queue.enqueue(item.message)
        consumer = FakeConsumer(credit=taken)
        queue.add_consumer(consumer)
        queue.remove_consumer(consumer)
        queue.requeue(consumer.unacked[::2])  # some back on the queue, the rest unacked
        ready = list(queue._messages)
        paged = paged_list(Path(directory), limit)
        queue.use_message_list(paged)
        reference = paged_list(Path(directory), limit, "reference")
        for item in ready:
            reference.append(item)
        assert paged.budget.used == reference.budget.used
        assert paged.paged == reference.paged
        assert [e.position for e in paged] == [e.position for e in ready]
