"""Names as RabbitMQ takes them, through the management API and the console in Chromium
(issue 24, item 3).

Queues and exchanges named ``t.a=b``, ``t.é``, ``t.a*b``, ``/``, ``%``, markup that would run
a script if a page put it in as HTML, and 255 bytes: the API finds each by its URL-encoded
name; the console shows each literally in its tables and in a queue's detail, its actions
(get a message) reach the right queue, and no script of a name ever runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import Any
from urllib.parse import quote

import pika
import pytest
from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.common.by import By

from tests.broker_process import BrokerProcess
from tests.console.page import click, log_in, seen, text
from tests.console.support import write_users
from tests.ha.cluster import http

pytestmark = pytest.mark.xdist_group("console_browser")  # with its browser

#: A name whose script, if a page ever ran it, leaves a mark the test reads.
MARKUP = '<img src=x onerror="window.__named=1">'
NAMES = [
    "t.a=b",
    "t.é",
    "t.a*b",
    "/",
    "%",
    "a/b%2Fc",
    "<img src=x onerror=alert(1)>",
    MARKUP,
    "<script>window.__named=2</script>",
    "n" * 255,
]


@pytest.fixture(scope="module")
def named_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    root = tmp_path_factory.mktemp("console-names")
    users = write_users(root / "users")
    process = BrokerProcess(root / "qpidd", args=[f"--sasl-users={users}"]).start()
    try:
        connection = pika.BlockingConnection(
            pika.URLParameters(f"amqp://guest:guest@127.0.0.1:{process.port}/%2F")
        )
        channel = connection.channel()
        for name in NAMES:
            channel.queue_declare(name)
            channel.exchange_declare(name, "fanout")
            channel.basic_publish("", name, f"to {name}".encode())
        connection.close()
        yield process
    finally:
        process.stop()


def test_the_api_finds_each_name_by_its_encoded_path(named_broker: BrokerProcess) -> None:
    port = named_broker.mgmt_port
    for name in NAMES:
        queue = http("GET", port, f"/api/queues/%2F/{quote(name, safe='')}")
        assert queue.get("name") == name and queue["messages"] == 1, queue
        exchange = http("GET", port, f"/api/exchanges/%2F/{quote(name, safe='')}")
        assert exchange.get("name") == name and exchange["type"] == "fanout", exchange
    assert set(NAMES) <= {q["name"] for q in http("GET", port, "/api/queues")}


def _cells(browser: Any, css: str, value: str) -> list[str]:
    """``value`` (JavaScript of ``r``) of every element ``css`` selects, read at once (the
    tables are re-rendered every second: elements found one call earlier may be gone)."""
    found = browser.execute_script(
        f"return [...document.querySelectorAll({css!r})].map((r) => {value})"
    )
    return [str(v) for v in found]


def _shows(browser: Any, css: str, wanted: str) -> bool:
    return wanted in text(browser, css)


def _no_script_ran(browser: Any) -> None:
    assert browser.execute_script("return window.__named === undefined")
    with pytest.raises(NoAlertPresentException):
        _ = browser.switch_to.alert.text


def test_the_console_shows_each_name_literally_and_runs_none(
    named_broker: BrokerProcess, browser: Any
) -> None:
    log_in(browser, named_broker, "admin", "queues")

    def queue_names() -> list[str] | None:
        names = _cells(browser, "#queues tbody tr td:first-child", "r.textContent")
        return names if set(NAMES) <= set(names) else None

    shown = seen(browser, queue_names, what="every queue listed")
    assert all(shown.count(name) == 1 for name in NAMES)
    _no_script_ran(browser)
    for name in ("<img src=x onerror=alert(1)>", "a/b%2Fc", "t.é", "n" * 255):
        index = _cells(browser, "#queues tbody tr", "r.dataset.queue").index(name)
        click(browser, f"#queues tbody tr:nth-child({index + 1})", what=f"queue {name!r}")
        seen(browser, partial(_shows, browser, "#queue-detail h2", f"Queue {name}"))
        click(browser, "#get-message")
        seen(browser, partial(_shows, browser, "#got", f"{name}: to {name}"), what="its message")
        _no_script_ran(browser)
    browser.execute_script("window.location.hash = '#exchanges'")

    def exchange_names() -> set[str] | None:
        names = set(_cells(browser, "#exchanges tbody tr td:first-child", "r.textContent"))
        return names if set(NAMES) <= names else None

    seen(browser, exchange_names, what="every exchange listed")
    _no_script_ran(browser)
    assert not browser.find_elements(By.CSS_SELECTOR, "#queues img, #exchanges img, script[src=x]")
