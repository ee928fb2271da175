"""Consumed messages across fail-over: acknowledged ones stay gone, a backup catches up."""

from __future__ import annotations

import threading
from pathlib import Path

import pika
import pika.exceptions

from common.polling import poll_until
from tests.ha.cluster import Cluster
from tests.ha.failover_clients import Publisher, connect, drain_get, queue_names


# -- acknowledged messages are not resurrected -----------------------------------------
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
        poll_until(lambda: cluster.queue_messages(1, "work") == total, 10)

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
        poll_until(lambda: len(acked) >= 500, 20)
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


# -- a backup restarted mid-stream catches up exactly ------------------------------------
def test_backup_restarted_mid_stream_catches_up_exactly(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 2).start()
    publisher: Publisher | None = None
    try:
        cluster.promote(0, epoch=1)
        cluster.wait_state(1, "ready")
        connection = connect(cluster.ports[0])
        channel = connection.channel()
        channel.queue_declare("stream", durable=True)
        poll_until(lambda: "stream" in queue_names(cluster, 1), 10)
        publisher = Publisher(cluster.ports[:1], "stream")
        publisher.start()
        poll_until(lambda: len(publisher.confirmed) >= 300, 20)
        cluster.kill(1)
        cluster.commit_in_sync(0)  # the cluster manager removes it from the in-sync set
        # consumed while the backup is down: the restarted backup must not get them
        taken = []
        for _ in range(100):
            method, _props, body = channel.basic_get("stream", auto_ack=True)
            assert method is not None
            taken.append(int(body))
        mark = len(publisher.confirmed)
        poll_until(lambda: len(publisher.confirmed) >= mark + 200, 20)  # no backup
        cluster.brokers[1].start()
        cluster.wait_state(1, "ready")
        mark = len(publisher.confirmed)
        poll_until(lambda: len(publisher.confirmed) >= mark + 300, 20)
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
        poll_until(lambda: cluster.queue_messages(1, "stream") == len(expected), 10)
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
