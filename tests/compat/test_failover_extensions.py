"""RabbitMQ's extensions across a fail-over of a real HA cluster (tests/ha/cluster.py):
what a client set up on the primary works the same on the promoted backup."""

from __future__ import annotations

import time
from pathlib import Path

import pika

from common.polling import poll_until
from tests.ha.cluster import Cluster, http
from tests.ha.failover_clients import connect, connect_failover, drain_get


def test_exchange_bindings_survive_failover(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 2).start()
    try:
        cluster.promote(0, epoch=1)
        cluster.wait_state(1, "ready")
        connection = connect(cluster.ports[0])
        channel = connection.channel()
        channel.exchange_declare("front", "topic")
        channel.exchange_declare("middle", "direct")
        channel.exchange_declare("spare", "fanout")
        channel.queue_declare("orders")
        channel.queue_declare("audit")
        channel.exchange_bind("middle", "front", "order.*")
        channel.exchange_bind("front", "middle", "order.eu")  # a loop
        channel.exchange_bind("spare", "front", "order.*")
        channel.exchange_unbind("spare", "front", "order.*")
        channel.exchange_bind("spare", "middle", "order.eu")
        channel.exchange_bind("amq.fanout", "middle", "order.eu")  # to a built-in: kept too
        channel.queue_bind("orders", "middle", "order.eu")
        channel.queue_bind("audit", "spare")
        connection.close()  # every bind-ok came once the backup had the binding

        cluster.kill(0)
        cluster.promote(1, epoch=2)
        cluster.wait_state(1, "active")
        connection = connect(cluster.ports[1])
        channel = connection.channel()
        channel.confirm_delivery()
        channel.basic_publish("front", "order.eu", b"eu", mandatory=True)
        channel.basic_publish("front", "order.us", b"us")
        channel.basic_publish("spare", "", b"spare")
        connection.close()
        assert drain_get(cluster.ports[1], "orders") == [b"eu"]
        assert drain_get(cluster.ports[1], "audit") == [b"eu", b"spare"]
        bindings = http("GET", cluster.brokers[1].mgmt_port, "/api/bindings")
        from_middle = {
            (b["destination"], b["destination_type"]) for b in bindings if b["source"] == "middle"
        }
        assert from_middle == {
            ("front", "exchange"),
            ("spare", "exchange"),
            ("amq.fanout", "exchange"),
            ("orders", "queue"),
        }
    finally:
        cluster.stop()


def test_priority_queue_order_and_queue_arguments_survive_failover(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 2).start()
    try:
        cluster.promote(0, epoch=1)
        cluster.wait_state(1, "ready")
        connection = connect(cluster.ports[0])
        channel = connection.channel()
        channel.queue_declare("jobs", arguments={"x-max-priority": 5})
        channel.queue_declare("single", arguments={"x-single-active-consumer": True})
        channel.confirm_delivery()  # each confirm: the backup has the message
        for i, priority in enumerate([0, 3, 5, 1, 3, 9, 0]):
            props = pika.BasicProperties(priority=priority)
            channel.basic_publish("", "jobs", f"j{i}-p{priority}".encode(), props)
        # one taken (the highest) and acknowledged before the fail-over
        method, _props, body = channel.basic_get("jobs")
        assert body == b"j2-p5"
        channel.basic_ack(method.delivery_tag)
        for i in range(3):
            channel.basic_publish("", "single", f"s{i}".encode())
        connection.close()
        poll_until(lambda: cluster.queue_messages(1, "jobs") == 6, 10)

        cluster.kill(0)
        cluster.promote(1, epoch=2)
        cluster.wait_state(1, "active")
        # the promoted backup delivers by priority, then arrival, as the primary would have
        assert drain_get(cluster.ports[1], "jobs") == [
            b"j5-p9",
            b"j1-p3",
            b"j4-p3",
            b"j3-p1",
            b"j0-p0",
            b"j6-p0",
        ]
        connection = connect(cluster.ports[1])
        channel = connection.channel()
        got: dict[str, list[bytes]] = {"a": [], "b": []}
        channel.basic_consume("single", lambda c, m, p, b: got["a"].append(b), auto_ack=True)
        channel.basic_consume("single", lambda c, m, p, b: got["b"].append(b), auto_ack=True)
        deadline = time.monotonic() + 10
        while len(got["a"]) < 3 and time.monotonic() < deadline:
            connection.process_data_events(time_limit=0.05)
        assert got == {"a": [b"s0", b"s1", b"s2"], "b": []}  # still a single active consumer
        connection.close()
    finally:
        cluster.stop()


def test_direct_reply_to_on_the_promoted_backup(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 2).start()
    try:
        cluster.promote(0, epoch=1)
        cluster.wait_state(1, "ready")
        connection = connect(cluster.ports[0])
        connection.channel().queue_declare("requests")
        connection.close()
        cluster.kill(0)
        cluster.promote(1, epoch=2)
        cluster.wait_state(1, "active")
        connection = connect_failover(cluster.ports)
        client, server = connection.channel(), connection.channel()
        replies: list[bytes] = []
        client.basic_consume(
            "amq.rabbitmq.reply-to", lambda c, m, p, b: replies.append(b), auto_ack=True
        )
        props = pika.BasicProperties(reply_to="amq.rabbitmq.reply-to")
        client.basic_publish("", "requests", b"ping", props)
        _method, request, body = poll_until(
            lambda: (got := server.basic_get("requests", auto_ack=True))[0] and got, 10
        )
        server.basic_publish("", request.reply_to, body.upper())
        deadline = time.monotonic() + 10
        while not replies and time.monotonic() < deadline:
            connection.process_data_events(time_limit=0.05)
        assert replies == [b"PING"]
        connection.close()
    finally:
        cluster.stop()
