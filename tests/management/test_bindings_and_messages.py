"""Bindings added and removed through the API (RabbitMQ's paths), a queue's bindings, a
message published with properties and headers, and get with RabbitMQ's ack modes."""

from __future__ import annotations

from typing import Any

from broker.management.views import properties_key
from tests.management.support import FakeBroker, publish, serve


def test_properties_key_is_rabbitmqs_shape() -> None:
    assert properties_key("", {}) == "~"
    assert properties_key("a.#", {}) == "a.#"
    keyed = properties_key("k", {"x-match": "all", "h": 1})
    assert keyed.startswith("k~") and len(keyed) == 12
    assert keyed == properties_key("k", {"h": 1, "x-match": "all"})  # order does not count
    assert keyed != properties_key("k", {"x-match": "any", "h": 1})


def test_add_list_and_remove_bindings() -> None:
    broker = FakeBroker()
    vhost = broker.vhost
    vhost.declare_queue("orders")
    vhost.declare_exchange("events", "topic")

    async def scenario(client: Any) -> None:
        made = await client.post(
            "/api/bindings/%2F/e/events/q/orders", json={"routing_key": "order.*"}
        )
        assert made.status == 201, await made.text()
        assert made.headers["Location"] == "/api/bindings/%2F/e/events/q/orders/order.%2A"
        headers = {"x-match": "all", "kind": "big"}
        both = await client.post(
            "/api/bindings/%2F/e/amq.headers/q/orders",
            json={"routing_key": "", "arguments": headers},
        )
        assert both.status == 201
        e2e = await client.post("/api/bindings/%2F/e/amq.topic/e/events", json={})
        assert e2e.status == 201 and (await e2e.json())["destination_type"] == "exchange"
        listed = await (await client.get("/api/queues/%2F/orders/bindings")).json()
        assert [(b["source"], b["routing_key"]) for b in listed] == [
            ("", "orders"),  # the default exchange's, as RabbitMQ lists it
            ("amq.headers", ""),
            ("events", "order.*"),
        ]
        # removed by the properties_key the list shows
        key = listed[1]["properties_key"]
        assert key == properties_key("", headers)
        gone = await client.delete(f"/api/bindings/%2F/e/amq.headers/q/orders/{key}")
        assert gone.status == 204
        again = await client.delete(f"/api/bindings/%2F/e/amq.headers/q/orders/{key}")
        assert again.status == 404 and "no binding" in (await again.json())["reason"]
        assert (await client.delete("/api/bindings/%2F/e/events/q/orders/order.%2A")).status == 204
        assert (await client.delete("/api/bindings/%2F/e/amq.topic/e/events/~")).status == 204
        assert vhost.bindings() == []
        # bad input: one clear error each
        default = await client.post("/api/bindings/%2F/e/amq.default/q/orders", json={})
        assert default.status == 403 and "default exchange" in (await default.json())["reason"]
        missing = await client.post("/api/bindings/%2F/e/events/q/nope", json={})
        assert missing.status == 404
        no_vhost = await client.post("/api/bindings/nowhere/e/events/q/orders", json={})
        assert no_vhost.status == 404 and "no vhost" in (await no_vhost.json())["reason"]
        bad = await client.post("/api/bindings/%2F/e/events/q/orders", json={"key": "x"})
        assert bad.status == 400 and "unknown field 'key'" in (await bad.json())["reason"]

    serve(broker, scenario)


def test_publish_with_properties_then_get_with_each_ack_mode() -> None:
    broker = FakeBroker()
    vhost = broker.vhost
    vhost.declare_queue("q")

    async def scenario(client: Any) -> None:
        message = {
            "routing_key": "q",
            "payload": "aGk=",
            "payload_encoding": "base64",
            "properties": {
                "delivery_mode": 2,
                "content_type": "text/plain",
                "type": "greeting",
                "headers": {"h1": "v1", "n": 3, "nested": {"a": [1, True]}},
            },
        }
        sent = await client.post("/api/exchanges/amq.default/publish", json=message)
        assert sent.status == 200 and (await sent.json())["routed"] is True
        publish(broker, "", "q", b"second")
        # requeued: both still there, marked redelivered
        got = await client.post(
            "/api/queues/q/get", json={"count": 2, "ackmode": "reject_requeue_true"}
        )
        first, second = await got.json()
        assert first["payload"] == "hi" and first["message_count"] == 1
        assert first["properties"] == {
            "delivery_mode": 2,
            "content_type": "text/plain",
            "type": "greeting",
            "headers": {"h1": "v1", "n": 3, "nested": {"a": [1, True]}},
        }
        assert second["properties"] == {} and second["message_count"] == 0
        assert vhost.queues["q"].message_count == 2
        # automatic ack: taken away
        taken = await client.post(
            "/api/queues/q/get", json={"count": 1, "ackmode": "ack_requeue_false"}
        )
        [one] = await taken.json()
        assert one["redelivered"] is True and vhost.queues["q"].message_count == 1
        rejected = await client.post(
            "/api/queues/q/get", json={"count": 5, "ackmode": "reject_requeue_false"}
        )
        assert [m["payload"] for m in await rejected.json()] == ["second"]
        assert vhost.queues["q"].message_count == 0
        # bad input: one clear error each
        for body, words in (
            ({"ackmode": "ack"}, "field 'ackmode' must be one of"),
            ({"count": 0}, "field 'count'"),
        ):
            answer = await client.post("/api/queues/q/get", json=body)
            assert answer.status == 400 and words in (await answer.json())["reason"]
        cases: tuple[tuple[Any, str], ...] = (
            ({"delivery_mode": 3}, "properties.delivery_mode' must be an integer from 1 to 2"),
            ({"priority": "high"}, "properties.priority"),
            ({"colour": "red"}, "properties.colour' is not a property"),
            ({"expiration": "soon"}, "properties.expiration' must be milliseconds"),
            ({"headers": []}, "properties.headers' must be an object"),
            ([], "field 'properties' must be an object"),
        )
        for properties, words in cases:
            body = {"routing_key": "q", "payload": "x", "properties": properties}
            answer = await client.post("/api/exchanges/amq.default/publish", json=body)
            assert answer.status == 400, properties
            assert words in (await answer.json())["reason"], properties
        bad64 = {"payload": "%%", "payload_encoding": "base64"}
        answer = await client.post("/api/exchanges/amq.default/publish", json=bad64)
        assert answer.status == 400 and "not base64" in (await answer.json())["reason"]

    serve(broker, scenario)
