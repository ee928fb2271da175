"""Definitions and the cluster's users across a fail-over (issue 30): a RabbitMQ 3.10.8
definitions file imported on the primary (a user with RabbitMQ's salted SHA-256 hash, a
vhost, its permission, queues, exchanges and bindings) and a user made with
``PUT /api/users`` are on the backup, and after the primary is killed the new primary logs
both in (AMQP and the management API) and routes through the imported bindings."""

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

RABBITMQ_FILE = Path(__file__).parent.parent / "management" / "data"
RABBITMQ_FILE = RABBITMQ_FILE / "rabbitmq-3.10.8-definitions.json"


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


def test_imported_and_made_users_log_in_on_the_new_primary(pair: Cluster) -> None:
    pair.promote(0, epoch=1)
    pair.wait_state(1, "ready")
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
    }
    assert len(answer["ignored"]) == 3 and len(answer["skipped"]) == 2  # guest is our own
    made = http("PUT", primary, "/api/users/ops", {"password": "ops-pw", "tags": "monitoring"})
    assert made["source"] == "cluster", made
    assert http("PUT", primary, "/api/permissions/%2F/ops", {
        "configure": "", "write": ".*", "read": ".*"})["user"] == "ops"  # fmt: skip
    assert http("PUT", backup, "/api/users/other", {"password": "x"})["http_status"] == 409
    # the answers came after the backup had them: no wait needed, but poll the fact
    poll_until(lambda: users(pair, 1) == ["guest", "ops", "shopkeeper"], 10, "users on b1")

    pair.kill(0)
    pair.promote(1, epoch=2)
    pair.wait_state(1, "active")
    new = pair.ports[1]
    params = pika.ConnectionParameters(
        "127.0.0.1", new, "shop", pika.PlainCredentials("shopkeeper", "test12")
    )
    connection = pika.BlockingConnection(params)
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.basic_publish("shop.events", "order.new", b"o1")
        ok = channel.queue_declare("orders", durable=True, passive=True, arguments={})
        assert ok.method.message_count == 1  # the queue binding
        assert channel.queue_declare("audit", passive=True).method.message_count == 1  # e2e
    finally:
        connection.close()
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError):  # no permission in /
        pika.BlockingConnection(
            pika.ConnectionParameters(
                "127.0.0.1", new, "/", pika.PlainCredentials("shopkeeper", "test12")
            )
        )
    ops = pika.BlockingConnection(
        pika.ConnectionParameters("127.0.0.1", new, "/", pika.PlainCredentials("ops", "ops-pw"))
    )
    ops.close()
    mgmt = pair.brokers[1].mgmt_port
    vhosts = get_as(mgmt, "/api/vhosts", "ops", "ops-pw")  # a monitoring user's login
    assert [v["name"] for v in vhosts] == ["/", "shop"]
    exported = get_as(mgmt, "/api/definitions", "shopkeeper", "test12")
    assert [u["name"] for u in exported["users"]] == ["ops", "shopkeeper"]
    assert {q["name"] for q in exported["queues"] if q["vhost"] == "shop"} == {"orders", "audit"}
    assert len([b for b in exported["bindings"] if b["vhost"] == "shop"]) == 3
