"""The memory and disk alarms end to end: a real qpidd, pika clients seeing
``Connection.Blocked``/``Connection.Unblocked`` (RabbitMQ's resource alarms)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest

from common.polling import poll_until
from tests.broker_process import BrokerProcess
from tests.store.small_disk import small_disk

MIB = 1024 * 1024


class Watched:
    """A pika connection that records the blocked/unblocked notices it gets."""

    def __init__(self, url: str) -> None:
        self.connection = pika.BlockingConnection(pika.URLParameters(url))
        self.notices: list[tuple[str, str]] = []
        self.connection.add_on_connection_blocked_callback(self._blocked)
        self.connection.add_on_connection_unblocked_callback(self._unblocked)
        self.channel = self.connection.channel()

    def _blocked(self, _connection: Any, frame: Any) -> None:
        self.notices.append(("blocked", frame.method.reason))

    def _unblocked(self, _connection: Any, _frame: Any) -> None:
        self.notices.append(("unblocked", ""))

    def pump(self, seconds: float = 0.05) -> None:
        self.connection.process_data_events(time_limit=min(seconds, 0.05))

    def wait_for(self, notice: str, timeout: float = 15.0) -> None:
        poll_until(
            lambda: any(kind == notice for kind, _ in self.notices),
            timeout,
            f"connection.{notice}",
            between=self.pump,
        )

    def close(self) -> None:
        if self.connection.is_open:
            self.connection.close()


@pytest.fixture
def watched() -> Iterator[list[Watched]]:
    """Connections the test opens; each test closes them before it stops its broker."""
    opened: list[Watched] = []
    try:
        yield opened
    finally:
        _close_all(opened)


def _close_all(opened: list[Watched]) -> None:
    while opened:
        with contextlib.suppress(pika.exceptions.AMQPError):
            opened.pop().close()


def _count(channel: Any, queue: str) -> int:
    return int(channel.queue_declare(queue, passive=True).method.message_count)


def _events(broker: BrokerProcess, name: str) -> list[dict[str, Any]]:
    return [e for e in broker.events() if e["event"] == name]


def test_memory_alarm_blocks_publishers_until_memory_is_freed(
    tmp_path: Path, watched: list[Watched]
) -> None:
    broker = BrokerProcess(tmp_path / "qpidd", ["--max-memory=150MB"]).start()
    try:
        publisher = Watched(broker.url)
        watched.append(publisher)
        bystander = Watched(broker.url)  # never publishes: never blocked, always read
        watched.append(bystander)
        publisher.channel.queue_declare("big")
        body = b"m" * MIB
        published = 0

        def publish_until_blocked() -> bool:
            nonlocal published
            publisher.channel.basic_publish("", "big", body)
            published += 1
            publisher.pump()
            return bool(publisher.notices)

        poll_until(publish_until_blocked, 60, "connection.blocked", interval=0)
        assert publisher.notices == [("blocked", "low on memory")]
        raised = _events(broker, "resource_alarm_raised")
        assert [e["resource"] for e in raised] == ["memory"]
        assert raised[0]["value"] >= raised[0]["limit"] == 150_000_000
        # The broker no longer reads the publisher; the others go on.
        bystander.pump()
        assert bystander.notices == []
        purged = int(bystander.channel.queue_purge("big").method.message_count)
        assert 0 < purged <= published
        publisher.wait_for("unblocked")
        assert _events(broker, "resource_alarm_cleared")[0]["resource"] == "memory"
        # What the publisher sent while blocked is read now; nothing was lost.
        publisher.channel.basic_publish("", "big", b"after")
        published += 1
        poll_until(
            lambda: purged + _count(bystander.channel, "big") == published,
            30,
            "every published message on the queue",
        )
        assert bystander.notices == []
    finally:
        _close_all(watched)
        broker.stop()


@pytest.fixture
def disk_64m(tmp_path: Path) -> Iterator[Path]:
    """A 64 MiB tmpfs mounted for this test."""
    with small_disk(tmp_path, "64m") as mount:
        yield mount


def test_disk_alarm_blocks_publishers_until_space_returns(
    tmp_path: Path, disk_64m: Path, watched: list[Watched]
) -> None:
    broker = BrokerProcess(
        tmp_path / "qpidd", [f"--data-dir={disk_64m / 'data'}", "--disk-free-limit=32MiB"]
    ).start()
    try:
        publisher = Watched(broker.url)
        watched.append(publisher)
        consumer = Watched(broker.url)
        watched.append(consumer)
        publisher.channel.queue_declare("q")
        publisher.channel.basic_publish("", "q", b"before")
        poll_until(lambda: _count(consumer.channel, "q") == 1, 10, "the first message")
        filler = disk_64m / "filler"
        filler.write_bytes(b"\0" * (40 * MIB))  # free space: about 24 MiB < 32 MiB
        publisher.wait_for("blocked")
        assert publisher.notices == [("blocked", "low on disk")]
        raised = _events(broker, "resource_alarm_raised")
        assert [(e["resource"], e["limit"]) for e in raised] == [("disk", 32 * MIB)]
        assert raised[0]["value"] < 32 * MIB
        # A connection opened during the alarm is blocked on its first publish.
        late = Watched(broker.url)
        watched.append(late)
        late.channel.basic_publish("", "q", b"late")
        late.wait_for("blocked")
        publisher.channel.basic_publish("", "q", b"while blocked")
        consumer.pump(0.5)
        # The late connection's first publish went in (it was "blocking", not "blocked",
        # as in RabbitMQ); nothing after it, nor anything from the blocked publisher.
        assert _count(consumer.channel, "q") == 2
        assert consumer.notices == []
        filler.unlink()
        publisher.wait_for("unblocked")
        late.wait_for("unblocked")
        poll_until(lambda: _count(consumer.channel, "q") == 3, 10, "the held publishes")
        bodies = []
        for _ in range(3):
            _method, _props, body = consumer.channel.basic_get("q", auto_ack=True)
            bodies.append(body)
        assert bodies == [b"before", b"late", b"while blocked"]
        cleared = _events(broker, "resource_alarm_cleared")
        assert [e["resource"] for e in cleared] == ["disk"]
    finally:
        _close_all(watched)
        broker.stop()
