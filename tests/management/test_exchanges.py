"""/api/exchanges and /api/bindings: declare, inspect, list and delete exchanges; bindings."""

from __future__ import annotations

from typing import Any

from broker.management.views import properties_key
from tests.management.support import FakeBroker, serve


def test_exchange_lifecycle() -> None:
    broker = FakeBroker()

    async def scenario(client: Any) -> None:
        response = await client.put(
            "/api/exchanges/events",
            json={
                "type": "topic",
                "durable": True,
                "arguments": {"alternate-exchange": "amq.fanout"},
            },
        )
        assert response.status == 201
        created = await response.json()
        assert created == {
            "name": "events",
            "vhost": "/",
            "type": "topic",
            "durable": True,
            "auto_delete": False,
            "internal": False,
            "builtin": False,
            "arguments": {"alternate-exchange": "amq.fanout"},
            "bindings": 0,
            "routed_total": 0,
            "unroutable_total": 0,
        }
        again = await client.put(
            "/api/exchanges/events",
            json={
                "type": "topic",
                "durable": True,
                "arguments": {"alternate-exchange": "amq.fanout"},
            },
        )
        assert again.status == 200
        other_alternate = await client.put(
            "/api/exchanges/events", json={"type": "topic", "durable": True}
        )
        assert other_alternate.status == 400
        assert "alternate-exchange" in (await other_alternate.json())["reason"]

        inequivalent = await client.put("/api/exchanges/events", json={"type": "fanout"})
        assert inequivalent.status == 400
        body = await inequivalent.json()
        assert body["reply_code"] == 406
        assert "inequivalent arg 'type'" in body["reason"]

        got = await client.get("/api/exchanges/events")
        assert (await got.json())["type"] == "topic"

        names = [e["name"] for e in await (await client.get("/api/exchanges")).json()]
        assert names == [
            "",
            "amq.direct",
            "amq.fanout",
            "amq.headers",
            "amq.match",
            "amq.topic",
            "events",
        ]

        deleted = await client.delete("/api/exchanges/events")
        assert deleted.status == 200
        assert await deleted.json() == {"name": "events", "vhost": "/"}
        assert (await client.get("/api/exchanges/events")).status == 404
        assert (await client.delete("/api/exchanges/events")).status == 404

    serve(broker, scenario)


def test_exchange_put_validation() -> None:
    broker = FakeBroker()

    async def scenario(client: Any) -> None:
        response = await client.put("/api/exchanges/x", json={})
        assert response.status == 400
        assert (await response.json())["reason"] == "field 'type' is required"

        response = await client.put("/api/exchanges/x", json={"type": 7})
        assert response.status == 400
        assert "field 'type' must be a string" in (await response.json())["reason"]

        response = await client.put("/api/exchanges/x", json={"type": "direct", "internal": "no"})
        assert response.status == 400
        assert "field 'internal'" in (await response.json())["reason"]

        response = await client.put("/api/exchanges/x", json={"type": "nosuch"})
        assert response.status == 400
        body = await response.json()
        assert body["reply_code"] == 503
        assert "unknown exchange type 'nosuch'" in body["reason"]

        response = await client.put(
            "/api/exchanges/x", json={"type": "direct", "arguments": {"alternate-exchange": 5}}
        )
        assert response.status == 400
        assert "alternate-exchange" in (await response.json())["reason"]

        response = await client.put("/api/exchanges/amq.mine", json={"type": "direct"})
        assert response.status == 403

        assert "x" not in broker.vhost.exchanges

    serve(broker, scenario)


def test_default_and_builtin_exchanges() -> None:
    broker = FakeBroker()

    async def scenario(client: Any) -> None:
        response = await client.get("/api/exchanges/amq.default")
        assert response.status == 200
        body = await response.json()
        assert body["name"] == ""
        assert body["type"] == "direct"
        assert body["builtin"] is True

        for name in ("amq.default", "amq.direct", "amq.topic"):
            response = await client.delete(f"/api/exchanges/{name}")
            assert response.status == 403, name
            reply = await response.json()
            assert reply["reply_code"] == 403
            assert "not permitted" in reply["reason"]
        assert "amq.direct" in broker.vhost.exchanges

        response = await client.put("/api/exchanges/amq.default", json={"type": "direct"})
        assert response.status == 403

        # Re-declaring a built-in exchange equivalently is allowed, as over AMQP.
        response = await client.put(
            "/api/exchanges/amq.fanout", json={"type": "fanout", "durable": True}
        )
        assert response.status == 200

    serve(broker, scenario)


def test_delete_exchange_if_unused_is_409() -> None:
    broker = FakeBroker()
    broker.vhost.declare_queue("q")
    broker.vhost.declare_exchange("x", "direct")
    broker.vhost.bind("q", "x", "k")

    async def scenario(client: Any) -> None:
        response = await client.delete("/api/exchanges/x?if_unused=true")
        assert response.status == 409
        assert "in use" in (await response.json())["reason"]
        response = await client.delete("/api/exchanges/x")
        assert response.status == 200
        assert "x" not in broker.vhost.exchanges
        assert broker.vhost.bindings() == []

    serve(broker, scenario)


def test_bindings_are_listed() -> None:
    broker = FakeBroker()
    vhost = broker.vhost
    vhost.declare_queue("q1")
    vhost.declare_queue("q2")
    vhost.bind("q2", "amq.topic", "a.#")
    vhost.bind("q1", "amq.direct", "k1")
    vhost.bind("q1", "amq.headers", "", {"x-match": "any", "h": "v"})

    async def scenario(client: Any) -> None:
        response = await client.get("/api/bindings")
        assert response.status == 200
        assert await response.json() == [
            {
                "vhost": "/",
                "source": "amq.direct",
                "destination": "q1",
                "destination_type": "queue",
                "routing_key": "k1",
                "arguments": {},
                "properties_key": "k1",
            },
            {
                "vhost": "/",
                "source": "amq.headers",
                "destination": "q1",
                "destination_type": "queue",
                "routing_key": "",
                "arguments": {"x-match": "any", "h": "v"},
                "properties_key": properties_key("", {"x-match": "any", "h": "v"}),
            },
            {
                "vhost": "/",
                "source": "amq.topic",
                "destination": "q2",
                "destination_type": "queue",
                "routing_key": "a.#",
                "arguments": {},
                "properties_key": "a.#",
            },
        ]
        exchange = await (await client.get("/api/exchanges/amq.direct")).json()
        assert exchange["bindings"] == 1

    serve(broker, scenario)
