"""No way in through the browser (issue 30, item 3), the attack as a user's browser makes it.

Real Chromium logs in to the JSON API with HTTP Basic (it then sends those credentials with
every later request to that origin), then opens a page of another origin: a second local
HTTP server on another port. That page submits cross-origin form POSTs, as any web page
may: a JSON-shaped ``text/plain`` body to publish, and ``/api/admin/stop``. Both are
refused with the guard's 403 (``broker.management.origin_guard``), nothing is published,
the broker runs on; the same changes from a program with the same credentials work.
"""

from __future__ import annotations

import base64
import html
import json
import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pika
import pytest
from selenium.webdriver.common.by import By

from common.polling import poll_until
from tests.broker_process import BrokerProcess
from tests.console.support import USERS, write_users
from tests.drill.log_schema import check_log_file

pytestmark = pytest.mark.xdist_group("console_browser")

QUEUE = "xsite-orders"
#: A ``text/plain`` form whose one field makes this JSON body (``name=value``):
#: ``{"routing_key": "xsite-orders", "payload": "forged="}``.
_JSON_NAME = '{"routing_key": "xsite-orders", "payload": "forged'
_JSON_VALUE = '"}'


def attack_page(target: str, field: bool) -> bytes:
    """A page that submits a form to ``target`` as soon as it loads."""
    inputs = (
        f'<input type="hidden" name="{html.escape(_JSON_NAME)}" value="{html.escape(_JSON_VALUE)}">'
        if field
        else ""
    )
    return (
        "<!doctype html><html><body><h1>Cute cats</h1>"
        f'<form id="f" method="POST" action="{html.escape(target)}" enctype="text/plain">'
        f"{inputs}</form>"
        "<script>document.getElementById('f').submit()</script></body></html>"
    ).encode()


@pytest.fixture
def other_site() -> Iterator[tuple[ThreadingHTTPServer, dict[str, bytes]]]:
    """The other origin: a local HTTP server on its own port serving ``pages``."""
    pages: dict[str, bytes] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = pages.get(self.path, b"not found")
            self.send_response(200 if self.path in pages else 404)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server, pages
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def body_text(browser: Any) -> str:
    return str(browser.find_element(By.TAG_NAME, "body").text)


def depth(broker: BrokerProcess) -> int:
    token = base64.b64encode(f"guest:{USERS['guest'][0]}".encode()).decode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{broker.mgmt_port}/api/queues/{QUEUE}",
        headers={"Authorization": f"Basic {token}"},
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return int(json.load(answer)["messages"])


def test_a_page_of_another_origin_cannot_act_with_the_browsers_basic_login(
    tmp_path: Path, browser: Any, other_site: tuple[ThreadingHTTPServer, dict[str, bytes]]
) -> None:
    server, pages = other_site
    broker = BrokerProcess(tmp_path, [f"--sasl-users={write_users(tmp_path / 'users')}"])
    broker.start()
    try:
        with pika.BlockingConnection(pika.URLParameters(broker.url)) as connection:
            connection.channel().queue_declare(QUEUE, durable=False)
        api = f"http://127.0.0.1:{broker.mgmt_port}"
        # The browser logs in with Basic (guest holds every role: administrator, stop) ...
        password = USERS["guest"][0]
        browser.get(f"http://guest:{password}@127.0.0.1:{broker.mgmt_port}/api/queues")
        poll_until(lambda: QUEUE in body_text(browser), 10)
        browser.get(f"{api}/api/queues/{QUEUE}")  # ... and now sends them by itself
        poll_until(lambda: '"messages"' in body_text(browser), 10)

        other = f"http://127.0.0.1:{server.server_address[1]}"
        pages["/publish"] = attack_page(f"{api}/api/exchanges/amq.default/publish", True)
        pages["/stop"] = attack_page(f"{api}/api/admin/stop", False)
        for page in ("/publish", "/stop"):
            browser.get(other + page)
            refused = str(
                poll_until(lambda: "another site" in body_text(browser) and body_text(browser), 10)
            )
            assert other in refused and "whatever the credentials" in refused, refused

        assert broker.alive()
        assert depth(broker) == 0
        refusals = [e for e in broker.events() if e["event"] == "management_cross_site_refused"]
        assert [(e["path"], e["origin"]) for e in refusals] == [
            ("/api/exchanges/amq.default/publish", other),
            ("/api/admin/stop", other),
        ]
        assert not [e for e in broker.events() if e["event"] == "management_auth_failed"]
        assert check_log_file(broker.log_file)[1] == []  # as the log schema says

        # The same change from a program with the same credentials: published.
        token = base64.b64encode(f"guest:{password}".encode()).decode()
        request = urllib.request.Request(
            f"{api}/api/exchanges/amq.default/publish",
            data=json.dumps({"routing_key": QUEUE, "payload": "fine"}).encode(),
            headers={"Authorization": f"Basic {token}", "Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert json.load(answer)["routed"] is True
        assert depth(broker) == 1
    finally:
        broker.stop()
