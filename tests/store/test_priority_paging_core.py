"""A priority queue pages through the real file shell: the pager gives each priority of an
``x-max-priority`` queue its own page file (broker.store.page_file), delivery comes back
highest priority first and in order of arrival, and the files go with the queue."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from broker.core.paging import ENTRY_OVERHEAD, PagingBudget
from broker.core.priority import PriorityMessages
from broker.core.vhost import VirtualHost
from broker.store.page_file import Pager
from tests.core.fakes import FakeClock, FakeConsumer, message

BODY = 1000
PRIORITIES = [0, 3, 9, 3, 0, 5, 9, 1]


def publish(queue: Any, n: int, priority: int) -> None:
    assert queue.enqueue(message(f"{n:04d}".encode() + bytes(BODY - 4), "pq", priority=priority))


def number(entry: Any) -> int:
    return int(entry.message.body[:4])


def test_each_priority_pages_to_its_own_file_and_comes_back_in_order(tmp_path: Path) -> None:
    vhost = VirtualHost(clock=FakeClock())
    args = {"x-max-priority": 9}
    before = vhost.declare_queue(
        "pq", durable=False, exclusive=False, auto_delete=False, arguments=args
    )
    for n in range(40):  # in memory before the pager is attached: converted in order
        publish(before, n, PRIORITIES[n % len(PRIORITIES)])
    budget = PagingBudget(10 * (BODY + ENTRY_OVERHEAD))
    pager = Pager(vhost, tmp_path / "paging", budget).start()
    queue = vhost.queues["pq"]
    messages = pager.lists[("/", "pq")]
    assert isinstance(messages, PriorityMessages)
    for n in range(40, 2000):
        publish(queue, n, PRIORITIES[n % len(PRIORITIES)])
    assert budget.used <= 10 * (BODY + ENTRY_OVERHEAD)
    assert messages.paged > 1900 and pager.paged == messages.paged
    files = {p.name.split(".")[1] for p in (tmp_path / "paging").glob("*.page")}
    assert files == {"p0", "p1", "p3", "p5", "p9"}  # one page file per priority held
    expected = sorted(range(2000), key=lambda n: (-PRIORITIES[n % len(PRIORITIES)], n))

    # A consumer takes a few and gives them back: they return to their places.
    consumer = FakeConsumer(credit=7)
    queue.add_consumer(consumer)
    queue.remove_consumer(consumer)
    assert [number(e) for e, _ in consumer.deliveries] == expected[:7]
    queue.requeue(consumer.unacked[1::2])
    queue.settle(consumer.unacked[0])
    got = []
    redelivered = []
    while (entry := queue.get()) is not None:
        redelivered.append(entry.redelivered)
        queue.delivered(entry, True)
        got.append(number(entry))
        assert budget.used <= 12 * (BODY + ENTRY_OVERHEAD) + 2 * 64 * 1024
    assert got == [expected[1], expected[3], expected[5], *expected[7:]]
    assert redelivered[:3] == [True, True, True] and not any(redelivered[3:])
    assert budget.used == 0
    assert list((tmp_path / "paging").glob("*.page")) == []  # read segments are deleted
    pager.stop()


def test_deleting_or_purging_a_paged_priority_queue_drops_its_pages(tmp_path: Path) -> None:
    vhost = VirtualHost(clock=FakeClock())
    budget = PagingBudget(5 * (BODY + ENTRY_OVERHEAD))
    pager = Pager(vhost, tmp_path / "paging", budget).start()
    args = {"x-max-priority": 4}
    queue = vhost.declare_queue(
        "pq", durable=False, exclusive=False, auto_delete=False, arguments=args
    )
    other = vhost.declare_queue("plain", durable=False, exclusive=False, auto_delete=False)
    for n in range(300):
        publish(queue, n, n % 5)
        assert other.enqueue(message(bytes(BODY)))
    assert list((tmp_path / "paging").glob("*.p4.*.page"))
    assert queue.purge() == 300
    assert not list((tmp_path / "paging").glob("*.p*.page"))
    for n in range(300):
        publish(queue, n, n % 5)
    vhost.delete_queue("pq")
    assert ("/", "pq") not in pager.lists
    assert not list((tmp_path / "paging").glob("*.p*.page"))
    assert pager.paged == pager.lists[("/", "plain")].paged > 0
    pager.stop()
    assert list((tmp_path / "paging").iterdir()) == []
