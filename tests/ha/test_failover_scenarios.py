"""Fail-over scenarios end to end: real qpidd clusters, real clients, SIGKILL mid-stream.

Each test starts its own :class:`~tests.ha.cluster.Cluster` in ``tmp_path`` and stops it in
a ``finally``. Clients follow the fail-over URL list the way Qpid clients do: a backup
refuses them (530), a dead broker refuses the TCP connection, so they move on to the next
address, and a publisher re-sends what was not confirmed when its connection dropped.

The invariants are seed 001's: every confirmed message is on the new primary (duplicates
of re-sent unconfirmed messages allowed, and counted); messages acknowledged before the
primary died come back only if their acknowledgement was still in flight; a recovering
primary holds confirms for the backups it expects.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aio_pika
import pika
import pika.exceptions
import pytest
from pamqp import commands

from tests.broker_process import wait_until
from tests.ha.cluster import Cluster, http

#: Publisher confirms a publisher may wait for at once (its replay buffer).
WINDOW = 32


# -- clients ---------------------------------------------------------------------------
def params(ports: list[int]) -> list[pika.ConnectionParameters]:
    """The fail-over URL list."""
    return [
        pika.ConnectionParameters("127.0.0.1", port, connection_attempts=1, socket_timeout=5)
        for port in ports
    ]


def connect(*ports: int) -> pika.BlockingConnection:
    return pika.BlockingConnection(params(list(ports)))


def connect_failover(ports: list[int], timeout: float = 15.0) -> pika.BlockingConnection:
    """Go round the URL list until some broker accepts (the primary)."""

    def attempt() -> pika.BlockingConnection | None:
        try:
            return pika.BlockingConnection(params(ports))
        except pika.exceptions.AMQPConnectionError:
            return None

    connection: pika.BlockingConnection = wait_until(attempt, timeout=timeout, interval=0.05)
    return connection


def publish(port: int, queue: str, bodies: list[bytes], **properties: Any) -> None:
    connection = connect(port)
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        props = pika.BasicProperties(**properties) if properties else None
        for body in bodies:
            channel.basic_publish("", queue, body, properties=props)
    finally:
        connection.close()


def drain_get(port: int, queue: str) -> list[bytes]:
    """Every message of ``queue``, head first, with basic.get (acknowledged)."""
    connection = connect(port)
    try:
        channel = connection.channel()
        bodies: list[bytes] = []
        while True:
            method, _props, body = channel.basic_get(queue, auto_ack=True)
            if method is None:
                return bodies
            bodies.append(body)
    finally:
        connection.close()


def drain_consume(port: int, queue: str, count: int) -> list[bytes]:
    """``count`` messages with a consumer, then check the queue is empty."""
    connection = connect(port)
    try:
        channel = connection.channel()
        channel.basic_qos(prefetch_count=500)
        bodies: list[bytes] = []
        if count:
            for _method, _props, body in channel.consume(
                queue, auto_ack=True, inactivity_timeout=10
            ):
                assert body is not None, f"only {len(bodies)} of {count} messages"
                bodies.append(body)
                if len(bodies) == count:
                    break
            channel.cancel()
        method, _props, _body = channel.basic_get(queue, auto_ack=False)
        assert method is None, "more messages than the management API counted"
        return bodies
    finally:
        connection.close()


def queue_names(cluster: Cluster, i: int) -> set[str]:
    return {q["name"] for q in http("GET", cluster.brokers[i].mgmt_port, "/api/queues")}


def events(cluster: Cluster, i: int, name: str) -> list[dict[str, Any]]:
    return [e for e in cluster.brokers[i].events() if e.get("event") == name]


def wait_members(cluster: Cluster, at: int, ready: int) -> None:
    """Broker ``at`` (a backup) has heard that broker ``ready`` is a ready member."""
    url = f"127.0.0.1:{cluster.ports[ready]}"

    def heard() -> bool:
        return any(
            m.get("url") == url and m.get("state") == "ready" for m in cluster.ha(at)["members"]
        )

    wait_until(heard)


class Publisher(threading.Thread):
    """Publishes ``0, 1, 2...`` with confirms, up to :data:`WINDOW` unconfirmed at once.

    When the connection drops it goes round the URL list until a primary accepts it and
    re-sends every message still unconfirmed (as Qpid clients do), so confirmed messages
    and re-sent ones are known exactly.
    """

    def __init__(self, ports: list[int], queue: str) -> None:
        super().__init__(daemon=True)
        self.urls = [f"amqp://guest:guest@127.0.0.1:{port}/%2F" for port in ports]
        self.queue = queue
        self.confirmed: set[int] = set()
        self.sent = 0  # distinct ids sent: 0 .. sent - 1
        self.resent = 0  # messages sent again after a connection loss
        self.connections = 0
        self.error: BaseException | None = None
        self._stopping = threading.Event()

    def run(self) -> None:
        try:
            asyncio.run(self._publish())
        except BaseException as exc:
            self.error = exc

    def stop_soon(self) -> None:
        """Send nothing new (the thread ends once what was sent is confirmed)."""
        self._stopping.set()

    def finish(self, timeout: float = 30.0) -> None:
        """Stop sending new messages, wait until everything sent is confirmed."""
        self._stopping.set()
        self.join(timeout)
        assert not self.is_alive(), "publisher did not finish"
        assert self.error is None, f"publisher failed: {self.error!r}"
        assert self.confirmed == set(range(self.sent))

    async def _connect(self) -> aio_pika.abc.AbstractConnection:
        deadline = time.monotonic() + 20.0
        while True:
            for url in self.urls:
                try:
                    return await aio_pika.connect(url, timeout=2)
                except Exception:
                    continue
            if time.monotonic() > deadline:
                raise TimeoutError("no broker accepted the publisher")
            await asyncio.sleep(0.05)

    async def _publish(self) -> None:
        resend: list[int] = []
        while resend or not self._stopping.is_set():
            connection = await self._connect()
            self.connections += 1
            in_flight: dict[asyncio.Future[Any], int] = {}
            try:
                channel = await connection.channel(publisher_confirms=True)
                exchange = channel.default_exchange
                while True:
                    while len(in_flight) < WINDOW:
                        if resend:
                            msg_id = resend.pop(0)
                            self.resent += 1
                        elif not self._stopping.is_set():
                            msg_id = self.sent
                            self.sent += 1
                        else:
                            break
                        body = str(msg_id).encode()
                        publishing: asyncio.Future[Any] = asyncio.ensure_future(
                            exchange.publish(
                                aio_pika.Message(body), routing_key=self.queue, timeout=15
                            )
                        )
                        in_flight[publishing] = msg_id
                    if not in_flight:
                        return  # stopping, everything confirmed
                    done, _ = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
                    lost = False
                    for finished in done:
                        msg_id = in_flight.pop(finished)
                        try:
                            confirmation = finished.result()
                        except Exception:
                            lost = True
                            resend.append(msg_id)
                            continue
                        if isinstance(confirmation, commands.Basic.Ack):
                            self.confirmed.add(msg_id)
                        else:
                            resend.append(msg_id)
                    if lost:
                        raise ConnectionError("connection lost while publishing")
            except Exception:
                # Whatever is still in flight is unconfirmed: send it again elsewhere.
                for pending, msg_id in in_flight.items():
                    pending.cancel()
                    resend.append(msg_id)
                resend.sort()
            finally:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(connection.close(), timeout=2)


# -- 1. confirmed messages survive a SIGKILL of the primary -----------------------------
def stream_position(cluster: Cluster, primary: int, backup: int, queue: str) -> dict[str, Any]:
    """The primary's replication position of ``queue`` towards ``backup`` (/api/ha)."""
    url = f"127.0.0.1:{cluster.ports[backup]}"
    for row in cluster.ha(primary)["backups"]:
        if row["url"] == url:
            for position in row["queues"]:
                if position["queue"] == queue:
                    return dict(position)
    return {}


@pytest.mark.parametrize("lagging", [False, True], ids=["in-step", "promoted-backup-lagging"])
def test_every_confirmed_message_survives_primary_sigkill(tmp_path: Path, lagging: bool) -> None:
    # ha-flow-messages=32: one replication batch in flight per queue and backup, so a
    # stopped backup really falls behind instead of buffering everything in its socket.
    cluster = Cluster(tmp_path, 3, "--ha-flow-messages=32").start()
    publisher: Publisher | None = None
    stopped: int | None = None
    try:
        cluster.promote(0, epoch=1)
        cluster.wait_state(1, "ready")
        cluster.wait_state(2, "ready")
        connection = connect(cluster.ports[0])
        connection.channel().queue_declare("orders", durable=True)
        connection.close()
        wait_until(lambda: {"orders"} <= queue_names(cluster, 1) & queue_names(cluster, 2))
        wait_members(cluster, 1, ready=2)
        publisher = Publisher(cluster.ports, "orders")
        publisher.start()
        wait_until(lambda: len(publisher.confirmed) >= 400, timeout=20)
        if lagging:
            # the backup about to be promoted stops reading: the primary must hold the
            # confirms of what it has not acknowledged, while broker 2 gets ahead of it
            proc = cluster.brokers[1].proc
            assert proc is not None
            stopped = proc.pid
            os.kill(stopped, signal.SIGSTOP)

            def diverged() -> bool:
                behind = stream_position(cluster, 0, 1, "orders")
                ahead = stream_position(cluster, 0, 2, "orders")
                return bool(behind and ahead and behind["lag"] >= 5)

            wait_until(diverged)
            behind = stream_position(cluster, 0, 1, "orders")
            ahead = stream_position(cluster, 0, 2, "orders")
            assert ahead["last_sent_id"] > behind["last_sent_id"]
        cluster.kill(0)  # mid-stream: up to WINDOW messages unconfirmed
        confirmed_before = set(publisher.confirmed)
        if stopped is not None:
            os.kill(stopped, signal.SIGCONT)
            stopped = None
        assert cluster.promote(1, epoch=2)["state"] == "recovering"  # expects broker 2
        wait_until(lambda: len(publisher.confirmed) >= len(confirmed_before) + 400, timeout=20)
        publisher.finish()
        cluster.wait_state(1, "active")
        assert publisher.connections >= 2  # it did fail over
        count = cluster.queue_messages(1, "orders")
        # the remaining backup follows the new primary and holds the same messages
        wait_until(lambda: cluster.queue_messages(2, "orders") == count)
        bodies = drain_consume(cluster.ports[1], "orders", count)
        ids = Counter(int(body) for body in bodies)
        # nothing confirmed is lost, old primary's confirms included
        assert confirmed_before <= set(ids)
        assert set(ids) == publisher.confirmed == set(range(publisher.sent))
        duplicates = sum(n - 1 for n in ids.values())
        assert duplicates <= publisher.resent <= 2 * WINDOW
        assert max(ids.values()) <= 2
        wait_until(lambda: cluster.queue_messages(2, "orders") == 0)
    finally:
        if stopped is not None:
            os.kill(stopped, signal.SIGCONT)
        if publisher is not None and publisher.is_alive():
            publisher.stop_soon()
        cluster.stop()


def test_confirmed_messages_survive_a_second_failover_after_backups_diverged(
    tmp_path: Path,
) -> None:
    """Broker 2 holds messages of the dead primary that the new primary never got.

    Their replication ids must not be taken for the new primary's messages: broker 2 has to
    drop them and receive the new, confirmed ones, or a second fail-over loses those.
    """
    cluster = Cluster(tmp_path, 3, "--ha-flow-messages=32").start()
    paused: list[int] = []
    try:
        cluster.promote(0, epoch=1)
        cluster.wait_state(1, "ready")
        cluster.wait_state(2, "ready")
        connection = connect(cluster.ports[0])
        channel = connection.channel()
        channel.queue_declare("q")
        wait_until(lambda: {"q"} <= queue_names(cluster, 1) & queue_names(cluster, 2))
        wait_members(cluster, 1, ready=2)
        pids = [p.pid for p in (cluster.brokers[1].proc, cluster.brokers[2].proc) if p]
        os.kill(pids[0], signal.SIGSTOP)
        paused.append(pids[0])
        for i in range(10):  # unconfirmed: broker 2 gets them all, broker 1 one batch
            channel.basic_publish("", "q", f"old{i}".encode())
            wait_until(lambda i=i: cluster.queue_messages(2, "q") == i + 1)
        os.kill(pids[1], signal.SIGSTOP)
        paused.append(pids[1])
        cluster.kill(0)
        os.kill(pids[0], signal.SIGCONT)
        paused.remove(pids[0])
        assert cluster.promote(1, epoch=2)["state"] == "recovering"  # expects broker 2
        new = [f"new{i}".encode() for i in range(5)]
        failure: list[BaseException] = []

        def publish_new() -> None:
            try:
                publish(cluster.ports[1], "q", new)
            except BaseException as exc:
                failure.append(exc)

        publisher = threading.Thread(target=publish_new, daemon=True)
        publisher.start()
        wait_until(lambda: cluster.ha(1)["held_confirms"] >= 1)  # new0 is on broker 1
        os.kill(pids[1], signal.SIGCONT)  # broker 2 comes back holding old1..old9
        paused.remove(pids[1])
        publisher.join(10)
        assert not publisher.is_alive() and not failure, failure
        cluster.wait_state(1, "active")
        # what broker 1 holds (read without acknowledging: it stays on the queue)
        reader = connect(cluster.ports[1])
        ch = reader.channel()
        held = []
        while (got := ch.basic_get("q", auto_ack=False))[0] is not None:
            held.append(got[2])
        reader.close()
        assert held[-5:] == new and all(b.startswith(b"old") for b in held[:-5])
        wait_until(lambda: cluster.queue_messages(1, "q") == len(held))
        wait_until(lambda: cluster.queue_messages(2, "q") == len(held))
        cluster.kill(1)
        cluster.promote(2, epoch=3)
        cluster.wait_state(2, "active")
        assert drain_get(cluster.ports[2], "q") == held  # no confirmed message lost
    finally:
        for pid in paused:
            os.kill(pid, signal.SIGCONT)
        cluster.stop()


# -- 2. acknowledged messages are not resurrected -----------------------------------------
def test_acknowledged_messages_not_resurrected_after_failover(tmp_path: Path) -> None:
    total, prefetch = 3000, 20
    cluster = Cluster(tmp_path, 2).start()
    try:
        cluster.promote(0, epoch=1)
        cluster.wait_state(1, "ready")
        connection = connect(cluster.ports[0])
        channel = connection.channel()
        channel.queue_declare("work")
        for i in range(total):
            channel.basic_publish("", "work", str(i).encode())
        connection.close()
        wait_until(lambda: cluster.queue_messages(1, "work") == total)

        acked: list[int] = []  # acknowledgements sent (or attempted), in order
        failure: list[BaseException] = []

        def consume() -> None:
            try:
                consumer = connect(cluster.ports[0])
                ch = consumer.channel()
                ch.basic_qos(prefetch_count=prefetch)
                for method, _props, body in ch.consume("work", inactivity_timeout=5):
                    if method is None:
                        return
                    # counted before the call: an ack may reach the broker even when the
                    # call then fails on the dying connection
                    acked.append(int(body))
                    ch.basic_ack(method.delivery_tag)
            except (pika.exceptions.AMQPError, OSError) as exc:
                failure.append(exc)

        consumer = threading.Thread(target=consume, daemon=True)
        consumer.start()
        wait_until(lambda: len(acked) >= 500, timeout=20)
        cluster.kill(0)
        consumer.join(10)
        assert not consumer.is_alive() and failure, "the consumer saw the primary die"
        assert len(acked) < total, "the kill came after the consumer finished"
        cluster.promote(1, epoch=2)
        cluster.wait_state(1, "active")
        bodies = [int(b) for b in drain_get(cluster.ports[1], "work")]
        assert len(bodies) == len(set(bodies))
        left = set(bodies)
        # nothing that was not acknowledged is lost (delivered-unacked ones included)
        assert set(range(total)) - set(acked) <= left
        resurrected = [i for i in acked if i in left]
        # only acks of the last moments: still in flight to the old primary or its backup
        tail = set(acked[-(3 * prefetch) :])
        assert set(resurrected) <= tail, (len(resurrected), len(acked))
        assert len(resurrected) <= 3 * prefetch
        # FIFO: what is left is the tail of the queue, in order
        assert bodies == sorted(bodies)
    finally:
        cluster.stop()


# -- 3. a backup restarted mid-stream catches up exactly ------------------------------------
def test_backup_restarted_mid_stream_catches_up_exactly(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 2).start()
    publisher: Publisher | None = None
    try:
        cluster.promote(0, epoch=1)
        cluster.wait_state(1, "ready")
        connection = connect(cluster.ports[0])
        channel = connection.channel()
        channel.queue_declare("stream", durable=True)
        wait_until(lambda: "stream" in queue_names(cluster, 1))
        publisher = Publisher(cluster.ports[:1], "stream")
        publisher.start()
        wait_until(lambda: len(publisher.confirmed) >= 300, timeout=20)
        cluster.kill(1)
        # consumed while the backup is down: the restarted backup must not get them
        taken = []
        for _ in range(100):
            method, _props, body = channel.basic_get("stream", auto_ack=True)
            assert method is not None
            taken.append(int(body))
        mark = len(publisher.confirmed)
        wait_until(lambda: len(publisher.confirmed) >= mark + 200, timeout=20)  # no backup
        cluster.brokers[1].start()
        cluster.wait_state(1, "ready")
        mark = len(publisher.confirmed)
        wait_until(lambda: len(publisher.confirmed) >= mark + 300, timeout=20)
        for _ in range(100):  # and consumed while it follows again
            method, _props, body = channel.basic_get("stream", auto_ack=True)
            assert method is not None
            taken.append(int(body))
        connection.close()
        publisher.finish()
        assert publisher.connections == 1 and publisher.resent == 0
        assert taken == list(range(200))
        expected = list(range(200, publisher.sent))
        assert cluster.queue_messages(0, "stream") == len(expected)
        wait_until(lambda: cluster.queue_messages(1, "stream") == len(expected))
        copy = cluster.ha(1)["queues"]
        assert [(q["name"], q["messages"], q["caught_up"]) for q in copy] == [
            ("stream", len(expected), True)
        ]
        cluster.kill(0)
        cluster.promote(1, epoch=2)
        cluster.wait_state(1, "active")
        bodies = [int(b) for b in drain_get(cluster.ports[1], "stream")]
        assert bodies == expected  # no duplicate, no loss, in order
    finally:
        if publisher is not None and publisher.is_alive():
            publisher.stop_soon()
        cluster.stop()


# -- 4. TTL and dead-lettering across fail-over --------------------------------------------
def test_ttl_and_dead_lettering_across_failover(tmp_path: Path) -> None:
    ttl_ms = 3000
    cluster = Cluster(tmp_path, 2).start()
    try:
        cluster.promote(0, epoch=1)
        cluster.wait_state(1, "ready")
        connection = connect(cluster.ports[0])
        channel = connection.channel()
        channel.exchange_declare("dlx", "direct", durable=True)
        channel.queue_declare("dlq")
        channel.queue_bind("dlq", "dlx", "dead")
        channel.queue_declare("expired")
        channel.queue_bind("expired", "dlx", "timed-out")
        dl = {"x-dead-letter-exchange": "dlx"}
        expiring = {"x-message-ttl": ttl_ms, **dl, "x-dead-letter-routing-key": "timed-out"}
        channel.queue_declare("ttl", arguments=expiring)
        channel.queue_declare("short", arguments={"x-message-ttl": 300})
        channel.queue_declare("work", arguments={**dl, "x-dead-letter-routing-key": "dead"})
        connection.close()
        # expiry on the primary replicates as dequeues
        publish(cluster.ports[0], "short", [b"s"] * 5)
        wait_until(lambda: cluster.queue_messages(0, "short") == 0, timeout=5)
        wait_until(lambda: cluster.queue_messages(1, "short") == 0, timeout=5)
        published_at = time.monotonic()
        publish(cluster.ports[0], "ttl", [f"t{i}".encode() for i in range(10)])
        publish(cluster.ports[0], "work", [b"w0", b"w1", b"w2"])
        wait_until(lambda: cluster.queue_messages(1, "ttl") == 10)
        wait_until(lambda: cluster.queue_messages(1, "work") == 3)
        cluster.kill(0)
        cluster.promote(1, epoch=2)
        cluster.wait_state(1, "active")
        if time.monotonic() - published_at < ttl_ms / 1000 - 1.0:
            assert cluster.queue_messages(1, "ttl") == 10  # promotion expired nothing early
        # the new primary expires them, at about the original TTL, and dead-letters each once
        wait_until(lambda: cluster.queue_messages(1, "ttl") == 0, timeout=ttl_ms / 1000 + 5)
        expired_after = time.monotonic() - published_at
        assert expired_after >= ttl_ms / 1000 - 0.5
        wait_until(lambda: cluster.queue_messages(1, "expired") == 10)

        connection = connect(cluster.ports[1])
        channel = connection.channel()
        method, _props, body = channel.basic_get("work", auto_ack=False)
        assert body == b"w0"
        channel.basic_nack(method.delivery_tag, requeue=False)
        method, props, body = channel.basic_get("dlq", auto_ack=True)
        assert body == b"w0" and method.exchange == "dlx" and method.routing_key == "dead"
        (death,) = props.headers["x-death"]
        assert death["reason"] == "rejected" and death["queue"] == "work"
        assert death["count"] == 1 and death["routing-keys"] == ["work"]
        assert props.headers["x-first-death-reason"] == "rejected"
        assert channel.basic_get("dlq", auto_ack=True)[0] is None  # dead-lettered once
        method, props, body = channel.basic_get("expired", auto_ack=True)
        assert body == b"t0" and method.routing_key == "timed-out"
        assert props.headers["x-death"][0]["reason"] == "expired"
        assert cluster.queue_messages(1, "work") == 2
        connection.close()
    finally:
        cluster.stop()


# -- 5. exclusive and auto-delete queues --------------------------------------------------
def test_exclusive_and_auto_delete_queues(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 2).start()
    try:
        cluster.promote(0, epoch=1)
        cluster.wait_state(1, "ready")
        owner = connect(cluster.ports[0])
        channel = owner.channel()
        channel.queue_declare("mine", exclusive=True)
        channel.basic_publish("", "mine", b"private")
        channel.queue_declare("ad", auto_delete=True)
        tag = channel.basic_consume("ad", lambda *args: None)
        # like Qpid, exclusive and auto-delete queues are replicated (queue_level's rule);
        # the replicating subscriptions do not count as consumers nor break exclusivity
        wait_until(lambda: {"mine", "ad"} <= queue_names(cluster, 1))
        wait_until(lambda: cluster.queue_messages(1, "mine") == 1)
        other = connect(cluster.ports[0])
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as locked:
            other.channel().queue_declare("mine", exclusive=True)
        assert locked.value.reply_code == 405
        other.close()
        # the auto-delete queue goes when its consumer leaves, on the backup too
        channel.basic_cancel(tag)
        wait_until(lambda: "ad" not in queue_names(cluster, 0))
        wait_until(lambda: "ad" not in queue_names(cluster, 1))
        # an auto-delete queue whose consumer dies with the primary
        channel.queue_declare("ad2", auto_delete=True)
        channel.basic_consume("ad2", lambda *args: None)
        wait_until(lambda: "ad2" in queue_names(cluster, 1))

        cluster.kill(0)  # the owner's connection dies with the primary
        cluster.promote(1, epoch=2)
        cluster.wait_state(1, "active")
        client = connect_failover(cluster.ports)
        channel = client.channel()
        # no orphan exclusive queue blocks the client that declares it again
        declared = channel.queue_declare("mine", exclusive=True)
        assert declared.method.queue == "mine"
        channel.basic_publish("", "mine", b"again")
        _method, _props, body = channel.basic_get("mine", auto_ack=True)
        assert body == b"again"
        other = connect(cluster.ports[1])
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as locked:
            other.channel().queue_declare("mine", exclusive=True)
        assert locked.value.reply_code == 405  # it is the new client's now
        other.close()
        # the auto-delete queue can be consumed again and goes when its consumer leaves
        channel.queue_declare("ad2", auto_delete=True)
        tag = channel.basic_consume("ad2", lambda *args: None)
        channel.basic_cancel(tag)
        wait_until(lambda: "ad2" not in queue_names(cluster, 1))
        client.close()
        wait_until(lambda: "mine" not in queue_names(cluster, 1))  # exclusive: gone with it
    finally:
        cluster.stop()


# -- 6. fail-over of a cluster with no queues ------------------------------------------------
def test_empty_cluster_fails_over(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 3).start()
    try:
        cluster.promote(0, epoch=1)
        cluster.wait_state(1, "ready")
        cluster.wait_state(2, "ready")
        wait_members(cluster, 1, ready=2)
        assert cluster.ha(1)["queues"] == [] and queue_names(cluster, 1) == set()
        cluster.kill(0)
        assert cluster.promote(1, epoch=2)["state"] == "recovering"  # expects broker 2
        cluster.wait_state(2, "ready")
        cluster.wait_state(1, "active", timeout=4.0)  # nothing to catch up: before 5 s
        client = connect_failover(cluster.ports)
        channel = client.channel()
        channel.queue_declare("fresh")
        channel.confirm_delivery()
        channel.basic_publish("", "fresh", b"hello")
        wait_until(lambda: cluster.queue_messages(2, "fresh") == 1)
        _method, _props, body = channel.basic_get("fresh", auto_ack=True)
        assert body == b"hello"
        client.close()
        wait_until(lambda: cluster.queue_messages(2, "fresh") == 0)
    finally:
        cluster.stop()


# -- 7. confirms held while the new primary is recovering -------------------------------------
def test_confirm_held_until_expected_backup_is_ready(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 3).start()
    stopped: int | None = None
    try:
        cluster.promote(0, epoch=1)
        cluster.wait_state(1, "ready")
        cluster.wait_state(2, "ready")
        connection = connect(cluster.ports[0])
        connection.channel().queue_declare("q")
        connection.close()
        wait_until(lambda: "q" in queue_names(cluster, 1) and "q" in queue_names(cluster, 2))
        cluster.wait_state(2, "ready")
        wait_members(cluster, 1, ready=2)
        proc = cluster.brokers[2].proc
        assert proc is not None
        stopped = proc.pid
        os.kill(stopped, signal.SIGSTOP)
        cluster.kill(0)
        promoted_at = time.monotonic()
        answer = cluster.promote(1, epoch=2)
        assert answer["state"] == "recovering"

        confirmed_at: list[float] = []
        failure: list[BaseException] = []

        def publish_one() -> None:
            try:
                client = connect(cluster.ports[1])  # clients may connect while recovering
                ch = client.channel()
                ch.confirm_delivery()
                ch.basic_publish("", "q", b"held")
                confirmed_at.append(time.monotonic())
                client.close()
            except BaseException as exc:
                failure.append(exc)

        publisher = threading.Thread(target=publish_one, daemon=True)
        publisher.start()
        # the confirm is held for the expected, silent backup
        wait_until(lambda: cluster.ha(1)["held_confirms"] == 1)
        assert cluster.state(1) == "recovering" and not confirmed_at and not failure
        assert cluster.queue_messages(1, "q") == 1
        resumed_at = time.monotonic()
        os.kill(stopped, signal.SIGCONT)
        stopped = None
        publisher.join(10)
        assert not failure and confirmed_at, failure
        assert confirmed_at[0] > resumed_at  # released by backup 2 catching up...
        assert confirmed_at[0] - promoted_at < 5.0  # ...not by ha-backup-timeout
        cluster.wait_state(1, "active")
        (active,) = [e for e in events(cluster, 1, "ha_state_changed") if e["new"] == "active"]
        assert active["old"] == "recovering" and active.get("dropped") == []
        assert {m["state"] for m in cluster.ha(1)["members"]} == {"active", "ready"}
        assert cluster.queue_messages(2, "q") == 1
        assert cluster.ha(1)["held_confirms"] == 0
    finally:
        if stopped is not None:
            os.kill(stopped, signal.SIGCONT)
        cluster.stop()


# -- 8. fencing: a backup that has seen a newer epoch never follows an older primary ------
def test_backup_refuses_primary_with_older_epoch(tmp_path: Path) -> None:
    """Broker 1 remembers epoch 3; broker 0 forgot it (empty data dir) and is promoted with 1.

    Three layers keep broker 1 from following it: a joining broker is not promoted while
    another broker is beyond joining (409); once promoted anyway (broker 1 down), the backup
    link announces epoch 3 and the stale primary fences itself at admission (``ha_fenced``,
    process exits), before the backup's own check (``ha_primary_refused``) is ever reached.
    """
    cluster = Cluster(tmp_path, 2).start()
    try:
        cluster.promote(0, epoch=3)
        cluster.wait_state(1, "ready")
        assert cluster.ha(1)["epoch"] == 3
        cluster.brokers[0].stop()
        # broker 0 comes back with no memory of epoch 3
        shutil.rmtree(tmp_path / "b0" / "data")
        cluster.brokers[0].start()
        # while broker 1 is running (ready), a joining broker may not be promoted at all
        refused = cluster.promote(0, epoch=1)
        assert refused.get("http_status") == 409 and "beyond joining" in refused["reason"]
        cluster.brokers[1].stop()
        answer = cluster.promote(0, epoch=1)  # alone now: promoted with the stale epoch
        assert answer["epoch"] == 1
        cluster.wait_state(0, "active")
        log_mark = len(cluster.brokers[1].events())
        cluster.brokers[1].start()  # its data dir remembers epoch 3
        assert cluster.ha(1)["epoch"] == 3
        # the stale primary learns of epoch 3 from the backup's link and stops serving
        wait_until(lambda: not cluster.brokers[0].alive(), timeout=10)
        assert events(cluster, 0, "ha_fenced")
        fenced = events(cluster, 0, "ha_fenced")[0]
        assert "epoch 3" in fenced["reason"]
        later = cluster.brokers[1].events()[log_mark:]
        states = [e["new"] for e in later if e.get("event") == "ha_state_changed"]
        assert "catch-up" not in states and "ready" not in states
        assert not [e for e in later if e.get("event") == "ha_link_up"]
        assert cluster.state(1) == "joining"
    finally:
        cluster.stop()
