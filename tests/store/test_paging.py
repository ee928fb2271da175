"""Paging end to end: a real qpidd holds a queue three times its memory budget, pages it to
the data directory, stays under its memory limit, and delivers every message in order."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pika

from common.polling import poll_until
from tests.broker_process import BrokerProcess

MIB = 1024 * 1024
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
