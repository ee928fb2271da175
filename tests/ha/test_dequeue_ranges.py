"""A backup applying a DEQUEUE (``Queue.remove_positions`` with the event's IdSet) removes
what the same positions as a plain set remove: the head walked along the set's ranges
gives the same queue and count as a lookup of each head in the set, for any held
positions, any dequeued ids (at the head, past it, not held, with and without the expected
count) and a priority queue too (hypothesis). In process, no sockets."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.core.message import Message
from broker.core.queue import Queue
from broker.core.vhost import VirtualHost
from broker.ha.id_set import IdSet

NO_PROPERTIES = bytes(2)  # property flags: none
PRIORITY_5 = bytes.fromhex("0800") + b"\x05"  # property flags: priority only; 5


def _backup_queue(positions: list[int], priorities: list[bool], arguments: dict[str, int]) -> Queue:
    queue = VirtualHost().declare_queue("q", arguments=arguments)
    for i, position in enumerate(positions):
        raw = PRIORITY_5 if i < len(priorities) and priorities[i] else NO_PROPERTIES
        assert queue.enqueue(Message("", "q", raw, b"%d" % position), position)
    return queue


held = st.lists(st.integers(1, 60), max_size=40, unique=True).map(sorted)


@settings(deadline=None, max_examples=400)
@given(
    positions=held,
    priorities=st.lists(st.booleans(), max_size=40),
    dequeued=st.lists(st.lists(st.integers(1, 70), max_size=30), max_size=3),
    with_expected=st.booleans(),
    priority_queue=st.booleans(),
)
def test_ranges_remove_what_a_set_removes(
    positions: list[int],
    priorities: list[bool],
    dequeued: list[list[int]],
    with_expected: bool,
    priority_queue: bool,
) -> None:
    arguments = {"x-max-priority": 9} if priority_queue else {}
    by_ranges = _backup_queue(positions, priorities, arguments)
    by_set = _backup_queue(positions, priorities, arguments)
    for ids in dequeued:
        id_set = IdSet(ids)
        expected = len(id_set) if with_expected else None
        removed = by_ranges.remove_positions(id_set, expected)
        assert removed == by_set.remove_positions(set(ids), expected)
        assert [e.position for e in by_ranges.snapshot()] == [e.position for e in by_set.snapshot()]
        assert by_ranges.message_count == by_set.message_count
    if not with_expected:  # no count to stop at: every held position dequeued is gone
        gone = {i for ids in dequeued for i in ids}
        assert [e.position for e in by_ranges.snapshot()] == [p for p in positions if p not in gone]
