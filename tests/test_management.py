"""The management HTTP API and the Prometheus metrics, end to end in-process.

Most tests drive :func:`broker.management.api.create_app` through aiohttp's TestServer and
TestClient over a real virtual host, a real BrokerContext (real authenticator, sans-I/O
AMQP connections from :mod:`tests.amqp.helpers`) and a small stand-in for the Broker. The
last tests start a real :class:`broker.server.Broker` on free ports and use it over HTTP
and AMQP sockets. No pytest-asyncio: each test runs its scenario with ``asyncio.run``.
"""

from __future__ import annotations

import asyncio
import base64
import re
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from pamqp import commands

from broker import __version__
from broker.amqp.context import BrokerContext
from broker.core import properties
from broker.core.errors import AmqpError, ReplyCode
from broker.core.message import Message
from broker.management.api import create_app, start_management
from broker.management.errors import http_status
from broker.management.metrics import (
    CONTENT_TYPE,
    escape_label_value,
    format_value,
    render_metrics,
)
from tests.amqp.helpers import make_context, open_client


def basic(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


GUEST = basic("guest", "guest")


# -- a stand-in for broker.server.Broker ---------------------------------------------------
@dataclass
class FakeOptions:
    node_name: str = "node-a"
    auth: bool = False


@dataclass
class FakeBroker:
    context: BrokerContext = field(default_factory=make_context)
    options: FakeOptions = field(default_factory=FakeOptions)
    ha_state: str = "standalone"
    started_at: float = field(default_factory=lambda: time.time() - 5.0)
    amqp_port: int = 5672
    store_status: str = "unknown"
    mgmt_port: int = 0

    @property
    def vhost(self) -> Any:
        return self.context.vhost


Scenario = Callable[[TestClient[web.Request, web.Application]], Awaitable[None]]


def serve(broker: FakeBroker, scenario: Scenario) -> None:
    """Run ``scenario`` against the management app of ``broker``."""

    async def main() -> None:
        async with TestClient(TestServer(create_app(broker))) as client:
            await scenario(client)

    asyncio.run(main())


def publish(broker: FakeBroker, exchange: str, routing_key: str, body: bytes = b"x") -> None:
    vhost = broker.context.vhost
    vhost.publish(vhost.exchange(exchange), Message(exchange, routing_key, properties.EMPTY, body))


# -- a Prometheus text-format parser for the tests ---------------------------------------
_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\\\|\\"|\\n)*"'
_SAMPLE = re.compile(rf"^({_NAME})(?:\{{((?:{_LABEL})(?:,{_LABEL})*)?\}})? (\S+)$")
_LABEL_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\\\|\\"|\\n)*)"')


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n"}.get(m.group(1), m.group(1)), value)


def parse_metrics(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of the text format; fails on any line that is not valid."""
    assert text.endswith("\n")
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    typed: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            assert re.match(rf"^# HELP {_NAME} .+$", line), line
            continue
        if line.startswith("# TYPE "):
            match = re.match(rf"^# TYPE ({_NAME}) (counter|gauge|untyped|summary|histogram)$", line)
            assert match, line
            typed[match.group(1)] = match.group(2)
            continue
        assert not line.startswith("#"), line
        match = _SAMPLE.match(line)
        assert match, f"not a sample line: {line!r}"
        name, labels, value = match.groups()
        assert name in typed, f"sample {name} before its TYPE line"
        pairs = frozenset((k, _unescape(v)) for k, v in _LABEL_PAIR.findall(labels or ""))
        key = (name, pairs)
        assert key not in samples, f"duplicate sample {line!r}"
        samples[key] = float(value)
    return samples


def sample(
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str
) -> float:
    return samples[(name, frozenset(labels.items()))]


# -- status --------------------------------------------------------------------------------
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


# -- queues --------------------------------------------------------------------------------
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
        assert await deleted.json() == {"name": "orders", "messages_deleted": 1}
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


# -- exchanges -----------------------------------------------------------------------------
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
        assert await deleted.json() == {"name": "events"}
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


# -- bindings and connections --------------------------------------------------------------
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
                "source": "amq.direct",
                "destination": "q1",
                "destination_type": "queue",
                "routing_key": "k1",
                "arguments": {},
            },
            {
                "source": "amq.headers",
                "destination": "q1",
                "destination_type": "queue",
                "routing_key": "",
                "arguments": {"x-match": "any", "h": "v"},
            },
            {
                "source": "amq.topic",
                "destination": "q2",
                "destination_type": "queue",
                "routing_key": "a.#",
                "arguments": {},
            },
        ]
        exchange = await (await client.get("/api/exchanges/amq.direct")).json()
        assert exchange["bindings"] == 1

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
            "state": "open",
            "client_product": "test-client",
            "client_version": None,
            "channels": 2,
            "heartbeat": 0,
            "frame_max": 131072,
            "messages_published": 1,
            "messages_delivered": 0,
        }

    serve(broker, scenario)


# -- errors --------------------------------------------------------------------------------
def test_unknown_paths_and_methods_are_json() -> None:
    broker = FakeBroker()

    async def scenario(client: Any) -> None:
        response = await client.get("/api/nothing")
        assert response.status == 404
        assert response.content_type == "application/json"
        assert (await response.json())["error"] == "not_found"

        response = await client.post("/api/queues/q")
        assert response.status == 405
        assert response.content_type == "application/json"
        assert "PUT" in response.headers["Allow"]

    serve(broker, scenario)


@pytest.mark.parametrize(
    ("code", "status"),
    [
        (ReplyCode.NOT_FOUND, 404),
        (ReplyCode.ACCESS_REFUSED, 403),
        (ReplyCode.RESOURCE_LOCKED, 409),
        (ReplyCode.PRECONDITION_FAILED, 400),
        (ReplyCode.COMMAND_INVALID, 400),
        (ReplyCode.RESOURCE_ERROR, 400),
    ],
)
def test_amqp_error_mapping(code: ReplyCode, status: int) -> None:
    assert http_status(AmqpError(code, "x")) == status


def test_precondition_on_delete_maps_to_409() -> None:
    error = AmqpError(ReplyCode.PRECONDITION_FAILED, "x")
    assert http_status(error, precondition=409) == 409


def test_an_unexpected_error_is_a_json_500_without_traceback() -> None:
    broker = FakeBroker()

    def explode() -> Any:
        raise RuntimeError("boom")

    broker.vhost.bindings = explode

    async def scenario(client: Any) -> None:
        response = await client.get("/api/bindings")
        assert response.status == 500
        body = await response.json()
        assert body["error"] == "internal_server_error"
        assert "boom" not in body["reason"]
        # The server is still up.
        assert (await client.get("/api/status")).status == 200

    serve(broker, scenario)


def test_non_json_argument_values_are_rendered() -> None:
    broker = FakeBroker()
    broker.vhost.declare_queue("q", arguments={"x-blob": b"\x00ab", "x-other": {1, 2}})

    async def scenario(client: Any) -> None:
        response = await client.get("/api/queues/q")
        assert response.status == 200
        arguments = (await response.json())["arguments"]
        assert arguments["x-blob"] == "\x00ab"
        assert sorted(arguments["x-other"]) == [1, 2]

    serve(broker, scenario)


# -- authentication ------------------------------------------------------------------------
PROTECTED = [
    ("GET", "/api/queues"),
    ("GET", "/api/queues/q"),
    ("PUT", "/api/queues/q"),
    ("DELETE", "/api/queues/q"),
    ("GET", "/api/exchanges"),
    ("GET", "/api/exchanges/amq.direct"),
    ("PUT", "/api/exchanges/x"),
    ("DELETE", "/api/exchanges/x"),
    ("GET", "/api/bindings"),
    ("GET", "/api/connections"),
    ("GET", "/api/unknown"),
]


def test_auth_protects_everything_but_status_and_metrics() -> None:
    broker = FakeBroker(options=FakeOptions(auth=True))

    async def scenario(client: Any) -> None:
        for path in ("/api/status", "/metrics"):
            assert (await client.get(path)).status == 200, path

        bad_headers: list[dict[str, str]] = [
            {},
            {"Authorization": "Basic " + base64.b64encode(b"guest:wrong").decode()},
            {"Authorization": "Basic " + base64.b64encode(b"nobody:guest").decode()},
            {"Authorization": "Basic " + base64.b64encode(b"guest").decode()},
            {"Authorization": "Basic !!!not-base64!!!"},
            {"Authorization": "Bearer abc"},
        ]
        for method, path in PROTECTED:
            for headers in bad_headers:
                response = await client.request(method, path, headers=headers)
                assert response.status == 401, (method, path, headers)
                assert response.headers["WWW-Authenticate"].startswith('Basic realm="qpidd"')
                assert (await response.json())["error"] == "unauthorized"
        assert "q" not in broker.vhost.queues

        response = await client.put("/api/queues/q", headers=GUEST)
        assert response.status == 201
        response = await client.get("/api/queues", headers=GUEST)
        assert [q["name"] for q in await response.json()] == ["q"]
        assert (await client.get("/api/unknown", headers=GUEST)).status == 404

    serve(broker, scenario)


def test_auth_off_needs_no_credentials() -> None:
    broker = FakeBroker(options=FakeOptions(auth=False))

    async def scenario(client: Any) -> None:
        assert (await client.get("/api/queues")).status == 200
        headers = {"Authorization": "Basic " + base64.b64encode(b"guest:wrong").decode()}
        assert (await client.get("/api/queues", headers=headers)).status == 200

    serve(broker, scenario)


# -- metrics -------------------------------------------------------------------------------
def test_metrics_text_is_valid_and_complete() -> None:
    broker = FakeBroker()
    open_client(broker.context)
    text = render_metrics(broker, now=broker.started_at + 12.5)
    samples = parse_metrics(text)
    assert sample(samples, "qpidd_up") == 1
    assert sample(samples, "qpidd_uptime_seconds") == 12.5
    assert sample(samples, "qpidd_connections") == 1
    assert sample(samples, "qpidd_connections_opened_total") == 1
    assert sample(samples, "qpidd_connections_refused_total") == 0
    assert sample(samples, "qpidd_protocol_errors_total") == 0
    assert sample(samples, "qpidd_queues") == 0
    assert sample(samples, "qpidd_exchanges") == 6
    assert sample(samples, "qpidd_messages_published_total") == 0
    assert sample(samples, "qpidd_messages_unroutable_total") == 0
    assert sample(samples, "qpidd_messages_dead_lettered_total") == 0
    assert (
        sample(samples, "qpidd_info", node="node-a", version=__version__, ha_state="standalone")
        == 1
    )
    for name in (
        "qpidd_up",
        "qpidd_queue_messages",
        "qpidd_queue_enqueued_total",
        "qpidd_messages_published_total",
    ):
        assert f"# HELP {name} " in text
    assert "# TYPE qpidd_queue_messages gauge" in text
    assert "# TYPE qpidd_queue_acked_total counter" in text
    assert "# TYPE qpidd_messages_published_total counter" in text


def test_metrics_follow_queues_and_messages() -> None:
    broker = FakeBroker()
    vhost = broker.vhost
    before = parse_metrics(render_metrics(broker))
    assert not any(name.startswith("qpidd_queue_") for name, _ in before)

    vhost.declare_queue("work", arguments={"x-max-length": 1, "x-dead-letter-exchange": "dlx"})
    vhost.declare_exchange("dlx", "fanout")
    vhost.declare_queue("dead")
    vhost.bind("dead", "dlx", "")
    publish(broker, "", "work", b"one")
    publish(broker, "", "work", b"two")  # drops "one" (drop-head) into the DLX
    publish(broker, "amq.direct", "nowhere")

    after = parse_metrics(render_metrics(broker))
    assert sample(after, "qpidd_queues") == 2
    assert sample(after, "qpidd_exchanges") == 7
    assert sample(after, "qpidd_messages_published_total") == 4  # the dead letter too
    assert sample(after, "qpidd_messages_unroutable_total") == 1
    assert sample(after, "qpidd_messages_dead_lettered_total") == 1
    assert sample(after, "qpidd_queue_messages", queue="work") == 1
    assert sample(after, "qpidd_queue_bytes", queue="work") == 3
    assert sample(after, "qpidd_queue_enqueued_total", queue="work") == 2
    assert sample(after, "qpidd_queue_dropped_total", queue="work") == 1
    assert sample(after, "qpidd_queue_messages", queue="dead") == 1
    for name in (
        "qpidd_queue_messages_unacked",
        "qpidd_queue_consumers",
        "qpidd_queue_delivered_total",
        "qpidd_queue_acked_total",
        "qpidd_queue_expired_total",
        "qpidd_queue_rejected_publishes_total",
    ):
        assert sample(after, name, queue="work") == 0, name


def test_metrics_escape_label_values() -> None:
    broker = FakeBroker()
    awkward = 'a"b\\c\nd'
    broker.vhost.declare_queue(awkward)
    text = render_metrics(broker)
    assert 'qpidd_queue_messages{queue="a\\"b\\\\c\\nd"} 0' in text
    samples = parse_metrics(text)
    assert sample(samples, "qpidd_queue_messages", queue=awkward) == 0


def test_metric_value_and_label_formatting() -> None:
    assert escape_label_value('x"y\\z\n') == 'x\\"y\\\\z\\n'
    assert format_value(3) == "3"
    assert format_value(True) == "1"
    assert format_value(0.25) == "0.25"
    assert format_value(float("inf")) == "+Inf"
    assert format_value(float("-inf")) == "-Inf"
    assert format_value(float("nan")) == "NaN"


def test_metrics_endpoint_changes_after_creating_a_queue() -> None:
    broker = FakeBroker(options=FakeOptions(auth=True))

    async def scenario(client: Any) -> None:
        response = await client.get("/metrics")  # open without credentials
        assert response.status == 200
        assert response.headers["Content-Type"] == CONTENT_TYPE
        before = parse_metrics(await response.text())
        assert sample(before, "qpidd_queues") == 0

        assert (await client.put("/api/queues/jobs", headers=GUEST)).status == 201
        publish(broker, "", "jobs", b"12345")

        after = parse_metrics(await (await client.get("/metrics")).text())
        assert sample(after, "qpidd_queues") == 1
        assert sample(after, "qpidd_queue_messages", queue="jobs") == 1
        assert sample(after, "qpidd_queue_bytes", queue="jobs") == 5
        assert sample(after, "qpidd_messages_published_total") == 1

    serve(broker, scenario)


# -- a real broker ---------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_start_management_reports_the_bound_port() -> None:
    broker = FakeBroker()

    async def main() -> None:
        runner = await start_management(broker, "127.0.0.1", 0)
        try:
            assert broker.mgmt_port > 0
            async with aiohttp.ClientSession() as session:
                url = f"http://127.0.0.1:{broker.mgmt_port}/api/status"
                async with session.get(url) as response:
                    assert response.status == 200
                    assert (await response.json())["node"] == "node-a"
        finally:
            await runner.cleanup()

    asyncio.run(main())


def test_start_management_on_a_busy_port_raises_oserror() -> None:
    async def main() -> None:
        with socket.socket() as busy:
            busy.bind(("127.0.0.1", 0))
            busy.listen()
            with pytest.raises(OSError):
                await start_management(FakeBroker(), "127.0.0.1", busy.getsockname()[1])

    asyncio.run(main())


def test_real_broker_over_http_and_amqp() -> None:
    """A real Broker: HTTP declares, an AMQP client publishes and consumes, both agree."""
    import aio_pika

    from broker.options import BrokerOptions
    from broker.server import Broker

    options = BrokerOptions(
        port=0,
        interface="127.0.0.1",
        mgmt_port=free_port(),
        mgmt_interface="127.0.0.1",
        auth=True,
        node_name="e2e",
    )

    async def main() -> None:
        broker = Broker(options)
        await broker.start()
        base = f"http://127.0.0.1:{broker.mgmt_port}"
        try:
            async with aiohttp.ClientSession() as http:
                async with http.get(f"{base}/api/status") as response:
                    status = await response.json()
                assert status["node"] == "e2e"
                assert status["amqp_port"] == broker.amqp_port
                assert status["ha_state"] == "standalone"

                async with http.put(f"{base}/api/queues/jobs") as response:
                    assert response.status == 401
                async with http.put(
                    f"{base}/api/queues/jobs", json={"durable": True}, headers=GUEST
                ) as response:
                    assert response.status == 201

                amqp = await aio_pika.connect(f"amqp://guest:guest@127.0.0.1:{broker.amqp_port}/")
                async with amqp:
                    channel = await amqp.channel()
                    # The queue declared over HTTP is the queue AMQP sees.
                    queue = await channel.declare_queue("jobs", durable=True)
                    await channel.default_exchange.publish(
                        aio_pika.Message(b"payload"), routing_key="jobs"
                    )
                    for _ in range(100):
                        async with http.get(f"{base}/api/queues/jobs", headers=GUEST) as r:
                            view = await r.json()
                        if view["messages"] == 1:
                            break
                        await asyncio.sleep(0.02)
                    assert view["messages"] == 1
                    assert view["bytes"] == 7

                    async with http.get(f"{base}/api/connections", headers=GUEST) as r:
                        connections = await r.json()
                    assert len(connections) == 1
                    assert connections[0]["user"] == "guest"
                    assert connections[0]["state"] == "open"
                    assert connections[0]["client_product"]
                    assert connections[0]["messages_published"] == 1

                    async with http.get(f"{base}/metrics") as r:
                        samples = parse_metrics(await r.text())
                    assert sample(samples, "qpidd_connections") == 1
                    assert sample(samples, "qpidd_queue_messages", queue="jobs") == 1
                    assert sample(samples, "qpidd_messages_published_total") == 1

                    async def ignore(message: Any) -> None:
                        pass

                    consumer_tag = await queue.consume(ignore)
                    async with http.delete(
                        f"{base}/api/queues/jobs?if_unused=true", headers=GUEST
                    ) as r:
                        assert r.status == 409
                    await queue.cancel(consumer_tag)

                async with http.delete(f"{base}/api/queues/jobs", headers=GUEST) as r:
                    assert r.status == 200
                async with http.get(f"{base}/metrics") as r:
                    samples = parse_metrics(await r.text())
                assert sample(samples, "qpidd_queues") == 0
                assert ("qpidd_queue_messages", frozenset({("queue", "jobs")})) not in samples
        finally:
            await broker.stop(grace=1.0)

    asyncio.run(main())
