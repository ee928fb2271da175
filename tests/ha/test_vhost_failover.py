"""Virtual hosts across a fail-over, with a real client: a vhost made on the primary, its
durable queue (named as a queue of ``/``) and confirmed persistent messages are on the new
primary after the old one is killed; a vhost deleted before the fail-over stays deleted."""

from __future__ import annotations

import pika
import pika.exceptions
import pytest

from common.polling import poll_until
from tests.ha.cluster import Cluster, http

PERSISTENT = pika.BasicProperties(delivery_mode=2)


def open_vhost(ports: list[int], vhost: str) -> pika.BlockingConnection:
    """Go round the URL list until some broker (the primary) accepts a connection to vhost."""
    params = [
        pika.ConnectionParameters(
            "127.0.0.1", port, virtual_host=vhost, connection_attempts=1, socket_timeout=5
        )
        for port in ports
    ]

    def attempt() -> pika.BlockingConnection | None:
        try:
            return pika.BlockingConnection(params)
        except (pika.exceptions.AMQPConnectionError, ValueError):
            # ValueError: pika's word for a socket reset between the TCP connect and its
            # getpeername(), as when a broker is SIGKILLed with this connection accepted
            return None

    connection: pika.BlockingConnection = poll_until(attempt, 15, interval=0.05)
    return connection


def messages(cluster: Cluster, i: int, vhost: str, queue: str) -> int:
    path = f"/api/queues/{'%2F' if vhost == '/' else vhost}/{queue}"
    return int(http("GET", cluster.brokers[i].mgmt_port, path).get("messages", -1))


def vhosts(cluster: Cluster, i: int) -> list[str]:
    return [v["name"] for v in http("GET", cluster.brokers[i].mgmt_port, "/api/vhosts")]


def test_a_client_of_a_vhost_finds_its_queue_and_messages_on_the_new_primary(
    pair: Cluster,
) -> None:
    pair.promote(0, epoch=1)
    pair.wait_state(1, "ready")
    primary = pair.brokers[0].mgmt_port
    assert http("PUT", primary, "/api/vhosts/tenant")["name"] == "tenant"
    assert http("PUT", primary, "/api/vhosts/gone")["name"] == "gone"
    refused = http("PUT", pair.brokers[1].mgmt_port, "/api/vhosts/other")
    assert refused["http_status"] == 409  # changes go to the primary
    connection = open_vhost(pair.ports, "tenant")
    channel = connection.channel()
    channel.confirm_delivery()
    channel.queue_declare("jobs", durable=True)
    for n in range(5):
        channel.basic_publish("", "jobs", f"tenant {n}".encode(), PERSISTENT)
    connection.close()
    connection = open_vhost(pair.ports, "/")
    channel = connection.channel()
    channel.confirm_delivery()
    channel.queue_declare("jobs", durable=True)
    channel.basic_publish("", "jobs", b"default", PERSISTENT)
    connection.close()
    assert http("DELETE", primary, "/api/vhosts/gone")["connections_closed"] == 0
    poll_until(lambda: vhosts(pair, 1) == ["/", "tenant"], 10, "the vhosts on the backup")
    poll_until(lambda: messages(pair, 1, "tenant", "jobs") == 5, 10, "tenant's jobs copied")
    poll_until(lambda: messages(pair, 1, "/", "jobs") == 1, 10, "/'s jobs copied")

    pair.kill(0)
    pair.promote(1, epoch=2)
    pair.wait_state(1, "active")
    connection = open_vhost(pair.ports, "tenant")
    try:
        channel = connection.channel()
        assert channel.queue_declare("jobs", durable=True, passive=True).method.message_count == 5
        got = [channel.basic_get("jobs", auto_ack=True)[2] for _ in range(5)]
        assert got == [f"tenant {n}".encode() for n in range(5)]
    finally:
        connection.close()
    assert messages(pair, 1, "/", "jobs") == 1
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError):
        pika.BlockingConnection(
            pika.ConnectionParameters("127.0.0.1", pair.ports[1], virtual_host="gone")
        )
