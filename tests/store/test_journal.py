"""The journal shell on real files: group commit, recovery, torn tails, compaction, full disks.

In process, with a real directory and the real MessageStore on a VirtualHost: no broker,
no sockets.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.core.confirms import PublisherConfirms
from broker.core.message import Message
from broker.core.vhost import VirtualHost
from broker.store import group_writer as group_writer_module
from broker.store.journal import HAND_OVER_BYTES, Journal, SyncPolicy
from broker.store.message_store import MessageStore
from broker.store.records import encode_message
from broker.store.recovery import CorruptStore
from broker.store.segment_files import list_segments
from tests.store.small_disk import small_disk

PERSISTENT = bytes.fromhex("1000") + b"\x02"  # property flags: delivery-mode only; mode 2


@pytest.fixture(autouse=True, params=["native", "python"])
def group_writer(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test here runs with the C group writer and with the Python one."""
    if request.param == "python":
        monkeypatch.setattr(group_writer_module, "_group_write", None)
    elif not group_writer_module.NATIVE:
        pytest.skip("broker/store/_group_write.c is not built (no C compiler)")
    return str(request.param)


class Events:
    """Collects the journal's log lines."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, dict[str, Any]]] = []

    def __getattr__(self, level: str) -> Any:
        return lambda event, **fields: self.lines.append((event, fields))

    def named(self, event: str) -> list[dict[str, Any]]:
        return [fields for name, fields in self.lines if name == event]


def open_store(
    path: Path, sync: SyncPolicy = SyncPolicy.FSYNC, segment_bytes: int = 1 << 20
) -> tuple[Journal, MessageStore, VirtualHost, Events]:
    events = Events()
    journal = Journal(path, sync=sync, segment_bytes=segment_bytes, log=events)
    state = journal.recover()
    vhost = VirtualHost()
    store = MessageStore(journal, vhost)
    store.recover_into(state)
    return journal, store, vhost, events


def publish(vhost: VirtualHost, body: bytes, confirms: PublisherConfirms | None = None) -> None:
    handle = confirms.publish() if confirms is not None else None
    message = Message("", "q", PERSISTENT, body, confirm=handle)
    vhost.publish(vhost.exchange(""), message)
    if handle is not None:
        handle.release()  # routing done


def bodies(vhost: VirtualHost, name: str = "q") -> list[bytes]:
    return [entry.message.body for entry in vhost.queues[name].entries()]


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_properties_constant_is_persistent() -> None:
    assert Message("", "q", PERSISTENT, b"").persistent


def test_confirms_wait_for_the_write_and_share_syncs(tmp_path: Path) -> None:
    async def scenario() -> tuple[int, list[int]]:
        journal, _store, vhost, _ = open_store(tmp_path)
        journal.start()
        vhost.declare_queue("q", durable=True)
        confirms = PublisherConfirms()
        for i in range(500):
            publish(vhost, b"m%d" % i, confirms)
        assert confirms.take_replies() == []  # nothing on disk yet: nothing confirmed
        while confirms.outstanding:
            await asyncio.sleep(0.005)
        replies = confirms.take_replies()
        assert await journal.close()
        return journal.syncs, [r.delivery_tag for r in replies if r.ack]

    syncs, acked = run(scenario())
    assert acked and max(acked) == 500
    assert syncs < 500 / 4  # group commit: many publishes per fsync
    _journal, _store, vhost, _ = open_store(tmp_path)
    assert bodies(vhost) == [b"m%d" % i for i in range(500)]


def test_a_read_hands_over_and_releases_confirms_without_waiting_for_the_loop(
    tmp_path: Path,
) -> None:
    """``hand_over`` (after each read, in a broker) gives the writer what was appended and
    runs the callbacks of writes done meanwhile, within the same turn of the event loop; a
    long read hands over after a publish once HAND_OVER_BYTES are waiting."""

    async def scenario() -> None:
        journal, _store, vhost, _ = open_store(tmp_path)
        journal.start()
        vhost.declare_queue("q", durable=True)
        await asyncio.sleep(0.05)  # the writer task's first turn: the segment's header
        confirms = PublisherConfirms()
        publish(vhost, b"small", confirms)
        journal.between_publishes()  # under HAND_OVER_BYTES: nothing yet
        journal.hand_over()  # the end of the read: to the writer now
        deadline = time.monotonic() + 10
        while confirms.outstanding:  # no await: the loop takes no turn meanwhile
            assert time.monotonic() < deadline, "not released without a turn of the loop"
            journal.hand_over()
        assert [r.ack for r in confirms.take_replies()] == [True]
        written = journal.bytes_written
        publish(vhost, b"L" * HAND_OVER_BYTES, confirms)
        journal.between_publishes()  # a long read: handed over at once
        while journal.bytes_written < written + HAND_OVER_BYTES:  # no hand_over, no await
            assert time.monotonic() < deadline, "between_publishes did not hand over"
        while confirms.outstanding:
            assert time.monotonic() < deadline, "not released without a turn of the loop"
            journal.hand_over()
        assert [r.ack for r in confirms.take_replies()] == [True]
        assert await journal.close()

    run(scenario())
    _journal, _store, vhost, _ = open_store(tmp_path)
    assert bodies(vhost) == [b"small", b"L" * HAND_OVER_BYTES]


def test_under_write_each_segment_is_synced_before_the_next_is_written(tmp_path: Path) -> None:
    """--store-sync write syncs no group, but a segment is synced once the writer moves on
    (a compacted segment's copies may be in it, and its deletion's sync covers only the
    file being written)."""

    async def scenario() -> tuple[int, int]:
        journal, _store, vhost, _ = open_store(tmp_path, SyncPolicy.WRITE, segment_bytes=4096)
        journal.start()
        vhost.declare_queue("q", durable=True)
        await asyncio.sleep(0)
        for i in range(100):
            publish(vhost, b"%03d" % i + b"." * 200)
            journal.hand_over()
        # Every record written (not only most of its bytes): a segment's sync is the writer's
        # job before the next segment's first write, so counting earlier raced the writer.
        written = asyncio.Event()
        journal.after_durable(lambda _ok: written.set(), written=True)
        await asyncio.wait_for(written.wait(), 10)
        syncs_before_close = journal.syncs
        segments = len(list_segments(tmp_path / "store"))
        assert await journal.close()
        return syncs_before_close, segments

    syncs, segments = run(scenario())
    assert segments >= 5
    assert syncs >= segments - 1


def test_transient_messages_and_queues_never_wait_nor_survive(tmp_path: Path) -> None:
    async def scenario() -> None:
        journal, _store, vhost, _ = open_store(tmp_path)
        journal.start()
        vhost.declare_queue("q", durable=True)
        vhost.declare_queue("t")
        confirms = PublisherConfirms()
        handle = confirms.publish()
        vhost.publish(vhost.exchange(""), Message("", "q", b"\x00\x00", b"tr", confirm=handle))
        handle.release()
        assert [r.delivery_tag for r in confirms.take_replies()] == [1]  # at once
        publish(vhost, b"p")
        vhost.publish(vhost.exchange(""), Message("", "t", PERSISTENT, b"on transient q"))
        assert await journal.close()

    run(scenario())
    _journal, _store, vhost, _ = open_store(tmp_path)
    assert set(vhost.queues) == {"q"}
    assert bodies(vhost) == [b"p"]


def test_acked_and_purged_messages_stay_gone_delivered_ones_come_back_redelivered(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        journal, _store, vhost, _ = open_store(tmp_path)
        journal.start()
        queue = vhost.declare_queue("q", durable=True)
        for i in range(5):
            publish(vhost, b"%d" % i)
        first = queue.get()
        assert first is not None
        queue.delivered(first, no_ack=False)
        queue.settle(first)  # 0 acked
        second = queue.get()
        assert second is not None
        queue.delivered(second, no_ack=False)  # 1 delivered, never acked
        vhost.declare_queue("other", durable=True)
        vhost.publish(vhost.exchange(""), Message("", "other", PERSISTENT, b"x"))
        vhost.purge_queue("other")
        _store.mark_delivered()  # as a clean stop does
        assert await journal.close()

    run(scenario())
    _journal, _store, vhost, _ = open_store(tmp_path)
    entries = vhost.queues["q"].entries()
    assert [(e.message.body, e.redelivered) for e in entries] == [
        (b"1", True),
        (b"2", False),
        (b"3", False),
        (b"4", False),
    ]
    assert bodies(vhost, "other") == []


def test_a_message_on_two_queues_is_stored_once_and_recovered_as_one(tmp_path: Path) -> None:
    async def scenario() -> None:
        journal, _store, vhost, _ = open_store(tmp_path)
        journal.start()
        vhost.declare_exchange("fan", "fanout", durable=True)
        for name in ("a", "b"):
            vhost.declare_queue(name, durable=True)
            vhost.bind(name, "fan", "")
        vhost.publish(vhost.exchange("fan"), Message("fan", "", PERSISTENT, b"B" * 10_000))
        assert await journal.close()

    run(scenario())
    size = sum(p.stat().st_size for p in (tmp_path / "store").iterdir())
    assert size < 15_000
    _journal, _store, vhost, _ = open_store(tmp_path)
    a, b = vhost.queues["a"].entries(), vhost.queues["b"].entries()
    assert a[0].message is b[0].message
    assert {(b.exchange, b.queue.name) for b in vhost.bindings()} >= {("fan", "a"), ("fan", "b")}


def test_a_torn_tail_is_cut_and_logged(tmp_path: Path) -> None:
    async def scenario() -> None:
        journal, _store, vhost, _ = open_store(tmp_path)
        journal.start()
        vhost.declare_queue("q", durable=True)
        for i in range(10):
            publish(vhost, b"%d" % i)
        assert await journal.close()

    run(scenario())
    (last,) = list_segments(tmp_path / "store")[-1:]
    path = tmp_path / "store" / f"{last:020d}.seg"
    with open(path, "ab") as file:
        file.write(encode_message(99, "", "q", b"", b"half written")[:-4])
    _journal, _store, vhost, events = open_store(tmp_path)
    assert bodies(vhost) == [b"%d" % i for i in range(10)]
    (torn,) = events.named("store_torn_tail")
    assert torn["segment"] == str(path) and torn["cut_bytes"] > 0
    assert path.stat().st_size == torn["offset"]


def test_corruption_before_the_tail_refuses_to_start(tmp_path: Path) -> None:
    async def scenario() -> None:
        journal, _store, vhost, _ = open_store(tmp_path, segment_bytes=4096)
        journal.start()
        vhost.declare_queue("q", durable=True)
        for i in range(100):
            publish(vhost, b"%03d" % i + b"." * 200)
        assert await journal.close()

    run(scenario())
    segments = list_segments(tmp_path / "store")
    assert len(segments) > 3
    path = tmp_path / "store" / f"{segments[1]:020d}.seg"
    data = bytearray(path.read_bytes())
    data[100] ^= 0x55
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptStore, match=f"{segments[1]:020d}"):
        open_store(tmp_path, segment_bytes=4096)


def test_compaction_keeps_the_store_small_and_the_state_whole(tmp_path: Path) -> None:
    async def scenario() -> Journal:
        journal, _store, vhost, _ = open_store(tmp_path, segment_bytes=8192)
        journal.start()
        vhost.declare_exchange("x", "direct", durable=True)
        queue = vhost.declare_queue("q", durable=True)
        vhost.bind("q", "x", "k")
        publish(vhost, b"the old one")  # stays: copied forward by compaction
        for i in range(3000):
            publish(vhost, b"%d" % i + b"." * 100)
            queue.remove_positions({queue.last_position})  # consumed at once
            if i % 50 == 0:
                await asyncio.sleep(0.001)  # let the writer and compaction run
        # compaction goes on in the background, one segment per write: wait for it
        deadline = time.monotonic() + 30
        # (the ledger's segments, not the files: the writer may still have bytes to write)
        while len(journal.ledger.segments) > 4 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert await journal.close()
        return journal

    journal = run(scenario())
    assert journal.compacted_segments > 10
    assert len(list_segments(tmp_path / "store")) <= 4
    _journal, _store, vhost, _ = open_store(tmp_path, segment_bytes=8192)
    assert bodies(vhost) == [b"the old one"]
    assert [b.routing_key for b in vhost.bindings() if b.exchange == "x"] == ["k"]


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs mounted for this test."""
    with small_disk(tmp_path, "2m") as mount:
        yield mount


def test_a_full_disk_nacks_and_loses_nothing_confirmed(tiny_disk: Path) -> None:
    filler = tiny_disk / "filler"

    async def scenario() -> tuple[list[int], list[int]]:
        journal, _store, vhost, events = open_store(tiny_disk)
        journal.start()
        vhost.declare_queue("q", durable=True)
        confirms = PublisherConfirms()
        for i in range(5):
            publish(vhost, b"before %d" % i, confirms)
        while confirms.outstanding:
            await asyncio.sleep(0.005)
        before = [r.delivery_tag for r in confirms.take_replies() if r.ack]
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT)  # fill the disk
        try:
            while True:
                os.write(fd, b"\0" * 65536)
        except OSError:
            pass
        finally:
            os.close(fd)
        publish(vhost, b"X" * 200_000, confirms)
        # As a broker does after each publish: past HAND_OVER_BYTES this hands the record
        # and its confirm's callback over at once, together (a failed write nacks it).
        journal.between_publishes()
        while confirms.outstanding:
            await asyncio.sleep(0.005)
        nacked = [r.delivery_tag for r in confirms.take_replies() if not r.ack]
        assert events.named("store_write_failed")
        filler.unlink()  # space is back: the next write works
        publish(vhost, b"after", confirms)
        while confirms.outstanding:
            await asyncio.sleep(0.005)
        assert [r.ack for r in confirms.take_replies()] == [True]
        assert await journal.close()
        return before, nacked

    before, nacked = run(scenario())
    assert max(before) == 5  # all five acked (in one multiple ack or more)
    assert nacked == [6]
    _journal, _store, vhost, _ = open_store(tiny_disk)
    assert bodies(vhost) == [b"before %d" % i for i in range(5)] + [b"after"]


def test_cut_damaged_keeps_what_precedes_and_moves_the_rest_aside(tmp_path: Path) -> None:
    async def scenario() -> None:
        journal, _store, vhost, _ = open_store(tmp_path, segment_bytes=4096)
        journal.start()
        vhost.declare_queue("q", durable=True)
        for i in range(100):
            publish(vhost, b"%03d" % i + b"." * 200)
        assert await journal.close()

    run(scenario())
    store = tmp_path / "store"
    segments = list_segments(store)
    damaged = segments[2]
    path = store / f"{damaged:020d}.seg"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x55
    path.write_bytes(bytes(data))
    events = Events()
    journal = Journal(tmp_path, segment_bytes=4096, log=events)
    state = journal.recover(cut_damaged=True)
    vhost = VirtualHost()
    MessageStore(journal, vhost).recover_into(state)
    kept = bodies(vhost)
    assert kept and all(b.endswith(b".") for b in kept)
    assert kept == [b"%03d" % i + b"." * 200 for i in range(len(kept))]  # a prefix, in order
    assert len(kept) < 100
    (cut,) = events.named("store_cut_at_damage")
    aside = tmp_path / "store.damaged.0001"
    assert cut["moved_to"] == str(aside) and cut["segment"] == damaged
    assert sorted(p.name for p in aside.iterdir()) == [
        f"{n:020d}.seg" for n in segments if n >= damaged
    ]
    assert list_segments(store) == [n for n in segments if n <= damaged]
    assert journal.current == damaged + 1  # new writes go after what was kept


def test_exchange_to_exchange_bindings_survive_and_go_with_their_exchange(tmp_path: Path) -> None:
    async def scenario() -> None:
        journal, _store, vhost, _ = open_store(tmp_path)
        journal.start()
        for name in ("src", "dst", "gone"):
            vhost.declare_exchange(name, "topic", durable=True)
        vhost.declare_exchange("transient", "topic")
        vhost.declare_queue("q", durable=True)
        vhost.bind("q", "dst", "#")
        vhost.bind_exchange("dst", "src", "a.*")
        vhost.bind_exchange("dst", "amq.topic", "b.*")
        vhost.bind_exchange("gone", "src", "c.*")
        vhost.bind_exchange("transient", "src", "d.*")
        vhost.delete_exchange("gone")
        assert await journal.close()

    run(scenario())
    _journal, _store, vhost, _ = open_store(tmp_path)
    links = {
        (b.exchange, b.destination.name, b.routing_key) for b in vhost.bindings() if b.to_exchange
    }
    assert links == {("src", "dst", "a.*"), ("amq.topic", "dst", "b.*")}
    vhost.publish(vhost.exchange("src"), Message("src", "a.x", PERSISTENT, b"routed"))
    assert bodies(vhost) == [b"routed"]


def test_after_a_crash_every_recovered_message_is_marked_redelivered(tmp_path: Path) -> None:
    """A delivery goes out before its DELIVERED record is on disk: after a crash nobody
    knows which were delivered, so all are marked (after a clean stop, exactly those)."""

    async def scenario() -> None:
        journal, _store, vhost, _ = open_store(tmp_path)
        journal.start()
        vhost.declare_queue("q", durable=True)
        publish(vhost, b"never delivered")
        assert await journal.close()

    run(scenario())
    journal = Journal(tmp_path)
    state = journal.recover()
    vhost = VirtualHost()
    MessageStore(journal, vhost).recover_into(state, crashed=True)
    assert [e.redelivered for e in vhost.queues["q"].entries()] == [True]
    _journal, _store, clean, _ = open_store(tmp_path)
    assert [e.redelivered for e in clean.queues["q"].entries()] == [False]
