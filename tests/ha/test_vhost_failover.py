"""Virtual hosts, users and definitions across a fail-over, with real clients: a vhost made
on the primary, its durable queue (named as a queue of ``/``) and confirmed persistent
messages are on the new primary after the old one is killed; a vhost deleted before the
fail-over stays deleted. A RabbitMQ 3.10.8 definitions file imported on the primary (a user
with RabbitMQ's salted SHA-256 hash, a vhost, its permission, queues, exchanges and
bindings) and a user made with ``PUT /api/users`` are on the backup (issue 30), and the new
primary logs both in (AMQP and the management API) and routes through the imported
bindings, and through a client's binding to ``amq.topic``; a vhost's max-queues set on the
old primary holds on the new one. One pair for both: its start and
its fail-over are the slow part."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pika
import pika.exceptions
import pytest

from common.polling import poll_until
from tests.ha.cluster import Cluster, http

PERSISTENT = pika.BasicProperties(delivery_mode=2)
RABBITMQ_FILE = (
    Path(__file__).parent.parent / "management" / "data" / "rabbitmq-3.10.8-definitions.json"
)


def post_file(port: int, path: str, body: bytes) -> tuple[int, Any]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method="POST")
    request.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=20) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


def get_as(port: int, path: str, user: str, password: str) -> Any:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}")
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    request.add_header("Authorization", "Basic " + token)
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


def users(cluster: Cluster, i: int) -> list[str]:
    return [u["name"] for u in http("GET", cluster.brokers[i].mgmt_port, "/api/users")]


def import_definitions(pair: Cluster) -> None:
    """The RabbitMQ file and a user made through the API, on the primary (and the backup)."""
    primary, backup = pair.brokers[0].mgmt_port, pair.brokers[1].mgmt_port
    status, refused = post_file(backup, "/api/definitions", RABBITMQ_FILE.read_bytes())
    assert status == 409, refused  # imports go to the primary
    status, answer = post_file(primary, "/api/definitions", RABBITMQ_FILE.read_bytes())
    assert status == 200, answer
    assert answer["imported"] == {
        "vhosts": 2,
        "users": 1,
        "permissions": 1,
        "exchanges": 2,
        "queues": 2,
        "bindings": 3,
        "limits": 0,
    }
    assert len(answer["ignored"]) == 3 and len(answer["skipped"]) == 2  # guest is our own
    made = http("PUT", primary, "/api/users/ops", {"password": "ops-pw", "tags": "monitoring"})
    assert made["source"] == "cluster", made
    rules = {"configure": "", "write": ".*", "read": ".*"}
    assert http("PUT", primary, "/api/permissions/%2F/ops", rules)["user"] == "ops"
    assert http("PUT", backup, "/api/users/other", {"password": "x"})["http_status"] == 409
    # the answers came after the backup had them: no wait needed, but poll the fact
    poll_until(lambda: users(pair, 1) == ["guest", "ops", "shopkeeper"], 10, "users on b1")


def imported_users_log_in(pair: Cluster) -> None:
    """On the new primary (broker 1): the imported user in its vhost, through the imported
    bindings; not in ``/``; the user made through the API; both on the management API."""
    new = pair.ports[1]
    credentials = pika.PlainCredentials("shopkeeper", "test12")
    connection = pika.BlockingConnection(
        pika.ConnectionParameters("127.0.0.1", new, "shop", credentials)
    )
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.basic_publish("shop.events", "order.new", b"o1")
        ok = channel.queue_declare("orders", durable=True, passive=True)
        assert ok.method.message_count == 1  # the queue binding
        assert channel.queue_declare("audit", passive=True).method.message_count == 1  # e2e
    finally:
        connection.close()
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError):  # no permission in /
        pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", new, "/", credentials))
    ops = pika.PlainCredentials("ops", "ops-pw")
    pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", new, "/", ops)).close()
    mgmt = pair.brokers[1].mgmt_port
    vhosts = get_as(mgmt, "/api/vhosts", "ops", "ops-pw")  # a monitoring user's login
    assert [v["name"] for v in vhosts] == ["/", "shop", "tenant"]
    exported = get_as(mgmt, "/api/definitions", "shopkeeper", "test12")
    assert [u["name"] for u in exported["users"]] == ["shopkeeper"]  # RabbitMQ's SHA-256
    assert [u["name"] for u in exported["qpidd_only"]["users"]] == ["ops"]  # made here: scrypt
    assert {q["name"] for q in exported["queues"] if q["vhost"] == "shop"} == {"orders", "audit"}
    assert len([b for b in exported["bindings"] if b["vhost"] == "shop"]) == 3


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


def standard_bindings(cluster: Cluster, i: int) -> list[tuple[str, str, str]]:
    """Broker i's bindings in ``/`` on the ``amq.*`` exchanges (the default one's none)."""
    rows = http("GET", cluster.brokers[i].mgmt_port, "/api/bindings")
    return sorted(
        (b["source"], b["destination"], b["routing_key"])
        for b in rows
        if b["vhost"] == "/" and (b["source"].startswith("amq.") or b["source"] == "")
    )


def routed_by_amq_topic(pair: Cluster) -> None:
    """On the new primary, a message published to amq.topic reaches the queue bound there
    on the old one (issue 30: Qpid's rule dropped such bindings at a fail-over)."""
    connection = open_vhost(pair.ports, "/")
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.basic_publish(
            "amq.topic", "jobs.late", b"via amq.topic", PERSISTENT, mandatory=True
        )
        assert channel.queue_declare("jobs", durable=True, passive=True).method.message_count == 2
    finally:
        connection.close()


def test_a_client_of_a_vhost_finds_its_queue_and_messages_and_users_on_the_new_primary(
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
    channel.queue_bind("jobs", "amq.topic", "jobs.#")  # a standard exchange: replicated
    channel.basic_publish("", "jobs", b"default", PERSISTENT)
    connection.close()
    assert http("DELETE", primary, "/api/vhosts/gone")["connections_closed"] == 0
    limit = {"value": 1}  # tenant holds its one queue: a new one is refused
    assert http("PUT", primary, "/api/vhost-limits/tenant/max-queues", limit)["value"] == 1
    on_backup = http("PUT", pair.brokers[1].mgmt_port, "/api/vhost-limits/tenant/max-queues", limit)
    assert on_backup["http_status"] == 409
    import_definitions(pair)
    poll_until(lambda: vhosts(pair, 1) == ["/", "shop", "tenant"], 10, "vhosts on the backup")
    poll_until(lambda: messages(pair, 1, "tenant", "jobs") == 5, 10, "tenant's jobs copied")
    poll_until(lambda: messages(pair, 1, "/", "jobs") == 1, 10, "/'s jobs copied")
    assert standard_bindings(pair, 1) == [("amq.topic", "jobs", "jobs.#")]

    pair.kill(0)
    pair.promote(1, epoch=2)
    pair.wait_state(1, "active")
    connection = open_vhost(pair.ports, "tenant")
    try:
        channel = connection.channel()
        assert channel.queue_declare("jobs", durable=True, passive=True).method.message_count == 5
        got = [channel.basic_get("jobs", auto_ack=True)[2] for _ in range(5)]
        assert got == [f"tenant {n}".encode() for n in range(5)]
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as over:  # the limit held
            channel.queue_declare("more", durable=True)
        assert over.value.reply_code == 406 and "queue limit in vhost 'tenant' (1)" in str(
            over.value
        )
    finally:
        connection.close()
    assert messages(pair, 1, "/", "jobs") == 1
    routed_by_amq_topic(pair)
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError):
        pika.BlockingConnection(
            pika.ConnectionParameters("127.0.0.1", pair.ports[1], virtual_host="gone")
        )
    imported_users_log_in(pair)
