"""A backup's store holds a replicated transaction whole or not at all (issue 11), with real
brokers: a primary and its in-sync backup, each with its store; a pika client commits a
transaction over two durable queues; the backup (SIGKILLed) has it as one TX record. Its
store copied as it is recovers all of it; cut inside the TX record (a crash during its
write), none of it, and what came before it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pika

from broker.store.journal import Journal, SyncPolicy
from broker.store.records import HEADER, RECORD_HEADER, Kind
from broker.store.segment_files import list_segments, segment_path
from common.polling import poll_until
from tests.ha.failover_clients import connect, queue_names
from tests.ha.test_sync_config import in_sync_pair

QUEUES = ("txs-a", "txs-b")
PERSISTENT = pika.BasicProperties(delivery_mode=2)
BODY = b"|" + b"x" * 4096  # a label before the bar


def _recover(data: Path) -> dict[str, list[bytes]]:
    """The queues' messages the store in ``data`` recovers (the broker's own recovery)."""
    state = Journal(data, sync=SyncPolicy.WRITE).recover()
    return {
        q.record.name: [state.messages[m.message_id].body.split(b"|")[0] for m in q.messages]
        for q in state.queues
    }


def _tx_record(store: Path) -> tuple[Path, int, int]:
    """The segment holding the only TX record, its offset and its length."""
    found = []
    for number in list_segments(store):
        path = segment_path(store, number)
        data = path.read_bytes()
        pos = HEADER.size
        while pos < len(data):
            length, _crc, kind = RECORD_HEADER.unpack_from(data, pos)
            if kind == Kind.TX:
                found.append((path, pos, RECORD_HEADER.size + length))
            pos += RECORD_HEADER.size + length
    assert len(found) == 1, found
    return found[0]


def test_the_backups_store_has_the_transaction_whole_or_none_of_it(tmp_path: Path) -> None:
    with in_sync_pair(tmp_path / "cluster") as cluster:
        connection = connect(cluster.ports[0])
        confirmed = connection.channel()
        confirmed.confirm_delivery()
        for name in QUEUES:
            confirmed.queue_declare(name, durable=True)
        poll_until(lambda: set(QUEUES) <= queue_names(cluster, 1), 10)
        for name in QUEUES:  # confirmed: the backup has it (its stream is up)
            confirmed.basic_publish("", name, b"before " + name.encode(), PERSISTENT)
        tx = connection.channel()
        tx.tx_select()
        for i in range(3):
            for name in QUEUES:
                tx.basic_publish("", name, b"tx %d " % i + name.encode() + BODY, PERSISTENT)
        tx.tx_commit()  # commit-ok: on the backup's disk
        cluster.kill(1)
        connection.close()
        whole = tmp_path / "whole"
        shutil.copytree(tmp_path / "cluster" / "b1" / "data" / "store", whole / "store")
    before = {name: [b"before " + name.encode()] for name in QUEUES}
    txs = {name: [b"tx %d " % i + name.encode() for i in range(3)] for name in QUEUES}
    everything = {name: before[name] + txs[name] for name in QUEUES}

    path, offset, length = _tx_record(whole / "store")
    assert _recover(whole) == everything
    for cut in (1, RECORD_HEADER.size, length // 2, length - 1):
        torn = tmp_path / f"torn-{cut}"
        shutil.copytree(whole / "store", torn / "store")
        with open(torn / "store" / path.name, "r+b") as file:
            file.truncate(offset + cut)
        for later in list_segments(torn / "store"):
            if later > int(path.stem):
                segment_path(torn / "store", later).unlink()
        assert _recover(torn) == before, cut
