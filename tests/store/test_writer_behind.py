"""A crash while the group writer is behind the event loop (the journal creates a segment's
file when it hands the segment's first records over): recovery starts from the files as
they are, with everything confirmed.

The writer is held up through the Python one (broker/store/group_writer.py), whose batches
can be made to wait; the C one writes the same files in the same order.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from broker.core.confirms import PublisherConfirms
from broker.store import group_writer as group_writer_module
from broker.store.records import encode_message
from broker.store.segment_files import list_segments, segment_path
from tests.store.test_journal import bodies, open_store, publish, run


def test_a_crash_while_the_writer_is_behind_the_loop_loses_nothing_confirmed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loop creates a segment's file when it hands the segment's first records over,
    while the writer thread may still be writing older ones: a crash then leaves newer
    files that are empty behind the segment being written (whose tail may be torn).
    Recovery starts from that image, with everything confirmed before."""
    monkeypatch.setattr(group_writer_module, "_group_write", None)  # the Python writer
    live, crash = tmp_path / "live", tmp_path / "crash"
    image: dict[str, bytes] = {}
    hold = threading.Event()
    hold.set()
    run_batch = group_writer_module.ThreadGroupWriter._run_batch

    def held(self: Any, batch: Any) -> None:  # a write or sync that takes a while
        assert hold.wait(10)
        run_batch(self, batch)

    monkeypatch.setattr(group_writer_module.ThreadGroupWriter, "_run_batch", held)

    async def scenario() -> list[bytes]:
        journal, _store, vhost, _ = open_store(live, segment_bytes=4096)
        journal.start()
        vhost.declare_queue("q", durable=True)
        confirms = PublisherConfirms()
        confirmed = [b"c%d" % i + b"." * 100 for i in range(5)]
        for body in confirmed:
            publish(vhost, body, confirms)
        while confirms.outstanding:
            await asyncio.sleep(0.005)
        assert all(r.ack for r in confirms.take_replies())
        hold.clear()
        try:
            before = len(list_segments(journal.directory))
            for i in range(3):  # two segments later: their files are created, not written
                publish(vhost, b"u%d" % i + b"." * 3000, confirms)
                journal.hand_over()
            store = journal.directory
            for number in list_segments(store):  # the crash: the files as they are now
                path = segment_path(store, number)
                image[path.name] = path.read_bytes()
            assert len(image) >= before + 2
            assert not confirms.take_replies()
        finally:
            hold.set()
        while confirms.outstanding:
            await asyncio.sleep(0.005)
        assert await journal.close()
        return confirmed

    confirmed = run(scenario())
    names = sorted(image)
    assert [len(image[n]) for n in names[-2:]] == [0, 0]
    (crash / "store").mkdir(parents=True)
    for name in names:
        (crash / "store" / name).write_bytes(image[name])
    _journal, _store, vhost, _ = open_store(crash, segment_bytes=4096)
    assert bodies(vhost) == confirmed
    # Had it crashed in the middle of that write, the segment being written would end in
    # half a record: cut off, whatever newer (empty) files the loop had created.
    torn = tmp_path / "torn"
    (torn / "store").mkdir(parents=True)
    written = [n for n in names if image[n]][-1]
    half = encode_message(99, "", "q", b"", b"half written")[:-4]
    for name in names:
        (torn / "store" / name).write_bytes(image[name] + (half if name == written else b""))
    _journal, _store, vhost, events = open_store(torn, segment_bytes=4096)
    assert bodies(vhost) == confirmed
    assert events.named("store_torn_tail")
    assert (torn / "store" / written).read_bytes() == image[written]
