"""HTTP basic authentication of the management API (status and metrics stay open)."""

from __future__ import annotations

import base64
from typing import Any

from tests.management.support import GUEST, FakeBroker, FakeOptions, serve

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
