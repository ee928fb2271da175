"""A damaged store, end to end (real qpidd processes, pika).

A torn tail (what a crash leaves at the end of the newest segment: garbage, half a record,
half a segment header) is cut off at start with a ``store_torn_tail`` line naming the
segment and the offset, and every confirmed message before it is back. A damaged record
anywhere else stops the start: one ``qpidd: error:`` line naming the segment and the
offset, a non-zero exit, no traceback, and the store left as it was.
"""

from __future__ import annotations

import signal
import struct
from pathlib import Path

from common.polling import poll_until
from tests.broker_process import BrokerProcess
from tests.store.store_brokers import (
    PERSISTENT,
    StoreBrokers,
    connect,
    drain,
    events,
    status,
)

SEGMENT_HEADER = 24  # b"QPIDSEG1", segment number, next id (docs/store.md)
RECORD_HEADER = struct.Struct(">IIB")  # payload length, CRC-32C, kind


def _records(data: bytes) -> list[tuple[int, int]]:
    """(offset, size) of each whole record of a segment's bytes (read here, not by the
    broker's code: the test checks the format as documented)."""
    found = []
    pos = SEGMENT_HEADER
    while pos + RECORD_HEADER.size <= len(data):
        length = RECORD_HEADER.unpack_from(data, pos)[0]
        size = RECORD_HEADER.size + length
        if pos + size > len(data):
            break
        found.append((pos, size))
        pos += size
    return found


def _publish(broker: BrokerProcess, bodies: list[bytes]) -> None:
    connection = connect(broker)
    channel = connection.channel()
    channel.confirm_delivery()
    channel.queue_declare("q", durable=True)
    for body in bodies:
        channel.basic_publish("", "q", body, PERSISTENT)
    connection.close()


def _content(broker: BrokerProcess) -> list[bytes]:
    """The queue's bodies, left on the queue (read with a passive count and gets, then
    the channel closes unacked: requeued in order)."""
    connection = connect(broker)
    channel = connection.channel()
    count = channel.queue_declare("q", passive=True).method.message_count
    bodies = []
    for _ in range(count):
        _method, _properties, body = channel.basic_get("q", auto_ack=False)
        bodies.append(body)
    connection.close()
    return bodies


def _newest(brokers: StoreBrokers) -> Path:
    return brokers.segments()[-1]


def _torn_tail(broker: BrokerProcess) -> dict[str, object]:
    (torn,) = events(broker, "store_torn_tail")
    return torn


def test_a_torn_tail_is_cut_off_logged_and_loses_nothing_confirmed(
    brokers: StoreBrokers,
) -> None:
    broker = brokers.start()
    confirmed = [b"m%d" % i for i in range(30)]
    _publish(broker, confirmed)
    assert broker.stop(signal.SIGKILL) == -signal.SIGKILL

    # 1. Garbage after the last record (a length no record can have).
    segment = _newest(brokers)
    size = segment.stat().st_size
    with open(segment, "ab") as file:
        file.write(b"\xde\xad\xbe\xef" * 5)
    broker = brokers.start()
    torn = _torn_tail(broker)
    assert (torn["segment"], torn["offset"], torn["cut_bytes"]) == (str(segment), size, 20)
    assert torn["level"] == "warning"
    assert status(broker)["store_status"] == "dirty"
    assert segment.stat().st_size == size
    assert _content(broker) == confirmed
    more = [b"n%d" % i for i in range(10)]
    _publish(broker, more)
    confirmed += more
    assert broker.stop(signal.SIGKILL) == -signal.SIGKILL

    # 2. The newest segment cut in the middle of a record: half of a copy of its last one.
    segment = _newest(brokers)
    data = segment.read_bytes()
    offset, length = _records(data)[-1]
    with open(segment, "ab") as file:
        file.write(data[offset : offset + length // 2])
    broker = brokers.start()
    torn = _torn_tail(broker)
    assert (torn["segment"], torn["offset"]) == (str(segment), len(data))
    assert segment.read_bytes() == data
    assert _content(broker) == confirmed
    assert broker.stop(signal.SIGKILL) == -signal.SIGKILL

    # 3. A new segment whose header was cut short: removed.
    number = int(_newest(brokers).stem) + 1
    partial = brokers.store / f"{number:020d}.seg"
    partial.write_bytes(b"QPIDSEG1\x00\x00")
    broker = brokers.start()
    torn = _torn_tail(broker)
    assert (torn["segment"], torn["offset"]) == (str(partial), 0)
    # Removed, or made again by the journal for its next records: the loop creates a
    # segment's file when it hands its first records over and the group writer writes its
    # header after that (docs/store.md), so an empty file may be seen in between.
    poll_until(
        lambda: not partial.exists() or partial.read_bytes().startswith(b"QPIDSEG1" + bytes(7)),
        10.0,
        f"{partial} removed, or made again with a whole header",
    )
    assert _content(broker) == confirmed
    connection = connect(broker)
    assert [body for body, _, _ in drain(connection.channel(), "q")] == confirmed
    connection.close()


def test_a_damaged_record_inside_the_store_refuses_the_start_in_one_line(
    brokers: StoreBrokers,
) -> None:
    broker = brokers.start()
    first = [b"first%d" % i for i in range(40)]
    _publish(broker, first)
    assert broker.stop() == 0
    broker = brokers.start()  # a second segment
    second = [b"second%d" % i for i in range(40)]
    _publish(broker, second)
    assert broker.stop() == 0
    segments = brokers.segments()
    assert len(segments) >= 2
    before = {path: path.read_bytes() for path in segments}

    def damage(path: Path, record: int) -> tuple[bytes, int]:
        data = bytearray(before[path])
        offset, size = _records(bytes(data))[record]
        data[offset + size - 2] ^= 0x40  # one bit inside the payload
        path.write_bytes(data)
        return bytes(data), offset

    def refused(path: Path, record: int) -> None:
        damaged, offset = damage(path, record)
        result = brokers.fail_to_start()
        assert result.returncode == 1, result
        assert "Traceback" not in result.stderr
        lines = result.stderr.splitlines()
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith("qpidd: error: ")
        assert f"{path.name}, offset {offset}" in lines[0]
        assert "checksum" in lines[0]
        assert "--store-cut-damaged=yes" in lines[0]  # the way out, named
        # Nothing was cut or added: the store is as it was, damage included.
        assert {p: p.read_bytes() for p in brokers.segments()} == {**before, path: damaged}
        path.write_bytes(before[path])

    refused(segments[0], 3)  # an early record of the oldest segment
    refused(segments[-1], 1)  # inside the newest segment, valid records after it

    # The way out: keep what precedes the damage, move the rest aside (never deleted).
    damaged, offset = damage(segments[0], 3)  # queue, first0's content and enqueue before it
    broker = brokers.start("--store-cut-damaged=yes")
    (cut,) = events(broker, "store_cut_at_damage")
    assert (cut["segment"], cut["offset"]) == (int(segments[0].stem), offset)
    aside = Path(str(cut["moved_to"]))
    assert aside.parent == brokers.data
    assert {p.name: p.read_bytes() for p in aside.iterdir()} == {
        segments[0].name: damaged,
        **{p.name: before[p] for p in segments[1:]},
    }
    assert segments[0].read_bytes() == damaged[:offset]
    assert _content(broker) == first[:1]
