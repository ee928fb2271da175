"""An error answered by the management API leaves no reference cycle: the request, its
handler and its response are freed by reference counting, as a successful answer's are.

A broker freezes its heap as it grows (``broker.collector``) and the cyclic collector
never walks a frozen object again: a cycle per request would be memory kept for good.
Before: aiohttp's router's 404 and 405 (a ``MatchInfoError``, whose ``SystemRoute`` is in
a cycle with its bound handler, and whose raised exception's traceback holds the frames
that hold the request) left ~43 objects a request, the console's raised redirects ~40,
an unauthenticated request to an unknown path 6.

A real broker in this process (uvloop) with its management API on a real socket, requests
by urllib in a thread, the collector off while they go (``no_cyclic_collector``); then one
collection that keeps what it finds (``gc.DEBUG_SAVEALL``) must find nothing of aiohttp's
or of the management API's.
"""

from __future__ import annotations

import asyncio
import base64
import gc
import urllib.error
import urllib.request
from collections import Counter
from typing import Any

import pytest
import uvloop

from broker.management.api import start_management
from broker.options import BrokerOptions
from broker.server import Broker
from common.polling import free_port, poll_until_async

#: Requests of each kind: enough that one left over by chance is not the point.
REQUESTS = 20

GUEST = {"Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()}
CROSS_SITE = {**GUEST, "Origin": "http://elsewhere.example", "Content-Type": "application/json"}

KINDS = [
    # id, auth, method, path, headers, body, status, Location
    ("unknown-path-404", True, "GET", "/nothing", GUEST, None, 404, None),
    ("unknown-path-anonymous-401", True, "GET", "/nothing", {}, None, 401, None),
    ("method-not-allowed-405", True, "PATCH", "/api/queues", GUEST, None, 405, None),
    ("console-302", True, "GET", "/console", {}, None, 302, "/console/"),
    ("console-page-no-session-303", True, "GET", "/console/", {}, None, 303, "/console/login"),
    ("login-page-auth-off-303", False, "GET", "/console/login", {}, None, 303, "/console/"),
    ("login-auth-off-303", False, "POST", "/console/login", {}, b"", 303, "/console/"),
    ("api-unauthenticated-401", True, "GET", "/api/queues", {}, None, 401, None),
    ("console-file-no-session-401", True, "GET", "/console/static/console.js", {}, None, 401, None),
    ("missing-queue-404", True, "GET", "/api/queues/%2F/missing", GUEST, None, 404, None),
    ("bad-input-400", True, "PUT", "/api/queues/%2F/q", GUEST, b"{not json", 400, None),
    ("cross-site-403", True, "PUT", "/api/queues/%2F/q", CROSS_SITE, b"{}", 403, None),
]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _request(
    port: int, method: str, path: str, headers: dict[str, str], body: bytes | None
) -> tuple[int, str | None]:
    """One request on a connection of its own: its status and Location."""
    opener = urllib.request.build_opener(_NoRedirect)
    url = f"http://127.0.0.1:{port}{path}"
    request = urllib.request.Request(url, data=body, headers=headers, method=method)
    try:
        with opener.open(request, timeout=30) as response:
            response.read()
            return response.status, response.headers.get("Location")
    except urllib.error.HTTPError as error:
        error.read()
        status, location = error.code, error.headers.get("Location")
        error.close()
        return status, location


def _request_objects(garbage: list[Any]) -> Counter[str]:
    """What of aiohttp's and the management API's is among ``garbage``: their objects,
    and the frames of their functions (a traceback's)."""
    found: Counter[str] = Counter()
    for obj in garbage:
        module = type(obj).__module__
        if module.startswith(("aiohttp", "broker.management")):
            found[f"{module}.{type(obj).__qualname__}"] += 1
        elif type(obj).__name__ == "frame":
            where = obj.f_code.co_filename
            if "/aiohttp/" in where or "/broker/management/" in where:
                found[f"frame {obj.f_code.co_qualname}"] += 1
    return found


@pytest.mark.parametrize(
    ("auth", "method", "path", "headers", "body", "status", "location"),
    [pytest.param(*kind[1:], id=kind[0]) for kind in KINDS],
)
def test_an_error_answer_leaves_no_cycle(
    no_cyclic_collector: None,
    auth: bool,
    method: str,
    path: str,
    headers: dict[str, str],
    body: bytes | None,
    status: int,
    location: str | None,
) -> None:
    async def main() -> Counter[str]:
        # no management API of the broker's own (its default port is fixed): the test's,
        # on a free port, whose server's connections it watches
        options = BrokerOptions(port=free_port(), interface="127.0.0.1", auth=auth, mgmt_port=0)
        broker = Broker(options)
        await broker.start()
        try:
            port = free_port()
            runner = await start_management(broker, "127.0.0.1", port)
            try:
                frozen = gc.get_freeze_count()
                for _ in range(REQUESTS):
                    answer = await asyncio.to_thread(_request, port, method, path, headers, body)
                    assert answer == (status, location)
                server = runner.server
                assert server is not None
                await poll_until_async(
                    lambda: not server.connections, 20, "the server's connections ended"
                )
                # nothing was frozen meanwhile (the collector off, nothing asks for it;
                # what a freeze takes, a collection no longer sees): a freeze would add
                # all that is young, while frozen objects may die
                assert gc.get_freeze_count() <= frozen
                gc.set_debug(gc.DEBUG_SAVEALL)
                try:
                    gc.collect()
                    return _request_objects(gc.garbage)
                finally:
                    gc.set_debug(0)
                    gc.garbage.clear()
            finally:
                await runner.cleanup()
        finally:
            await broker.stop()

    left = uvloop.run(main())
    assert not left, f"cyclic garbage after {REQUESTS} requests: {left.most_common(12)}"
