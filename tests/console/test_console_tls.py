"""The console over the management API's TLS (``--mgmt-ssl=yes``): the same HTTPS, a
``Secure`` cookie, nothing in clear; and Chromium logging in over it, its Connections tab
marking a client's AMQP connection over TLS."""

from __future__ import annotations

import http.client
import ssl
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest
from selenium.webdriver.common.by import By

from common.polling import poll_until
from tests.broker_process import BrokerProcess, free_port
from tests.console.page import seen, text
from tests.console.support import USERS, write_users
from tests.security.certs import Ca

pytestmark = pytest.mark.xdist_group("console_browser")  # with its browser


@pytest.fixture(scope="module")
def https_broker(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[BrokerProcess, Path, int]]:
    """A broker with HTTPS management and AMQP over TLS: it, its CA and its AMQPS port."""
    root = tmp_path_factory.mktemp("console-tls")
    ca = Ca.make(root / "ca", "console-test-ca")  # two keys, not make_certs' seven
    cert, key = ca.issue("server", "localhost")
    users = write_users(root / "users")
    amqps = free_port()
    process = BrokerProcess(
        root / "qpidd",
        args=[
            f"--ssl-cert-file={cert}",
            f"--ssl-key-file={key}",
            f"--ssl-port={amqps}",
            "--mgmt-ssl=yes",
            f"--sasl-users={users}",
        ],
    ).start()
    try:
        yield process, ca.cert, amqps
    finally:
        process.stop()


def test_the_login_is_https_only_and_its_cookie_secure(
    https_broker: tuple[BrokerProcess, Path, int],
) -> None:
    process, ca, _ = https_broker
    context = ssl.create_default_context(cafile=str(ca))
    https = http.client.HTTPSConnection("localhost", process.mgmt_port, context=context, timeout=5)
    form = urllib.parse.urlencode({"user": "watcher", "password": USERS["watcher"][0]})
    https.request(
        "POST", "/console/login", form, {"Content-Type": "application/x-www-form-urlencoded"}
    )
    answer = https.getresponse()
    answer.read()
    assert answer.status == 303
    cookie = answer.getheader("Set-Cookie") or ""
    assert "Secure" in cookie and "HttpOnly" in cookie
    https.request("GET", "/console/", headers={"Cookie": cookie.split(";")[0]})
    page = https.getresponse()
    assert page.status == 200 and b"qpidd console" in page.read()
    https.close()
    plain = http.client.HTTPConnection("localhost", process.mgmt_port, timeout=5)
    with pytest.raises((ConnectionError, http.client.HTTPException)):
        plain.request("GET", "/console/login")
        plain.getresponse().read()
    plain.close()


def test_chromium_logs_in_over_https(
    https_broker: tuple[BrokerProcess, Path, int], browser: Any
) -> None:
    """Logged in over HTTPS, the Connections tab marks a client's AMQP connection over TLS
    (RabbitMQ's SSL/TLS column)."""
    process, ca, amqps = https_broker
    browser.get(f"https://localhost:{process.mgmt_port}/console/")  # the test CA: not trusted
    browser.find_element(By.ID, "user").send_keys("admin")
    browser.find_element(By.ID, "password").send_keys(USERS["admin"][0])
    browser.find_element(By.ID, "login-button").click()

    def banner() -> str | None:
        found = browser.find_elements(By.ID, "role-banner")
        text = found[0].text if found else ""
        return text if text.startswith("STAND-ALONE") else None

    assert "not in an HA cluster" in poll_until(banner, 10, "the console over HTTPS")
    tls = pika.ConnectionParameters(
        "localhost",
        amqps,
        credentials=pika.PlainCredentials("app", USERS["app"][0]),
        ssl_options=pika.SSLOptions(ssl.create_default_context(cafile=str(ca)), "localhost"),
    )
    with pika.BlockingConnection(tls):
        browser.execute_script("window.location.hash = '#connections'")
        cell = "#connections tr[data-user='app'] td.tls"
        seen(browser, lambda: text(browser, cell) == "TLS", what="its connection marked TLS")
