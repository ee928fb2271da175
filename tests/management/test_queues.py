"""/api/queues: declare, inspect, list and delete queues; bad names, arguments and bodies."""

from __future__ import annotations

from typing import Any

import pytest
from pamqp import commands

from tests.amqp.helpers import open_client
from tests.management.support import FakeBroker, publish, serve


def test_queue_lifecycle() -> None:
    broker = FakeBroker()

    async def scenario(client: Any) -> None:
        response = await client.put(
            "/api/queues/orders",
            json={"durable": True, "arguments": {"x-max-length": 10, "x-message-ttl": 60000}},
        )
        assert response.status == 201
        created = await response.json()
        assert created["name"] == "orders"
        assert created["durable"] is True
        assert created["auto_delete"] is False
        assert created["exclusive"] is False
        assert created["arguments"] == {"x-max-length": 10, "x-message-ttl": 60000}
        assert broker.vhost.queues["orders"].durable

        # Declaring again with the same properties is 200 and changes nothing.
        again = await client.put(
            "/api/queues/orders",
            json={"durable": True, "arguments": {"x-max-length": 10, "x-message-ttl": 60000}},
        )
        assert again.status == 200

        publish(broker, "", "orders", b"hello")
        one = await client.get("/api/queues/orders")
        assert one.status == 200
        view = await one.json()
        assert view["messages"] == 1
        assert view["bytes"] == 5
        assert view["enqueued_total"] == 1
        for key in (
            "messages_unacked",
            "consumers",
            "delivered_total",
            "acked_total",
            "expired_total",
            "dropped_total",
            "rejected_publishes",
        ):
            assert view[key] == 0, key

        await client.put("/api/queues/alpha")
        listed = await (await client.get("/api/queues")).json()
        assert [q["name"] for q in listed] == ["alpha", "orders"]

        deleted = await client.delete("/api/queues/orders")
        assert deleted.status == 200
        assert await deleted.json() == {"name": "orders", "vhost": "/", "messages_deleted": 1}
        assert "orders" not in broker.vhost.queues
        missing = await client.get("/api/queues/orders")
        assert missing.status == 404
        body = await missing.json()
        assert body["error"] == "not_found"
        assert "no queue 'orders'" in body["reason"]
        assert body["reply_code"] == 404

    serve(broker, scenario)


def test_queue_put_without_body_uses_defaults() -> None:
    broker = FakeBroker()

    async def scenario(client: Any) -> None:
        response = await client.put("/api/queues/plain")
        assert response.status == 201
        body = await response.json()
        assert (body["durable"], body["auto_delete"], body["arguments"]) == (False, False, {})

    serve(broker, scenario)


def test_queue_names_are_percent_decoded() -> None:
    broker = FakeBroker()

    async def scenario(client: Any) -> None:
        response = await client.put("/api/queues/a%2Fb%20%C3%A9")
        assert response.status == 201
        assert (await response.json())["name"] == "a/b é"
        assert (await client.get("/api/queues/a%2Fb%20%C3%A9")).status == 200
        assert (await client.delete("/api/queues/a%2Fb%20%C3%A9")).status == 200

    serve(broker, scenario)


def test_inequivalent_queue_declare_is_400_with_amqp_text() -> None:
    broker = FakeBroker()
    broker.vhost.declare_queue("q", durable=True)

    async def scenario(client: Any) -> None:
        response = await client.put("/api/queues/q", json={"durable": False})
        assert response.status == 400
        body = await response.json()
        assert body["reply_code"] == 406
        assert body["reason"].startswith("PRECONDITION_FAILED - inequivalent arg 'durable'")

        response = await client.put(
            "/api/queues/q", json={"durable": True, "arguments": {"x-max-length": 3}}
        )
        assert response.status == 400
        assert "x-max-length" in (await response.json())["reason"]

    serve(broker, scenario)


@pytest.mark.parametrize(
    ("arguments", "fragment"),
    [
        ({"x-message-ttl": "soon"}, "x-message-ttl"),
        ({"x-max-length": -1}, "x-max-length"),
        ({"x-overflow": "explode"}, "x-overflow"),
        ({"x-dead-letter-routing-key": "k"}, "x-dead-letter-routing-key"),
        ({"x-expires": True}, "x-expires"),
    ],
)
def test_bad_queue_arguments_are_400(arguments: dict[str, Any], fragment: str) -> None:
    broker = FakeBroker()

    async def scenario(client: Any) -> None:
        response = await client.put("/api/queues/q", json={"arguments": arguments})
        assert response.status == 400
        body = await response.json()
        assert body["reply_code"] == 406
        assert fragment in body["reason"]
        assert "q" not in broker.vhost.queues

    serve(broker, scenario)


def test_reserved_queue_name_is_403() -> None:
    broker = FakeBroker()

    async def scenario(client: Any) -> None:
        response = await client.put("/api/queues/amq.mine")
        assert response.status == 403
        body = await response.json()
        assert body["reply_code"] == 403
        assert "reserved prefix" in body["reason"]

    serve(broker, scenario)


def test_delete_queue_preconditions_are_409() -> None:
    broker = FakeBroker()
    broker.vhost.declare_queue("full")
    publish(broker, "", "full")
    client_conn = open_client(broker.context)
    client_conn.send(1, commands.Queue.Declare(queue="busy"))
    client_conn.send(1, commands.Basic.Consume(queue="busy", consumer_tag="c1"))
    client_conn.expect(commands.Basic.ConsumeOk)
    assert broker.vhost.queues["busy"].consumer_count == 1

    async def scenario(client: Any) -> None:
        response = await client.delete("/api/queues/full?if_empty=true")
        assert response.status == 409
        body = await response.json()
        assert body["error"] == "conflict"
        assert "not empty" in body["reason"]
        assert "full" in broker.vhost.queues

        response = await client.delete("/api/queues/busy", params={"if_unused": "1"})
        assert response.status == 409
        assert "in use" in (await response.json())["reason"]

        # The conditions that hold do not stop the delete.
        response = await client.delete("/api/queues/full?if_unused=true&if_empty=false")
        assert response.status == 200
        assert (await response.json())["messages_deleted"] == 1

        response = await client.delete("/api/queues/busy?if_unused=maybe")
        assert response.status == 400
        assert "if_unused" in (await response.json())["reason"]

        response = await client.delete("/api/queues/nowhere")
        assert response.status == 404

    serve(broker, scenario)


@pytest.mark.parametrize(
    ("body", "status", "fragment"),
    [
        (b"{not json", 400, "not valid JSON"),
        (b"[1, 2]", 400, "must be a JSON object, got an array"),
        (b'"durable"', 400, "must be a JSON object, got a string"),
        (b'{"durable": "yes"}', 400, "field 'durable' must be a boolean, got a string"),
        (b'{"auto_delete": 1}', 400, "field 'auto_delete' must be a boolean, got a number"),
        (b'{"arguments": [1]}', 400, "field 'arguments' must be an object, got an array"),
        (b'{"durable": true, "exclusive": true}', 400, "unknown field 'exclusive'"),
        (b'{"arguments": {"x-message-ttl": NaN}}', 400, "not valid JSON"),
        (b"\xff\xfe\x00garbage", 400, "not valid JSON"),
        (b'{"arguments": {"x-big": 1e999}}', 400, "out of range"),
        (b'{"arguments": {"x-big": ' + b"9" * 5000 + b"}}", 400, "not valid JSON"),
        (b"[" * 100000 + b"]" * 100000, 400, "not valid JSON"),
    ],
)
def test_bad_queue_bodies_are_400_naming_the_problem(
    body: bytes, status: int, fragment: str
) -> None:
    broker = FakeBroker()

    async def scenario(client: Any) -> None:
        response = await client.put(
            "/api/queues/q", data=body, headers={"Content-Type": "application/json"}
        )
        assert response.status == status
        assert response.content_type == "application/json"
        reply = await response.json()
        assert fragment in reply["reason"]
        assert "Traceback" not in reply["reason"]
        assert "q" not in broker.vhost.queues

    serve(broker, scenario)


def test_oversized_body_is_413_json() -> None:
    broker = FakeBroker()

    async def scenario(client: Any) -> None:
        body = b'{"arguments": {"x-pad": "' + b"p" * (1024 * 1024) + b'"}}'
        response = await client.put("/api/queues/q", data=body)
        assert response.status == 413
        assert response.content_type == "application/json"
        assert (await response.json())["error"]
        assert "q" not in broker.vhost.queues

    serve(broker, scenario)


def test_too_long_names_are_400() -> None:
    broker = FakeBroker()

    async def scenario(client: Any) -> None:
        response = await client.put("/api/queues/" + "q" * 256)
        assert response.status == 400
        assert "255 bytes" in (await response.json())["reason"]
        response = await client.put("/api/exchanges/" + "e" * 256, json={"type": "direct"})
        assert response.status == 400

    serve(broker, scenario)
