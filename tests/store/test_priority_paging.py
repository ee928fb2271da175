"""Priority queues page end to end: a real qpidd holds an ``x-max-priority`` queue larger than
its memory budget in page files (one per priority), stays under its memory limit, and
delivers highest priority first, in order of arrival within a priority; in a cluster the
backup's copy pages too and, promoted, delivers in the same order."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pika

from common.polling import poll_until
from tests.broker_process import BrokerProcess
from tests.ha.cluster import Cluster
from tests.ha.failover_clients import connect

MIB = 1024 * 1024
MAX_PRIORITY = 9


def priority(n: int) -> int:
    return (n * 7) % (MAX_PRIORITY + 1)


def body(n: int) -> bytes:
    seed = hashlib.sha256(str(n).encode()).digest()
    return f"{n:06d}".encode() + seed * ((MIB - 6) // len(seed))


def resident(pid: int) -> int:
    with open(f"/proc/{pid}/statm", "rb") as statm:
        return int(statm.read().split()[1]) * 4096


def publish(
    channel: pika.adapters.blocking_connection.BlockingChannel,
    count: int,
    sample: list[int],
    pid: int,
) -> None:
    """``count`` 1 MiB messages at priorities 0..9 in turn; samples the broker's RSS."""
    for n in range(count):
        channel.basic_publish(
            "", "pq", body(n), pika.BasicProperties(priority=priority(n), delivery_mode=1)
        )
        if n % 25 == 0:
            sample.append(resident(pid))
            channel.connection.process_data_events(0)


def drain(
    connection: pika.BlockingConnection,
    channel: pika.adapters.blocking_connection.BlockingChannel,
    count: int,
) -> list[int]:
    """Consume every message, checking bodies; their numbers in order. Prefetch 10: the
    budget counts ready messages, not delivered ones (10 MiB), and while the highest
    priority is read back from its pages the other priorities keep their heads in memory."""
    channel.basic_qos(prefetch_count=10)
    received: list[int] = []

    def on_message(ch: object, method: object, _props: object, payload: bytes) -> None:
        n = int(payload[:6])
        assert payload == body(n), f"message {n} came back wrong"
        received.append(n)
        channel.basic_ack(method.delivery_tag)  # type: ignore[attr-defined]

    channel.basic_consume("pq", on_message)
    poll_until(
        lambda: len(received) == count,
        120,
        "every paged message delivered",
        between=lambda left: connection.process_data_events(time_limit=min(left, 0.2)),
    )
    return received


def in_priority_order(count: int) -> list[int]:
    return sorted(range(count), key=lambda n: (-priority(n), n))


def priority_pages(data: Path) -> list[Path]:
    return [p for p in (data / "paging").glob("*.page") if ".p" in p.name]


def test_a_priority_queue_larger_than_the_budget_pages_and_drains_by_priority(
    tmp_path: Path,
) -> None:
    count = 300  # 300 MiB of bodies; the paging budget is half of --max-memory: 100 MB
    data = tmp_path / "data"
    options = [f"--data-dir={data}", "--max-memory=200MB", "--default-queue-limit=0"]
    broker = BrokerProcess(tmp_path / "qpidd", options).start()
    assert broker.proc is not None
    connection = None
    try:
        # A memory alarm would block the publisher: fail, not hang.
        url = f"{broker.url}?blocked_connection_timeout=30"
        connection = pika.BlockingConnection(pika.URLParameters(url))
        blocked: list[str] = []
        connection.add_on_connection_blocked_callback(
            lambda _c, frame: blocked.append(frame.method.reason)
        )
        channel = connection.channel()
        channel.queue_declare("pq", arguments={"x-max-priority": MAX_PRIORITY})
        peaks: list[int] = []
        publish(channel, count, peaks, broker.proc.pid)
        poll_until(
            lambda: channel.queue_declare("pq", passive=True).method.message_count == count,
            60,
            "every message on the queue",
        )
        peaks.append(resident(broker.proc.pid))
        pages = priority_pages(data)
        # One page file (at least) per priority: each priority pages its own tail.
        assert {p.name.split(".")[1] for p in pages} == {f"p{i}" for i in range(10)}
        assert sum(p.stat().st_size for p in pages) > (count - 110) * MIB
        assert max(peaks) < 200_000_000, f"peak RSS {max(peaks) / 1e6:.0f} MB"
        assert blocked == []
        assert not [e for e in broker.events() if e["event"] == "resource_alarm_raised"]
        assert drain(connection, channel, count) == in_priority_order(count)
        poll_until(lambda: not list((data / "paging").glob("*.page")), 10, "page files gone")
    finally:
        if connection is not None and connection.is_open:
            connection.close()
        broker.stop()


def test_a_backup_pages_its_copy_of_a_priority_queue_and_delivers_it_in_order(
    tmp_path: Path,
) -> None:
    count = 250  # 250 MiB of bodies; the budget is 100 MB on each broker
    cluster = Cluster(tmp_path, 2, "--max-memory=200MB", "--default-queue-limit=0").start()
    try:
        cluster.promote(0, epoch=1)
        cluster.wait_state(1, "ready")
        primary, backup = cluster.brokers
        assert primary.proc is not None and backup.proc is not None
        connection = connect(cluster.ports[0])
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare("pq", arguments={"x-max-priority": MAX_PRIORITY})
        peaks: list[int] = []
        publish(channel, count, peaks, backup.proc.pid)  # confirmed: the backup has each
        connection.close()
        poll_until(lambda: cluster.queue_messages(1, "pq") == count, 60, "the backup's copy")
        peaks.append(resident(backup.proc.pid))
        backup_data = tmp_path / "b1" / "data"
        pages = priority_pages(backup_data)
        assert {p.name.split(".")[1] for p in pages} == {f"p{i}" for i in range(10)}
        assert sum(p.stat().st_size for p in pages) > (count - 110) * MIB
        assert max(peaks) < 200_000_000, f"backup's peak RSS {max(peaks) / 1e6:.0f} MB"
        cluster.kill(0)
        cluster.promote(1, epoch=2)
        cluster.wait_state(1, "active")
        connection = connect(cluster.ports[1])
        try:
            assert drain(connection, connection.channel(), count) == in_priority_order(count)
        finally:
            connection.close()
        poll_until(lambda: not priority_pages(backup_data), 10, "page files gone")
    finally:
        cluster.stop()
