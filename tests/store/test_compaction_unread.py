"""Compaction without reading (issue 11, the P = 1 throughput): a segment whose live records
are configuration records the ledger holds is compacted from the ledger's copies, unread;
one that must be read waits a segment (``compaction_lag``, the broker's 1), by which time
the messages that were in flight when it was closed are settled.

The rule: what the ledger hands over for a segment is exactly the live records found there
by reading it (bytes and all); a store compacted this way recovers the same state as the
running broker's. In process, real files, the real Journal and MessageStore.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.core.message import Message
from broker.core.vhost import VirtualHost
from broker.store.compaction import leading_ids
from broker.store.journal import Journal, SyncPolicy
from broker.store.ledger import Ledger
from broker.store.message_store import MessageStore
from broker.store.records import Kind, QueueRecord, encode_queue, iter_records
from broker.store.segment_files import list_segments, segment_path
from tests.store.queue_ops import apply_queue_op, history_step
from tests.store.test_ledger import PERSISTENT

T = TypeVar("T")

#: Random histories: publishes (to one queue or fanned out), consumes, deliveries, purges,
#: queues deleted and declared again (new configuration records), exchanges declared.
operations = st.lists(
    st.one_of(history_step, st.tuples(st.just("exchange"), st.sampled_from(["x1", "x2"]))),
    max_size=80,
)


def apply(vhost: VirtualHost, ops: list[tuple[str, str]]) -> None:
    for i, (op, name) in enumerate(ops):
        if op == "publish":
            exchange = "fan" if name == "fan" else ""
            message = Message(exchange, name, PERSISTENT, b"%d." % i + b"x" * 60)
            vhost.publish(vhost.exchange(exchange), message)
            continue
        if op == "exchange":
            if name in vhost.exchanges:
                vhost.delete_exchange(name)
            else:
                vhost.declare_exchange(name, "direct", durable=True)
            continue
        apply_queue_op(vhost, op, name)


def declare(vhost: VirtualHost) -> None:
    vhost.declare_exchange("fan", "fanout", durable=True)
    for name in ("a", "b"):
        vhost.declare_queue(name, durable=True)
        vhost.bind(name, "fan", "")


def state_of(vhost: VirtualHost) -> tuple[list[str], dict[str, list[bytes]], list[str]]:
    exchanges = sorted(n for n, e in vhost.exchanges.items() if e.durable and not e.builtin)
    queues = {n: [e.message.body for e in q.snapshot()] for n, q in sorted(vhost.queues.items())}
    bound = sorted(
        f"{b.exchange}>{b.destination.name}" for b in vhost.exchange("fan").bindings.values()
    )
    return exchanges, queues, bound


async def written(journal: Journal) -> None:
    done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
    journal.after_durable(done.set_result, written=True)
    assert await done


def live_on_disk(journal: Journal, segment: int) -> list[bytes]:
    """The live records of ``segment`` as a pass reading it finds them (whole records)."""
    data = segment_path(journal.directory, segment).read_bytes()
    live = []
    for record in iter_records(data):
        assert isinstance(record, tuple)
        pos, size, kind, _payload = record
        if journal.ledger.is_live(segment, kind, leading_ids(data, pos, kind)):
            live.append(data[pos : pos + size])
    return live


@settings(max_examples=25, deadline=None)
@given(operations, operations)
def test_the_ledger_hands_over_exactly_the_live_records_of_a_segment(
    before: list[tuple[str, str]], after: list[tuple[str, str]]
) -> None:
    """For every closed segment of a random history the ledger either declines (something
    live there it does not hold) or gives the records a read would copy; compacted that way
    (and read where it declines), the store recovers what the broker had."""
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as patch:
        path = Path(tmp)

        async def scenario() -> tuple[object, object]:
            journal = Journal(path, sync=SyncPolicy.WRITE, segment_bytes=1024, compaction_lag=1)
            state = journal.recover()
            vhost = VirtualHost()
            MessageStore(journal, vhost).recover_into(state)
            patch.setattr(journal, "_maybe_compact", lambda: None)
            journal.start()
            declare(vhost)
            apply(vhost, before)
            await written(journal)
            for segment in list_segments(journal.directory)[:-1]:
                handed = journal.ledger.rewritable(segment)
                if handed is not None:
                    assert sorted(handed) == sorted(live_on_disk(journal, segment))
            patch.undo()  # compaction on, a segment late when it must read
            apply(vhost, after)
            await written(journal)
            while journal.compacting is not None:
                await asyncio.sleep(0)
            expected = state_of(vhost)
            assert await journal.close()
            return expected, None

        expected, _ = asyncio.run(scenario())
        journal = Journal(path)
        vhost = VirtualHost()
        MessageStore(journal, vhost).recover_into(journal.recover(), crashed=True)
        assert state_of(vhost) == expected


def test_a_steady_flow_compacts_every_segment_unread(tmp_path: Path) -> None:
    """Publish and consume far more than a segment, a window of messages in flight, as
    the broker does (lag 1): every segment goes, none is read, the queue, exchange and
    binding are copied from the ledger, and the store recovers them with the messages
    still queued. After a restart the ledger holds none of the recovered records: the
    segments recovered are read (once each at most), none written after the restart is."""

    async def flow(first: int) -> tuple[int, list[int]]:
        reads: list[int] = []
        journal = Journal(
            tmp_path, sync=SyncPolicy.WRITE, segment_bytes=32 * 1024, compaction_lag=1
        )
        real_compact = journal._compact

        async def counted(number: int) -> None:
            reads.append(number)
            await real_compact(number)

        journal._compact = counted  # type: ignore[method-assign]
        vhost = VirtualHost()
        MessageStore(journal, vhost).recover_into(journal.recover())
        journal.start()
        if first == 0:
            vhost.declare_exchange("x", "direct", durable=True)
            vhost.declare_queue("q", durable=True)
            vhost.bind("q", "x", "k")
        queue = vhost.queues["q"]
        for i in range(first, first + 3000):
            vhost.publish(
                vhost.exchange("x"), Message("x", "k", PERSISTENT, b"%d." % i + b"y" * 200)
            )
            if i >= 64:  # 64 in flight
                entry = queue.get()
                assert entry is not None
                queue.delivered(entry, no_ack=True)
            if i % 50 == 0:
                await written(journal)
        await written(journal)
        while journal.compacting is not None:
            await asyncio.sleep(0)
        # A compacted segment's file goes once a sync covers its copies (a hand-over to
        # the writer, then the deletion thread): poll for it.
        deadline = time.monotonic() + 10
        while len(list_segments(journal.directory)) > 3:
            assert time.monotonic() < deadline, list_segments(journal.directory)
            await asyncio.sleep(0.005)
        assert await journal.close()
        return journal.compacted_segments, reads

    compacted, reads = run(flow(0))
    assert compacted >= 15  # 3000 x ~250 B over 32 KiB segments
    assert reads == []
    recovered = list_segments(tmp_path / "store")
    compacted, reads = run(flow(3000))
    assert compacted >= 15
    assert reads and len(set(reads)) == len(reads) and set(reads) <= set(recovered)
    vhost = VirtualHost()
    journal = Journal(tmp_path)
    MessageStore(journal, vhost).recover_into(journal.recover())
    assert [e.message.body for e in vhost.queues["q"].entries()] == [
        b"%d." % i + b"y" * 200 for i in range(5936, 6000)
    ]
    assert "x" in vhost.exchanges and vhost.exchange("x").bindings


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def test_rewritable_only_when_every_live_record_is_a_held_configuration_record() -> None:
    ledger = Ledger()
    for segment in (1, 2):
        ledger.opened(segment)
        ledger.written(segment, 10)
    queue = encode_queue(QueueRecord(5, "q", False, {}))
    ledger.config_created(5, 1, queue)
    assert ledger.rewritable(1) == [queue]
    ledger.config_created(6, 1)  # recovered: its bytes are not held
    assert ledger.rewritable(1) is None
    ledger.config_deleted(6)
    ledger.message_written(100, 1)
    ledger.enqueued((5, 100), 1)
    assert ledger.rewritable(1) is None  # a live message: read the segment
    ledger.moved(Kind.MESSAGE, (100,), 1, 2)
    ledger.moved(Kind.ENQUEUE, (5, 100), 1, 2)
    assert ledger.rewritable(1) == [queue]
    ledger.moved(Kind.QUEUE, (5,), 1, 2)
    ledger.config_copied(5, queue)
    assert ledger.rewritable(1) is None  # nothing live left: deleted, not rewritten
    assert ledger.segments[1].live == 0
    ledger.config_deleted(5)
    ledger.config_copied(5, queue)  # a copy of a deleted record is not held
    assert ledger.rewritable(2) is None
