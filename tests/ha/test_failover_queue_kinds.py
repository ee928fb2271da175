"""Queue kinds across fail-over: TTL and dead-lettering, exclusive and auto-delete, none at all."""

from __future__ import annotations

import time
from pathlib import Path

import pika
import pika.exceptions
import pytest

from common.polling import poll_until
from tests.ha.cluster import Cluster
from tests.ha.failover_clients import connect, connect_failover, publish, queue_names, wait_members


# -- TTL and dead-lettering across fail-over --------------------------------------------
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
        poll_until(lambda: cluster.queue_messages(0, "short") == 0, 5)
        poll_until(lambda: cluster.queue_messages(1, "short") == 0, 5)
        published_at = time.monotonic()
        publish(cluster.ports[0], "ttl", [f"t{i}".encode() for i in range(10)])
        publish(cluster.ports[0], "work", [b"w0", b"w1", b"w2"])
        poll_until(lambda: cluster.queue_messages(1, "ttl") == 10, 10)
        poll_until(lambda: cluster.queue_messages(1, "work") == 3, 10)
        cluster.kill(0)
        cluster.promote(1, epoch=2)
        cluster.wait_state(1, "active")
        if time.monotonic() - published_at < ttl_ms / 1000 - 1.0:
            assert cluster.queue_messages(1, "ttl") == 10  # promotion expired nothing early
        # the new primary expires them, at about the original TTL, and dead-letters each once
        poll_until(lambda: cluster.queue_messages(1, "ttl") == 0, ttl_ms / 1000 + 5)
        expired_after = time.monotonic() - published_at
        assert expired_after >= ttl_ms / 1000 - 0.5
        poll_until(lambda: cluster.queue_messages(1, "expired") == 10, 10)

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


# -- exclusive and auto-delete queues --------------------------------------------------
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
        poll_until(lambda: {"mine", "ad"} <= queue_names(cluster, 1), 10)
        poll_until(lambda: cluster.queue_messages(1, "mine") == 1, 10)
        other = connect(cluster.ports[0])
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as locked:
            other.channel().queue_declare("mine", exclusive=True)
        assert locked.value.reply_code == 405
        other.close()
        # the auto-delete queue goes when its consumer leaves, on the backup too
        channel.basic_cancel(tag)
        poll_until(lambda: "ad" not in queue_names(cluster, 0), 10)
        poll_until(lambda: "ad" not in queue_names(cluster, 1), 10)
        # an auto-delete queue whose consumer dies with the primary
        channel.queue_declare("ad2", auto_delete=True)
        channel.basic_consume("ad2", lambda *args: None)
        poll_until(lambda: "ad2" in queue_names(cluster, 1), 10)

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
        poll_until(lambda: "ad2" not in queue_names(cluster, 1), 10)
        client.close()
        poll_until(lambda: "mine" not in queue_names(cluster, 1), 10)  # exclusive: gone with it
    finally:
        cluster.stop()


# -- fail-over of a cluster with no queues ------------------------------------------------
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
        poll_until(lambda: cluster.queue_messages(2, "fresh") == 1, 10)
        _method, _props, body = channel.basic_get("fresh", auto_ack=True)
        assert body == b"hello"
        client.close()
        poll_until(lambda: cluster.queue_messages(2, "fresh") == 0, 10)
    finally:
        cluster.stop()
