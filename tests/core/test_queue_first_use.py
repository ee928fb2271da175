"""A queue's first use (``Queue.before_use``): called once, before the queue's next enqueue,
delivery or purge, and before anything of that use happens (an HA primary's guards of a
queue are made then: broker.ha.primary)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from broker.core.message import Entry, Message
from broker.core.queue import Queue
from tests.core.fakes import FakeClock, FakeConsumer


def _queue() -> tuple[Queue, list[tuple[int, int, int]]]:
    """A queue with one message and a hook that records (last id, ready, delivered) when
    it is called."""
    queue = Queue("q", clock=FakeClock())
    queue.enqueue(Message("", "q", body=b"a"))
    calls: list[tuple[int, int, int]] = []
    queue.before_use = lambda q: calls.append((q.last_position, q.message_count, q.delivered_total))
    return queue, calls


USES: dict[str, Callable[[Queue], object]] = {
    "enqueue": lambda q: q.enqueue(Message("", "q", body=b"b")),
    "consumer": lambda q: q.add_consumer(FakeConsumer()),
    "dispatch": lambda q: q.dispatch(),
    "get": lambda q: q.get(),
    "purge": lambda q: q.purge(),
    "restore": lambda q: q.restore([Entry(Message("", "q", body=b"r"), 9, None)]),
}


@pytest.mark.parametrize("use", sorted(USES))
def test_the_hook_runs_once_before_the_first_use(use: str) -> None:
    queue, calls = _queue()
    USES[use](queue)
    assert calls == [(1, 1, 0)]  # as the queue was: nothing enqueued, delivered or removed
    assert queue.before_use is None
    for again in USES.values():
        again(queue)
    assert len(calls) == 1


def test_no_hook_no_call_and_what_is_not_a_use() -> None:
    queue = Queue("q", clock=FakeClock())
    assert queue.before_use is None
    queue.first_use()  # nothing to call
    queue, calls = _queue()
    queue.touch()
    queue.expire()
    assert queue.message_count == 1 and queue.entries()
    assert calls == []
