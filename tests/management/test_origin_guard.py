"""No way in through the browser (issue 30, item 3): a change asked by another site's page
is refused whatever the credentials; programs (no ``Origin``, no ``Sec-Fetch-Site``) and
this API's own pages go on. The decision without HTTP, then through the app."""

from __future__ import annotations

from typing import Any

import pytest

from broker.management.origin_guard import cross_site_reason
from tests.management.support import GUEST, FakeBroker, FakeOptions, serve

HOST = "127.0.0.1:8672"


@pytest.mark.parametrize(
    ("method", "headers"),
    [
        ("POST", {}),  # qpid-ha, the agents, the OCF script, curl: no browser headers
        ("DELETE", {}),
        ("GET", {"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}),  # reads
        ("HEAD", {"Sec-Fetch-Site": "cross-site"}),
        ("POST", {"Origin": "http://127.0.0.1:8672", "Sec-Fetch-Site": "same-origin"}),
        ("POST", {"Origin": "HTTP://127.0.0.1:8672"}),
        ("PUT", {"Sec-Fetch-Site": "none"}),  # typed by the user
        ("POST", {"Sec-Fetch-Site": "same-origin"}),
        # the console's own login form under Referrer-Policy: no-referrer
        ("POST", {"Origin": "null", "Sec-Fetch-Site": "same-origin"}),
    ],
)
def test_passes(method: str, headers: dict[str, str]) -> None:
    assert cross_site_reason(method, headers, HOST) is None


@pytest.mark.parametrize(
    ("method", "headers", "host"),
    [
        ("POST", {"Origin": "http://127.0.0.1:9999", "Sec-Fetch-Site": "same-site"}, HOST),
        ("POST", {"Origin": "http://127.0.0.1:9999"}, HOST),  # another port: another origin
        ("POST", {"Sec-Fetch-Site": "cross-site"}, HOST),
        ("POST", {"Sec-Fetch-Site": "same-site"}, HOST),
        ("DELETE", {"Origin": "http://evil.example"}, HOST),
        ("PUT", {"Origin": "null"}, HOST),  # a sandboxed frame, a file:// page
        ("POST", {"Origin": "https://127.0.0.1:8672"}, "127.0.0.1"),
        ("POST", {"Origin": "http://[::1]:9999"}, "[::1]:8672"),
        ("GET", {"Upgrade": "websocket", "Origin": "http://evil.example"}, HOST),
    ],
)
def test_refused(method: str, headers: dict[str, str], host: str) -> None:
    reason = cross_site_reason(method, headers, host)
    assert reason is not None and "another" in reason


def test_ipv6_and_default_ports() -> None:
    assert cross_site_reason("POST", {"Origin": "http://[::1]:8672"}, "[::1]:8672") is None
    assert cross_site_reason("POST", {"Origin": "https://mq.example"}, "mq.example:443") is None
    assert cross_site_reason("POST", {"Origin": "http://mq.example"}, "MQ.example") is None


def test_the_api_refuses_a_change_from_another_site_whatever_the_credentials() -> None:
    broker = FakeBroker(options=FakeOptions(auth=True))
    evil = {"Origin": "http://127.0.0.1:1", "Sec-Fetch-Site": "same-site"}

    async def scenario(client: Any) -> None:
        for method, path in (("PUT", "/api/queues/q"), ("POST", "/api/admin/stop")):
            response = await client.request(method, path, headers={**GUEST, **evil})
            assert response.status == 403, (method, path)
            body = await response.json()
            assert "another site" in body["reason"] and "http://127.0.0.1:1" in body["reason"]
        assert "q" not in broker.vhost.queues
        # reads from anywhere as before; a program's change as before
        assert (await client.get("/api/queues", headers={**GUEST, **evil})).status == 200
        assert (await client.put("/api/queues/q", headers=GUEST)).status == 201
        own = {"Origin": f"http://{client.host}:{client.port}", "Sec-Fetch-Site": "same-origin"}
        assert (await client.put("/api/queues/r", headers={**GUEST, **own})).status == 201

    serve(broker, scenario)
