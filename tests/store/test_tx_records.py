"""A transaction is stored all or none (issue 11): its records inside one TX record, whose
one checksum covers them. Sans-I/O (records and recovery), then the journal on real files
(written, recovered, compacted)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.store.journal import Journal, SyncPolicy
from broker.store.records import (
    RECORD_HEADER,
    FormatError,
    Kind,
    QueueRecord,
    encode_enqueue,
    encode_message,
    encode_queue,
    encode_queue_entry,
    encode_tx,
    iter_tx,
    segment_header,
)
from broker.store.recovery import Recovery
from broker.store.segment_files import list_segments, segment_path
from tests.store.test_journal import bodies, open_store, publish, run


def segment(number: int, *records: bytes) -> bytes:
    return segment_header(number, 1) + b"".join(records)


def transaction(first: int, n: int) -> bytes:
    """A TX record of ``n`` messages on queue 1 (ids ``first``...) and one dequeue."""
    inner = b"".join(
        encode_message(first + i, "", "q", b"", b"m%d" % i) + encode_enqueue(1, first + i, i, 0)
        for i in range(n)
    )
    return encode_tx(inner + encode_queue_entry(Kind.DEQUEUE, 1, 2))


def test_inner_records_round_trip_and_bad_ones_are_format_errors() -> None:
    inner = encode_message(5, "", "q", b"", b"x") + encode_enqueue(1, 5, 1, 0)
    kinds = [kind for kind, _ in iter_tx(inner)]
    assert kinds == [Kind.MESSAGE, Kind.ENQUEUE]
    with pytest.raises(FormatError, match="into a transaction"):
        list(iter_tx(inner[:-1]))
    with pytest.raises(FormatError, match="inside a transaction"):
        list(iter_tx(encode_tx(inner)))


def recovered_ids(data: bytes) -> list[int]:
    recovery = Recovery()
    recovery.add_segment(1, data, last=True)
    state = recovery.state()
    return [m.message_id for q in state.queues for m in q.messages]


BEFORE = (
    encode_queue(QueueRecord(1, "q", False, {}))
    + encode_message(2, "", "q", b"", b"before")
    + encode_enqueue(1, 2, 0, 0)
)


def test_a_recovered_transaction_is_whole() -> None:
    assert recovered_ids(segment(1, BEFORE, transaction(10, 3))) == [10, 11, 12]  # 2 acked


@settings(deadline=None)
@given(st.integers(1, 6), st.data())
def test_a_transaction_cut_anywhere_comes_back_whole_or_not_at_all(
    n: int, data: st.DataObject
) -> None:
    """A crash during the commit's write: any prefix of the TX record is a torn tail and
    none of it is recovered, the acknowledged message included (its dequeue was in it)."""
    tx = transaction(10, n)
    cut = data.draw(st.integers(0, len(tx) - 1), label="cut")
    assert recovered_ids(segment(1, BEFORE, tx[:cut])) == [2]


def test_the_journal_writes_a_transaction_as_one_record_and_compacts_it(tmp_path: Path) -> None:
    async def scenario() -> list[int]:
        journal = Journal(tmp_path, sync=SyncPolicy.WRITE, segment_bytes=4096)
        journal.recover()
        journal.start()
        journal.append(encode_queue(QueueRecord(journal.new_id(), "q", False, {})))
        ids = [journal.new_id() for _ in range(3)]
        with journal.transaction():
            for position, message_id in enumerate(ids, 1):
                journal.append(encode_message(message_id, "", "q", b"", b"body"))
                journal.append(encode_enqueue(1, message_id, position, 0))
        done = asyncio.get_running_loop().create_future()
        journal.after_durable(done.set_result)
        assert await done is True
        first = segment_path(journal.directory, list_segments(journal.directory)[0])
        data = first.read_bytes()
        kinds = []
        pos = len(segment_header(0, 0))
        while pos < len(data):
            length, _crc, kind = RECORD_HEADER.unpack_from(data, pos)
            kinds.append(kind)
            pos += RECORD_HEADER.size + length
        assert kinds == [Kind.QUEUE_2, Kind.TX]
        assert await journal.close()
        again = Journal(tmp_path, sync=SyncPolicy.WRITE)
        state = again.recover()
        return [m.message_id for q in state.queues for m in q.messages]

    assert run(scenario()) == [2, 3, 4]


def test_compaction_copies_a_transactions_live_records(tmp_path: Path) -> None:
    """A TX record's live messages are copied forward one by one; its settled ones go."""

    async def scenario() -> Journal:
        journal, _store, vhost, _ = open_store(tmp_path, segment_bytes=8192)
        journal.start()
        queue = vhost.declare_queue("q", durable=True)
        with journal.transaction():
            for i in range(3):
                publish(vhost, b"tx %d" % i)
            queue.remove_positions({1})  # the transaction's acknowledgement, in it too
        for i in range(3000):  # fill segments whose messages are consumed at once
            publish(vhost, b"%d" % i + b"." * 100)
            queue.remove_positions({queue.last_position})
            if i % 50 == 0:
                await asyncio.sleep(0.001)  # let the writer and compaction run
        deadline = time.monotonic() + 30  # the ledger's segments, not the files
        while len(journal.ledger.segments) > 4 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert await journal.close()
        return journal

    journal = run(scenario())
    assert journal.compacted_segments > 10
    _journal, _store, vhost, _ = open_store(tmp_path, segment_bytes=8192)
    assert bodies(vhost) == [b"tx 1", b"tx 2"]
