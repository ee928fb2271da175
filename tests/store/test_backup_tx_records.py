"""A backup stores a replicated transaction all or none (issue 11): the transaction its
staging applies whole goes to its journal as one TX record, as on the primary.

In process: a primary's queues with real replicating subscriptions and the real wire
format, a backup's queue replicators sharing a TxStaging over a real MessageStore and
Journal (written to a temporary directory once); then the records, sans I/O: the backup's
segment cut anywhere inside the TX record recovers none of the transaction, whole all of it.
"""

from __future__ import annotations

import asyncio
import functools
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.core.message import Message, TxMark
from broker.core.vhost import VirtualHost
from broker.ha.queue_replicator import QueueReplicator
from broker.ha.replicating_subscription import ReplicatingSubscription
from broker.ha.tx_staging import TxStaging
from broker.ha.wire import decode_batch
from broker.store.journal import Journal, SyncPolicy
from broker.store.message_store import MessageStore
from broker.store.records import HEADER, RECORD_HEADER, Kind, iter_tx
from broker.store.recovery import Recovery
from broker.store.segment_files import list_segments, segment_path
from tests.store.test_journal import PERSISTENT

QUEUES = ("q1", "q2")


def _replicate(directory: Path) -> bytes:
    """A message on q1, then a transaction of three messages over q1 and q2 replicated to
    a backup with a store, q1's batches first; the backup's only segment, as written."""
    saved = TxMark._next_id
    try:
        return asyncio.run(_replicate_on_loop(directory))
    finally:
        TxMark._next_id = saved


async def _replicate_on_loop(directory: Path) -> bytes:
    primary = VirtualHost()
    backup = VirtualHost()
    journal = Journal(directory, sync=SyncPolicy.WRITE)
    MessageStore(journal, backup).recover_into(journal.recover())
    journal.start()
    staging = TxStaging(journal.transaction)
    replicators, subscriptions = {}, {}
    for name in QUEUES:
        primary.declare_queue(name, durable=True)
        replicators[name] = QueueReplicator(backup.declare_queue(name, durable=True), staging)
        subscriptions[name] = ReplicatingSubscription(
            primary.queues[name], None, replicators[name].ids(), max_batch_events=2
        )
    exchange = primary.exchange("")
    primary.publish(exchange, Message("", "q1", PERSISTENT, b"before"))
    mark = TxMark()
    for name, body in (("q1", b"tx-0"), ("q2", b"tx-1"), ("q1", b"tx-2")):
        message = Message("", name, PERSISTENT, body)
        message.tx = mark
        primary.publish(exchange, message)
    for name in QUEUES:
        while (batch := subscriptions[name].next_batch()) is not None:
            replicators[name].apply(decode_batch(batch[1]))
    assert staging.applied_total == 1  # applied whole, not released
    written: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
    journal.after_durable(written.set_result)
    assert await written
    assert await journal.close()
    [number] = list_segments(journal.directory)
    return segment_path(journal.directory, number).read_bytes()


@functools.cache
def backup_segment() -> bytes:
    with tempfile.TemporaryDirectory() as directory:
        return _replicate(Path(directory))


def records(data: bytes, start: int = HEADER.size) -> list[tuple[int, int]]:
    """(offset, kind) of each record of a segment."""
    found, pos = [], start
    while pos < len(data):
        length, _crc, kind = RECORD_HEADER.unpack_from(data, pos)
        found.append((pos, kind))
        pos += RECORD_HEADER.size + length
    return found


def tx_offset(data: bytes) -> int:
    [offset] = [pos for pos, kind in records(data) if kind == Kind.TX]
    return offset


def recovered(data: bytes) -> dict[str, list[bytes]]:
    recovery = Recovery()
    recovery.add_segment(1, data, last=True)
    state = recovery.state()
    return {
        q.record.name: [state.messages[m.message_id].body for m in q.messages] for q in state.queues
    }


def test_the_backup_writes_the_replicated_transaction_as_one_tx_record() -> None:
    data = backup_segment()
    kinds = [kind for _pos, kind in records(data)]
    assert kinds == [Kind.QUEUE_2, Kind.QUEUE_2, Kind.MESSAGE, Kind.ENQUEUE, Kind.TX]
    offset = tx_offset(data)
    payload = data[offset + RECORD_HEADER.size :]
    inner = [kind for kind, _payload in iter_tx(payload)]
    assert sorted(inner) == sorted([Kind.MESSAGE, Kind.ENQUEUE] * 3)
    assert recovered(data) == {"q1": [b"before", b"tx-0", b"tx-2"], "q2": [b"tx-1"]}


@settings(deadline=None)
@given(st.data())
def test_the_backup_segment_cut_inside_the_transaction_recovers_none_of_it(
    data: st.DataObject,
) -> None:
    """A crash during the write of the backup's TX record: a torn tail, none of it back."""
    segment = backup_segment()
    offset = tx_offset(segment)
    cut = data.draw(st.integers(offset, len(segment) - 1), label="cut")
    assert recovered(segment[:cut]) == {"q1": [b"before"], "q2": []}
