"""/api/status and /api/connections: what the broker and its connections report."""

from __future__ import annotations

from typing import Any

from pamqp import commands

from broker import __version__
from tests.amqp.helpers import open_client
from tests.amqp10.helpers import Client10
from tests.management.support import FakeBroker, serve


def test_status_reports_the_broker() -> None:
    broker = FakeBroker()
    open_client(broker.context)

    async def scenario(client: Any) -> None:
        response = await client.get("/api/status")
        assert response.status == 200
        assert response.content_type == "application/json"
        body = await response.json()
        assert body["node"] == "node-a"
        assert body["version"] == __version__
        assert body["ha_state"] == "standalone"
        assert body["amqp_port"] == 5672
        assert body["connections"] == 1
        assert body["queues"] == 0
        assert body["exchanges"] == 6  # "" and the five amq.* exchanges
        assert 4.0 <= body["uptime"] < 60.0

    serve(broker, scenario)


def test_connections_are_listed() -> None:
    broker = FakeBroker()
    conn = open_client(broker.context)
    conn.send(2, commands.Channel.Open())
    conn.publish(1, b"abc", exchange="amq.direct", routing_key="nowhere")
    idle = open_client(broker.context)

    async def scenario(client: Any) -> None:
        response = await client.get("/api/connections")
        assert response.status == 200
        listed = await response.json()
        assert [c["id"] for c in listed] == sorted([conn.conn.id, idle.conn.id])
        first = next(c for c in listed if c["id"] == conn.conn.id)
        assert first == {
            "id": conn.conn.id,
            "name": conn.conn.name,
            "peer": "test:1",
            "user": "guest",
            "vhost": "/",
            "state": "open",
            "client_product": "test-client",
            "client_version": None,
            "channels": 2,
            "heartbeat": 0,
            "frame_max": 131072,
            "messages_published": 1,
            "messages_delivered": 0,
            "recv_oct": 0,  # counted by the asyncio shell: none here
            "send_oct": 0,
            "recv_oct_details": {"rate": 0.0},
            "send_oct_details": {"rate": 0.0},
            "protocol": "AMQP 0-9-1",
            "user_provided_name": None,
            "ssl": False,
            "ha_backup": None,
        }

    serve(broker, scenario)


def test_status_and_the_vhost_count_connections_of_both_protocols() -> None:
    """An AMQP 1.0 connection counts beside a 0-9-1 one in /api/status and in its vhost's
    ``connections`` (RabbitMQ's overview counts every protocol's connections)."""
    broker = FakeBroker()
    open_client(broker.context)
    one_oh = Client10(broker.context)
    one_oh.connect()
    assert one_oh.conn.is_open

    async def scenario(client: Any) -> None:
        status = await (await client.get("/api/status")).json()
        assert status["connections"] == 2
        vhost = await (await client.get("/api/vhosts/%2F")).json()
        assert vhost["connections"] == 2

    serve(broker, scenario)
