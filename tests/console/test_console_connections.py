"""The console's Connections tab in Chromium against a stand-alone broker with clients of
both protocols (issue 30): an AMQP 1.0 connection (Qpid Proton) is in the live list
beside a 0-9-1 one (pika), each with its protocol in RabbitMQ's words ("AMQP 1-0",
"AMQP 0-9-1"); the table sorted by a data rate (a click on **From client**: the server
sorts by ``recv_oct_details.rate``) puts the connection that sends first, and follows
when the other one sends."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pika
import pytest
from proton import Message
from proton.utils import BlockingConnection
from selenium.webdriver.common.by import By

from tests.amqp10.helpers import declare
from tests.broker_process import BrokerProcess
from tests.console.page import click, log_in, seen, text
from tests.console.support import USERS, write_users

pytestmark = pytest.mark.xdist_group("console_browser")  # with its browser

QUEUE = "console-both-protocols"
#: A body big enough that a few a second are a rate the page shows in KiB/s.
BODY = b"x" * 2048

_ROWS = """
return Array.from(document.querySelectorAll('#connections tbody tr'), (row) => [
  row.getAttribute('data-connection'), row.getAttribute('data-user'),
  row.querySelector('td.protocol').innerText, row.querySelector('td.recv-rate').innerText]);
"""


_SORTED_BY_RATE = (
    "fetch('/api/connections?sort=recv_oct_details.rate&sort_reverse=true&columns=user')"
    ".then((r) => r.json()).then(arguments[0])"
)


@pytest.fixture(scope="module")
def qpidd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    root = tmp_path_factory.mktemp("console-connections")
    users = write_users(root / "users")
    process = BrokerProcess(root / "qpidd", args=[f"--sasl-users={users}"]).start()
    try:
        declare(process, QUEUE)
        yield process
    finally:
        process.stop()


def rows(browser: Any) -> list[tuple[str, str, str, str]]:
    """Each row's id, user, protocol and From client rate, in the table's order, read in
    one script call (the table is drawn again at each tick)."""
    return [(str(a), str(b), str(c), str(d)) for a, b, c, d in browser.execute_script(_ROWS)]


def first_while(browser: Any, send: Callable[[], None], user: str) -> Callable[[], bool]:
    """A check that sends once more, then whether ``user``'s connection heads the table
    with a rate in KiB/s (the busiest first)."""

    def check() -> bool:
        send()
        shown = rows(browser)
        return bool(shown) and shown[0][1] == user and shown[0][3].endswith("KiB/s")

    return check


def test_an_amqp_1_0_connection_is_listed_live_and_the_busiest_sorts_first(
    browser: Any, qpidd: BrokerProcess
) -> None:
    log_in(browser, qpidd, "watcher", "connections")
    one = BlockingConnection(
        f"amqp://app:{USERS['app'][0]}@127.0.0.1:{qpidd.port}",
        allowed_mechs="PLAIN",
        timeout=10,
    )
    sender = one.create_sender(QUEUE)
    parameters = pika.URLParameters(qpidd.url)  # guest's
    try:
        with pika.BlockingConnection(parameters) as zero_nine_one:
            channel = zero_nine_one.channel()
            protocols = {("app", "AMQP 1-0"), ("guest", "AMQP 0-9-1")}
            seen(
                browser,
                lambda: {(user, protocol) for _, user, protocol, _ in rows(browser)} == protocols,
                what="both connections with their protocols",
            )
            click(browser, "#connections tr[data-user='app']")
            note = seen(browser, lambda: text(browser, "#channels-none"), what="no channels")
            assert "is AMQP 1-0: its 1 session(s)" in note, note
            # sorted by From client, the busiest first (two clicks: descending)
            header = "#connections th[data-sort='recv_oct_details.rate']"
            click(browser, header)
            click(browser, header)

            def proton_sends() -> None:
                sender.send(Message(body=BODY.decode()))  # waits for its disposition

            seen(browser, first_while(browser, proton_sends, "app"), what="the 1.0 one first")
            classes = browser.find_element(By.CSS_SELECTOR, header).get_attribute("class")
            assert "sorted-desc" in str(classes).split()

            def pika_sends() -> None:
                channel.basic_publish("", "console-rates-nowhere", BODY)
                zero_nine_one.process_data_events(0)

            seen(browser, first_while(browser, pika_sends, "guest"), what="the 0-9-1 one first")

            def api_busiest() -> str:  # the API sorts the same way
                pika_sends()
                listed = browser.execute_async_script(_SORTED_BY_RATE)
                return str(listed[0]["user"]) if len(listed) == 2 else ""

            seen(browser, lambda: api_busiest() == "guest", what="the API's busiest first")
    finally:
        one.close()
