"""Crash recovery end to end: real qpidd processes on one data directory, pika clients.

SIGKILL while four connections publish persistent messages under confirms (and a fifth takes
some without acking): after the restart every confirmed message is back, in order per
publisher, nothing beyond the one each publisher had in flight, all marked redelivered
(after a crash which were delivered is not known). With 200 publishes in flight
per connection, under ``--store-sync fsync`` and ``write`` (a broker crash, not a
machine's), each publisher's messages come back as a gapless prefix. A clean stop and a
crash under ``none``, and transactions.
"""

from __future__ import annotations

import random
import signal
import threading
from dataclasses import dataclass, field
from typing import Any

import pika
import pytest

from common.polling import poll_until
from tests.store.store_brokers import (
    PERSISTENT,
    TRANSIENT,
    StoreBrokers,
    connect,
    drain,
    events,
    status,
)

PUBLISHERS = 4
#: Confirmed messages each publisher has before the kill may come (then a random extra).
BEFORE_KILL = 60


@dataclass
class Publisher:
    """One connection publishing ``name:n`` for n = 0, 1, ... and waiting for each confirm."""

    url: str
    name: str
    exchange: str
    routing_key: str
    confirmed: list[int] = field(default_factory=list)
    in_flight: int | None = None
    error: BaseException | None = None

    def run(self, stop: threading.Event) -> None:
        try:
            connection = pika.BlockingConnection(pika.URLParameters(self.url))
            channel = connection.channel()
            channel.confirm_delivery()
            n = 0
            while not stop.is_set():
                self.in_flight = n
                body = f"{self.name}:{n}".encode()
                channel.basic_publish(self.exchange, self.routing_key, body, PERSISTENT)
                self.confirmed.append(n)  # basic_publish returns on the ack (raises on nack)
                self.in_flight = None
                n += 1
            connection.close()
        except Exception as exc:
            self.error = exc


@dataclass
class Taker:
    """Takes messages from a queue without acking them. After each confirmed publish of a
    persistent marker (on the same connection, so after the deliveries before it), the
    deliveries so far are surely recorded as delivered: they must come back redelivered."""

    url: str
    queue: str
    delivered: list[bytes] = field(default_factory=list)
    surely_delivered: int = 0
    error: BaseException | None = None

    def run(self, stop: threading.Event) -> None:
        try:
            connection = pika.BlockingConnection(pika.URLParameters(self.url))
            channel = connection.channel()
            channel.confirm_delivery()
            markers = 0
            while not stop.is_set():
                method, _properties, body = channel.basic_get(self.queue, auto_ack=False)
                if method is not None:
                    self.delivered.append(body)
                if method is None or len(self.delivered) % 10 == 0:
                    taken = len(self.delivered)
                    channel.basic_publish("", "markers", b"%d" % markers, PERSISTENT)
                    markers += 1
                    self.surely_delivered = taken
            connection.close()
        except Exception as exc:
            self.error = exc


def _by_publisher(messages: list[tuple[bytes, bool, Any]]) -> dict[str, list[int]]:
    ids: dict[str, list[int]] = {}
    for body, _redelivered, _properties in messages:
        name, n = body.decode().split(":")
        ids.setdefault(name, []).append(int(n))
    return ids


def test_sigkill_during_confirmed_publishing_keeps_every_confirmed_message(
    brokers: StoreBrokers,
) -> None:
    broker = brokers.start()
    setup = connect(broker)
    channel = setup.channel()
    channel.exchange_declare("orders", "direct", durable=True)
    for queue in ("q0", "q1", "markers"):
        channel.queue_declare(queue, durable=True)
    channel.queue_bind("q1", "orders", "b")
    setup.close()
    # p0 and p1 share q0 through the default exchange, p2 and p3 q1 through "orders";
    # the taker takes from q1 as the messages come.
    publishers = [
        Publisher(broker.url, f"p{i}", "" if i < 2 else "orders", "q0" if i < 2 else "b")
        for i in range(PUBLISHERS)
    ]
    taker = Taker(broker.url, "q1")
    workers: list[Publisher | Taker] = [*publishers, taker]
    stop = threading.Event()
    threads = [threading.Thread(target=worker.run, args=(stop,), daemon=True) for worker in workers]
    for thread in threads:
        thread.start()
    try:

        def failed() -> str:
            errors = [p.error for p in publishers] + [taker.error]
            return f"{[len(p.confirmed) for p in publishers]} {taker.surely_delivered} {errors}"

        poll_until(
            lambda: (
                all(len(p.confirmed) >= BEFORE_KILL for p in publishers)
                and taker.surely_delivered >= 20
            ),
            60,
            failed,
        )
        more = sum(len(p.confirmed) for p in publishers) + random.randint(0, 40)
        poll_until(lambda: sum(len(p.confirmed) for p in publishers) >= more, 30, failed)
        assert broker.stop(signal.SIGKILL) == -signal.SIGKILL
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
    for worker in workers:
        assert isinstance(worker.error, pika.exceptions.AMQPError), worker.error
        assert not isinstance(worker.error, pika.exceptions.NackError), worker.error

    broker = brokers.start()
    assert status(broker)["store_status"] == "dirty"
    connection = connect(broker)
    channel = connection.channel()
    q0 = drain(channel, "q0")
    q1 = drain(channel, "q1")
    for content, names in ((q0, ("p0", "p1")), (q1, ("p2", "p3"))):
        recovered = _by_publisher(content)
        assert set(recovered) <= set(names)
        for publisher in publishers:
            if publisher.name not in names:
                continue
            ids = recovered.get(publisher.name, [])
            confirmed = publisher.confirmed
            assert ids[: len(confirmed)] == confirmed, f"{publisher.name}: confirmed lost"
            extra = ids[len(confirmed) :]
            # Beyond the confirmed ones, only the one in flight at the kill (if it was
            # written before the kill).
            assert extra in ([], [publisher.in_flight]), f"{publisher.name}: {extra}"
    surely = set(taker.delivered[: taker.surely_delivered])
    # After a crash which messages had been delivered is not known: every recovered
    # message is marked redelivered ("may have been delivered"), none is missed.
    assert all(redelivered for _body, redelivered, _ in q1 + q0)
    assert all(body in {b for b, _, _ in q1} for body in surely)
    # The durable exchange and its binding are back too.
    channel.confirm_delivery()
    channel.basic_publish("orders", "b", b"after", PERSISTENT, mandatory=True)
    assert [body for body, _, _ in drain(channel, "q1")] == [b"after"]
    connection.close()


def test_transactions_with_persistent_messages_are_recovered(brokers: StoreBrokers) -> None:
    broker = brokers.start()
    connection = connect(broker)
    channel = connection.channel()
    channel.queue_declare("txq", durable=True)
    channel.queue_declare("acked", durable=True)
    channel.tx_select()
    for i in range(3):
        channel.basic_publish("", "acked", b"a%d" % i, PERSISTENT)
    channel.tx_commit()
    for i in range(5):
        channel.basic_publish("", "txq", b"r%d" % i, PERSISTENT)
    channel.tx_rollback()
    other = connection.channel()
    other.tx_select()
    for i in range(3):
        other.basic_publish("", "txq", b"u%d" % i, PERSISTENT)  # never committed
    method, _properties, _body = channel.basic_get("acked", auto_ack=False)
    assert method is not None
    channel.basic_ack(method.delivery_tag)
    for i in range(20):
        channel.basic_publish("", "txq", b"c%d" % i, PERSISTENT)
    channel.tx_commit()  # commit-ok: the 20 are stored
    assert broker.stop(signal.SIGKILL) == -signal.SIGKILL

    broker = brokers.start()
    connection = connect(broker)
    channel = connection.channel()
    bodies = [body for body, _, _ in drain(channel, "txq")]
    assert bodies == [b"c%d" % i for i in range(20)]
    # An ack may be lost in a crash (at-least-once), never a message: a1 and a2 are there.
    assert [body for body, _, _ in drain(channel, "acked")][-2:] == [b"a1", b"a2"]
    connection.close()


def test_store_sync_none_publishes_and_a_crash_keeps_a_prefix(brokers: StoreBrokers) -> None:
    brokers.args = ["--store-sync=none"]
    broker = brokers.start()
    (weakened,) = events(broker, "store_sync_weakened")  # said loudly at every start
    assert weakened["level"] == "warning" and weakened["sync"] == "none"
    assert "before the message is written" in weakened["risk"]
    connection = connect(broker)
    channel = connection.channel()
    channel.confirm_delivery()
    channel.queue_declare("q", durable=True)
    for i in range(300):
        channel.basic_publish("", "q", b"%d" % i, PERSISTENT)
    assert broker.stop(signal.SIGKILL) == -signal.SIGKILL

    broker = brokers.start()
    assert status(broker)["store_status"] == "dirty"
    connection = connect(broker)
    channel = connection.channel()
    channel.confirm_delivery()
    # A crash under none may lose what was not written yet: what is back is a prefix.
    bodies = [body for body, _, _ in drain(channel, "q")]
    assert bodies == [b"%d" % i for i in range(len(bodies))]
    for i in range(100):
        channel.basic_publish("", "q", b"again%d" % i, PERSISTENT)
    connection.close()
    assert broker.stop() == 0

    broker = brokers.start()
    assert status(broker)["store_status"] == "clean"
    connection = connect(broker)
    channel = connection.channel()
    assert [body for body, _, _ in drain(channel, "q")] == [b"again%d" % i for i in range(100)]
    connection.close()


@dataclass
class PipelinedPublisher:
    """One connection keeping up to ``window`` publishes unconfirmed (pika's
    asynchronous adapter, on its own thread): delivery tag n is message ``name:n-1``."""

    url: str
    name: str
    queue: str
    window: int = 200
    #: Every n-th message is transient (0: none): its confirm comes at once, and must never
    #: cover a persistent one published before it that is not on disk yet.
    transient_every: int = 0
    sent: int = 0
    confirmed: set[int] = field(default_factory=set)
    nacked: set[int] = field(default_factory=set)
    error: Any = None
    _unsettled: set[int] = field(default_factory=set)
    _channel: Any = None
    _connection: Any = None

    def run(self, stop: threading.Event) -> None:
        self._stop = stop
        self._connection = pika.SelectConnection(
            pika.URLParameters(self.url),
            on_open_callback=lambda c: c.channel(on_open_callback=self._opened),
            on_open_error_callback=self._closed,
            on_close_callback=self._closed,
        )
        self._connection.ioloop.start()

    def _opened(self, channel: Any) -> None:
        self._channel = channel
        channel.confirm_delivery(self._confirmed, callback=lambda _frame: self._fill())

    def _fill(self) -> None:
        while len(self._unsettled) < self.window and not self._stop.is_set():
            body = f"{self.name}:{self.sent}".encode()
            self._channel.basic_publish("", self.queue, body, self.properties(self.sent))
            self.sent += 1
            self._unsettled.add(self.sent)

    def persistent(self, n: int) -> bool:
        return not self.transient_every or n % self.transient_every != 0

    def properties(self, n: int) -> pika.BasicProperties:
        return PERSISTENT if self.persistent(n) else TRANSIENT

    def _confirmed(self, frame: Any) -> None:
        method = frame.method
        tag = method.delivery_tag
        tags = {t for t in self._unsettled if t <= tag} if method.multiple else {tag}
        self._unsettled -= tags
        settled = self.confirmed if isinstance(method, pika.spec.Basic.Ack) else self.nacked
        settled.update(t - 1 for t in tags)
        self._fill()

    def _closed(self, connection: Any, reason: Any) -> None:
        self.error = reason
        connection.ioloop.stop()


@pytest.mark.parametrize(
    ("sync", "stop_signal"),
    [("fsync", signal.SIGKILL), ("write", signal.SIGKILL), ("fsync", signal.SIGTERM)],
    ids=["fsync-kill", "write-kill", "fsync-clean-stop"],
)
def test_a_stop_during_pipelined_confirmed_publishing_keeps_a_gapless_prefix(
    brokers: StoreBrokers, sync: str, stop_signal: signal.Signals
) -> None:
    """With many publishes in flight, what is back of each publisher is 0..m in order, m
    at least its highest confirmed id and below what it sent: the journal writes in
    order, and no confirm covers a message before the write that holds it (under write:
    the OS has it, which a broker crash does not lose). A clean stop in the middle of it
    (SIGTERM) keeps the same promise and leaves the store clean."""
    brokers.args = [f"--store-sync={sync}"]
    broker = brokers.start()
    assert len(events(broker, "store_sync_weakened")) == (sync != "fsync")
    setup = connect(broker)
    for queue in ("a", "b"):
        setup.channel().queue_declare(queue, durable=True)
    setup.close()
    publishers = [
        PipelinedPublisher(broker.url, f"p{i}", "ab"[i % 2], transient_every=3 * (i // 2))
        for i in range(4)
    ]  # p2 and p3 mix transient messages in
    stop = threading.Event()
    threads = [threading.Thread(target=p.run, args=(stop,), daemon=True) for p in publishers]
    for thread in threads:
        thread.start()
    try:

        def total() -> int:
            return sum(len(p.confirmed) for p in publishers)

        def failed() -> str:
            return f"{[len(p.confirmed) for p in publishers]} {[p.error for p in publishers]}"

        poll_until(lambda: all(len(p.confirmed) >= 500 for p in publishers), 60, failed)
        more = total() + random.randint(0, 1000)
        poll_until(lambda: total() >= more, 30, failed)
        assert broker.stop(stop_signal) == (0 if stop_signal == signal.SIGTERM else -stop_signal)
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
    assert not any(thread.is_alive() for thread in threads)

    broker = brokers.start()
    expected = "clean" if stop_signal == signal.SIGTERM else "dirty"
    assert status(broker)["store_status"] == expected
    connection = connect(broker)
    channel = connection.channel()
    recovered = {**_by_publisher(drain(channel, "a")), **_by_publisher(drain(channel, "b"))}
    connection.close()
    for publisher in publishers:
        assert publisher.nacked == set()
        ids = recovered.get(publisher.name, [])
        assert ids, publisher.name
        # The persistent ones of 0..m (transient ones are never back after a crash)
        prefix = [n for n in range(ids[-1] + 1) if publisher.persistent(n)]
        assert ids == prefix, f"{publisher.name}: not a gapless prefix"
        confirmed = {n for n in publisher.confirmed if publisher.persistent(n)}
        assert max(confirmed) <= ids[-1], f"{publisher.name}: confirmed lost"
        assert ids[-1] < publisher.sent
        if stop_signal == signal.SIGTERM:
            # A clean stop stops reading, writes what it read and confirms it before
            # closing: what is back is exactly what was confirmed (nothing to send twice).
            assert set(ids) == confirmed, f"{publisher.name}: stored but never confirmed"
