"""RabbitMQ's extensions across a fail-over of a real HA cluster (tests/ha/cluster.py):
what a client set up on the primary works the same on the promoted backup."""

from __future__ import annotations

from pathlib import Path

from tests.ha.cluster import Cluster, http
from tests.ha.failover_clients import connect, drain_get


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
