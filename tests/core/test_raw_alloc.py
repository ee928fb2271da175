"""Queued messages' objects come from the C allocator (broker/core/raw_alloc.py), so that the
memory of a deleted or drained queue goes back on malloc_trim instead of staying in Python's
object arenas (issue 32, item 3)."""

from __future__ import annotations

import gc
import sys

import pytest

from broker.core.message import Entry, Message
from broker.core.raw_alloc import NATIVE, RAW_CLASSES, raw_allocated

native = pytest.mark.skipif(not NATIVE, reason="broker/core/_raw_alloc.c not built")
COUNT = 20_000


@native
def test_a_queued_message_takes_no_block_of_pythons_allocator_but_its_position() -> None:
    body = b"b" * 1024
    gc.collect()
    before = sys.getallocatedblocks()
    held = [Entry(Message("amq.direct", "key", body=body), 1_000 + n, None) for n in range(COUNT)]
    blocks = sys.getallocatedblocks() - before
    # The position's int is the one block left (Python's allocator took three before).
    assert blocks < 1.2 * COUNT, blocks
    assert {Message, Entry} <= RAW_CLASSES
    assert held[-1].position == 1_000 + COUNT - 1
    assert held[-1].message.body is body
    del held
    gc.collect()
    assert sys.getallocatedblocks() - before < 100


@native
def test_a_cycle_through_raw_objects_is_collected() -> None:
    gc.collect()
    before = sys.getallocatedblocks()
    for n in range(1_000):
        entry = Entry(Message("", "raw-alloc-cycle"), n, None)
        entry.expires_at = entry  # type: ignore[assignment]  # a cycle only gc breaks
        del entry
    gc.collect()
    assert sys.getallocatedblocks() - before < 100
    assert not [
        o
        for o in gc.get_objects()
        if type(o) is Entry and o.message.routing_key == "raw-alloc-cycle"
    ]


@native
def test_a_subclass_and_an_unknown_layout_keep_pythons_allocator() -> None:
    class Subclass(Entry):
        __slots__ = ()

    assert Subclass.__name__ and Subclass not in RAW_CLASSES
    entry = Subclass(Message("", ""), 7, None)
    assert entry.position == 7 and repr(entry).startswith("Entry(#7")
    del entry

    class WithDict:  # a __dict__: a layout the allocator does not know
        pass

    assert raw_allocated(WithDict) is WithDict
    assert WithDict not in RAW_CLASSES
    assert WithDict() is not None
