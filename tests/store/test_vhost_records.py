"""Virtual hosts in the message store: their records, the vhost of each configuration
record, old records read as ``/``, and a restart (with compaction) that brings them back."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from broker.core.message import Message
from broker.core.vhost import VirtualHost
from broker.core.vhosts import VirtualHosts
from broker.store.journal import Journal
from broker.store.message_store import MessageStore
from broker.store.record_decode import decode_payload
from broker.store.records import (
    RECORD_HEADER,
    ExchangeBindingRecord,
    ExchangeRecord,
    QueueRecord,
    VhostRecord,
    encode_exchange,
    encode_exchange_binding,
    encode_queue,
    encode_vhost,
    iter_records,
)
from broker.store.recovery import Recovery
from broker.store.segment_files import list_segments

PERSISTENT = bytes.fromhex("1000") + b"\x02"


def decoded(frame: bytes) -> object:
    _size, _crc, kind = RECORD_HEADER.unpack_from(frame)
    return decode_payload(kind, frame[RECORD_HEADER.size :])


def test_configuration_records_carry_their_vhost_and_old_ones_read_as_the_default() -> None:
    queue = QueueRecord(3, "q", False, {"x-max-length": 5}, "ab" * 16, "orders")
    exchange = ExchangeRecord(4, "x", "topic", True, False, {}, "orders")
    link = ExchangeBindingRecord(5, "x", "y", "k", {}, "orders")
    assert decoded(encode_queue(queue)) == queue
    assert decoded(encode_exchange(exchange)) == exchange
    assert decoded(encode_exchange_binding(link)) == link
    assert decoded(encode_queue(queue._replace(vhost="/"))) == queue._replace(vhost="/")
    assert decoded(encode_exchange(exchange._replace(vhost="/"))) == exchange._replace(vhost="/")
    assert decoded(encode_exchange_binding(link._replace(vhost="/"))) == link._replace(vhost="/")
    # "/" writes nothing: the bytes of a record written before vhosts existed
    assert len(encode_queue(queue)) == len(encode_queue(queue._replace(vhost="/"))) + 7
    assert decoded(encode_vhost(VhostRecord(9, "orders"))) == VhostRecord(9, "orders")


def test_recovery_keeps_the_vhosts_not_deleted() -> None:
    from broker.store.records import Kind, encode_deleted, segment_header

    data = (
        segment_header(1, 1)
        + encode_vhost(VhostRecord(1, "a"))
        + encode_vhost(VhostRecord(2, "b"))
        + encode_queue(QueueRecord(3, "q", False, {}, "", "a"))
        + encode_deleted(Kind.VHOST_DELETED, 2)
    )
    recovery = Recovery()
    recovery.add_segment(1, data, last=True)
    state = recovery.state()
    assert state.vhosts == [VhostRecord(1, "a")]
    assert [q.record.vhost for q in state.queues] == ["a"]
    assert state.ledger.is_live(1, Kind.VHOST, (1,))
    assert not state.ledger.is_live(1, Kind.VHOST, (2,))
    assert len(list(iter_records(data, 24))) == 4


def open_store(path: Path, segment_bytes: int = 1 << 20) -> tuple[Journal, VirtualHosts]:
    journal = Journal(path, segment_bytes=segment_bytes)
    state = journal.recover()
    vhosts = VirtualHosts()
    MessageStore(journal, vhosts).recover_into(state)
    return journal, vhosts


def test_vhosts_and_their_objects_come_back_after_compaction(tmp_path: Path) -> None:
    async def scenario() -> None:
        journal, vhosts = open_store(tmp_path, segment_bytes=8192)
        journal.start()
        for name in ("a", "b", "gone"):
            vhosts.create(name)
        for vhost in vhosts:
            vhost.declare_exchange("x", "fanout", durable=True)
            vhost.declare_exchange("y", "fanout", durable=True)
            vhost.bind_exchange("y", "x", "")
            vhost.declare_queue("q", durable=True)
            vhost.bind("q", "y", "")
            vhost.publish(vhost.exchange("x"), Message("x", "", PERSISTENT, vhost.name.encode()))
        vhosts.delete("gone")
        churn = vhosts.default.declare_queue("churn", durable=True)
        for i in range(2000):  # fill segments so that the first ones are compacted
            vhosts.default.publish(
                vhosts.default.exchange(""), Message("", "churn", PERSISTENT, b"." * 100)
            )
            churn.remove_positions({churn.last_position})
            if i % 50 == 0:
                await asyncio.sleep(0.001)
        deadline = time.monotonic() + 30
        while len(journal.ledger.segments) > 4 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert journal.compacted_segments > 0
        assert await journal.close()

    asyncio.run(scenario())
    assert len(list_segments(tmp_path / "store")) <= 4
    _journal, vhosts = open_store(tmp_path)
    assert vhosts.names() == ["/", "a", "b"]
    for name in ("/", "a", "b"):
        vhost = vhosts.get(name)
        assert isinstance(vhost, VirtualHost)
        assert [e.message.body for e in vhost.queues["q"].entries()] == [name.encode()]
        vhost.publish(vhost.exchange("x"), Message("x", "", PERSISTENT, b"again"))
        assert vhost.queues["q"].message_count == 2  # x -> y -> q came back in each vhost
