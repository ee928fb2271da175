"""Paging end to end: a real qpidd holds a queue three times its memory budget, pages it to
the data directory, stays under its memory limit, and delivers every message in order."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pika

from common.polling import poll_until
from tests.broker_process import BrokerProcess
from tests.store.small_disk import small_disk

MIB = 1024 * 1024
#: The full-disk test's messages: small enough that the one in flight when the broker stops
#: reading (the alarm) always fits in the sockets' buffers, so pika's publish never stalls.
FULL_DISK_MESSAGE = 64 * 1024
COUNT = 300  # 300 MiB of bodies; the paging budget is half of --max-memory: 100 MB


def body(n: int) -> bytes:
    seed = hashlib.sha256(str(n).encode()).digest()
    return seed * (MIB // len(seed))


def resident(broker: BrokerProcess) -> int:
    assert broker.proc is not None
    with open(f"/proc/{broker.proc.pid}/statm", "rb") as statm:
        return int(statm.read().split()[1]) * 4096


def test_a_queue_larger_than_the_memory_budget_is_paged_and_delivered_in_order(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    options = [f"--data-dir={data}", "--max-memory=200MB", "--default-queue-limit=0"]
    broker = BrokerProcess(tmp_path / "qpidd", options).start()
    connection = None
    try:
        connection = pika.BlockingConnection(pika.URLParameters(broker.url))
        blocked: list[str] = []
        connection.add_on_connection_blocked_callback(
            lambda _c, frame: blocked.append(frame.method.reason)
        )
        channel = connection.channel()
        channel.queue_declare("long")
        peak = 0
        bodies = [body(n) for n in range(10)]
        for n in range(COUNT):
            channel.basic_publish("", "long", bodies[n % 10])
            if n % 25 == 0:
                peak = max(peak, resident(broker))
                connection.process_data_events(0)
        poll_until(
            lambda: channel.queue_declare("long", passive=True).method.message_count == COUNT,
            60,
            "every message on the queue",
        )
        peak = max(peak, resident(broker))
        pages = list((data / "paging").glob("*.page"))
        assert pages, "nothing was paged"
        paged_bytes = sum(p.stat().st_size for p in pages)
        assert paged_bytes > (COUNT - 110) * MIB
        # Resident memory stayed under the limit: no memory alarm, nobody blocked.
        assert peak < 200_000_000, f"peak RSS {peak / 1e6:.0f} MB"
        assert blocked == []
        assert not [e for e in broker.events() if e["event"] == "resource_alarm_raised"]
        channel.basic_qos(prefetch_count=50)
        received: list[int] = []

        def on_message(ch: object, method: object, _props: object, payload: bytes) -> None:
            n = len(received)
            assert payload == bodies[n % 10], f"message {n} came back wrong"
            received.append(n)
            channel.basic_ack(method.delivery_tag)  # type: ignore[attr-defined]

        channel.basic_consume("long", on_message)
        poll_until(
            lambda: len(received) == COUNT,
            120,
            "every paged message delivered",
            between=lambda left: (
                connection.process_data_events(time_limit=min(left, 0.2))
                if connection is not None
                else None
            ),
        )
        assert received == list(range(COUNT))
        poll_until(lambda: not list((data / "paging").glob("*.page")), 10, "page files gone")
    finally:
        if connection is not None and connection.is_open:
            connection.close()
        broker.stop()


def test_a_full_disk_under_the_page_files_blocks_publishers_and_loses_nothing(
    tmp_path: Path,
) -> None:
    with small_disk(tmp_path, "48m") as disk:
        _fill_the_page_files_disk(tmp_path, disk)


def _fill_the_page_files_disk(tmp_path: Path, disk: Path) -> None:
    options = [
        f"--data-dir={disk / 'data'}",
        "--max-memory=300MB",  # paging budget 150 MB: the tail goes to the 48 MiB disk
        "--disk-free-limit=0",  # no sampled alarm: the failed page write raises it
        "--default-queue-limit=0",
    ]
    broker = BrokerProcess(tmp_path / "qpidd", options).start()
    publisher = consumer = None
    try:
        publisher = pika.BlockingConnection(pika.URLParameters(broker.url))
        notices: list[str] = []
        publisher.add_on_connection_blocked_callback(lambda _c, f: notices.append(f.method.reason))
        publisher.add_on_connection_unblocked_callback(lambda _c, _f: notices.append("unblocked"))
        channel = publisher.channel()
        channel.queue_declare("full")
        published = 0

        def publish_until_blocked() -> bool:
            nonlocal published
            body = published.to_bytes(4, "big") * (FULL_DISK_MESSAGE // 4)
            channel.basic_publish("", "full", body)
            published += 1
            publisher.process_data_events(0)
            return bool(notices)

        poll_until(publish_until_blocked, 90, "connection.blocked", interval=0)
        assert notices == ["low on disk"]
        failed = [e for e in broker.events() if e["event"] == "page_write_failed"]
        assert failed and "No space left" in failed[0]["reason"]
        consumer = pika.BlockingConnection(pika.URLParameters(broker.url))
        taker = consumer.channel()
        received: list[int] = []
        while len(received) < published:
            method, _props, payload = taker.basic_get("full", auto_ack=True)
            if method is None:
                publisher.process_data_events(0.05)
                continue
            received.append(int.from_bytes(payload[:4], "big"))
            assert len(payload) == FULL_DISK_MESSAGE
        assert received == list(range(published))
        # Consumed: the page files are gone, the space is back, the alarm clears by itself.
        poll_until(
            lambda: "unblocked" in notices,
            30,
            "connection.unblocked",
            between=lambda _left: publisher.process_data_events(0.1),
        )
    finally:
        for connection in (publisher, consumer):
            if connection is not None and connection.is_open:
                connection.close()
        broker.stop()
