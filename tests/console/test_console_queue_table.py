"""The console's queue table in Chromium on a broker with a few hundred queues: the server
filters (a regular expression), sorts and pages it, and the page follows the queues live
(a message published shows in its row within the next ticks, by a delta). The exchanges'
table the same way (the server filters and pages it: the live stream carries no whole
list)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select

from tests.broker_process import BrokerProcess
from tests.console.page import classes, click, confirm_says, log_in, seen, text
from tests.console.support import write_users
from tests.ha.cluster import http

pytestmark = pytest.mark.xdist_group("console_browser")  # the module's browser

QUEUES = 300
EXCHANGES = 60


@pytest.fixture(scope="module")
def qpidd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker with :data:`QUEUES` queues ``t-000`` ... made by a pika client, queue
    ``t-007`` holding 5 messages and ``t-123`` 2."""
    root = tmp_path_factory.mktemp("console-queue-table")
    users = write_users(root / "users")
    process = BrokerProcess(root / "qpidd", args=[f"--sasl-users={users}"]).start()
    try:
        with pika.BlockingConnection(pika.URLParameters(process.url)) as connection:
            channel = connection.channel()
            for i in range(QUEUES):
                channel.queue_declare(f"t-{i:03d}")
            for i in range(EXCHANGES):
                channel.exchange_declare(f"x-{i:03d}", "fanout")
            for name, count in (("t-007", 5), ("t-123", 2)):
                for _ in range(count):
                    channel.basic_publish("", name, b"m")
        yield process
    finally:
        process.stop()


def row_keys(browser: Any, css: str, attribute: str) -> list[str]:
    """The rows' keys read in one script call: the live table is re-rendered every second,
    and one round trip per row on a loaded machine would keep meeting replaced rows."""
    script = (
        "return Array.from(document.querySelectorAll(arguments[0]),"
        " row => row.getAttribute(arguments[1]));"
    )
    return [str(key) for key in browser.execute_script(script, css, attribute)]


def names(browser: Any) -> list[str]:
    return row_keys(browser, "#queues tbody tr", "data-queue")


def test_filter_sort_and_page_the_queue_table(browser: Any, qpidd: BrokerProcess) -> None:
    log_in(browser, qpidd, "watcher", page="queues")
    # the first page of 50, by name
    seen(
        browser,
        lambda: (page := names(browser))[:1] == ["t-000"] and len(page) == 50,
        what="page 1",
    )
    assert "page 1 of 6" in text(browser, "#queue-page-info")
    assert f"{QUEUES} queues" in text(browser, "#queue-page-info")
    click(browser, "#queue-next")
    seen(browser, lambda: names(browser)[:1] == ["t-050"], what="page 2")
    # sorted by ready messages, most first (the page goes back to 1)
    click(browser, "#queues th[data-sort='messages']")
    click(browser, "#queues th[data-sort='messages']")
    seen(browser, lambda: names(browser)[:2] == ["t-007", "t-123"], what="sorted, most first")
    header = "#queues th[data-sort='messages']"  # the header is not drawn again
    assert "sorted-desc" in str(
        browser.find_element(By.CSS_SELECTOR, header).get_attribute("class")
    )
    # a regular expression: t-1x0 (10 queues), on pages of 20
    Select(browser.find_element(By.ID, "queue-page-size")).select_by_visible_text("20")
    browser.find_element(By.ID, "queue-regex").click()
    browser.find_element(By.ID, "queue-filter").send_keys("^t-1[0-9]0$")
    wanted = {f"t-1{i}0" for i in range(10)}
    # the rows are drawn again each second: each check reads them anew (seen)
    seen(browser, lambda: set(names(browser)) == wanted, what="filtered to t-1x0")
    assert "10 of 300 queues" in text(browser, "#queue-page-info")
    # a regular expression that could backtrack: the server's 400, the table unchanged
    box = browser.find_element(By.ID, "queue-filter")
    box.send_keys(Keys.CONTROL, "a")  # typed over: the box is never empty meanwhile
    box.send_keys("(a+)+")
    seen(browser, lambda: "repeats a repetition" in text(browser, "#queue-query-error"))
    assert seen(browser, lambda: set(names(browser)) == wanted, what="the table as it was")
    # live: a message published to a queue of the page shows in its row (a delta)
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys("t-150")
    seen(browser, lambda: names(browser) == ["t-150"], what="t-150 alone")
    with pika.BlockingConnection(pika.URLParameters(qpidd.url)) as connection:
        connection.channel().basic_publish("", "t-150", b"m")
    seen(browser, lambda: text(browser, "#queues tbody tr td.ready") == "1", what="live depth")


def exchange_names(browser: Any) -> list[str]:
    return row_keys(browser, "#exchanges tbody tr", "data-exchange")


def test_the_exchanges_table_is_filtered_and_paged_by_the_server(
    browser: Any, qpidd: BrokerProcess
) -> None:
    log_in(browser, qpidd, "watcher", page="exchanges")
    seen(browser, lambda: len(exchange_names(browser)) == 50, what="a page of 50 exchanges")
    info = text(browser, "#exchanges-page-info")
    assert info.startswith("page 1 of 2 · ") and info.endswith(" exchanges"), info
    total = int(info.split(" · ")[1].split()[0])
    assert total > EXCHANGES  # and the built-in ones
    click(browser, "#exchanges-next")
    seen(browser, lambda: len(exchange_names(browser)) == total - 50, what="page 2")
    browser.find_element(By.ID, "exchanges-regex").click()
    browser.find_element(By.ID, "exchanges-filter").send_keys("^x-05")
    wanted = {f"x-05{i}" for i in range(10)}
    seen(browser, lambda: set(exchange_names(browser)) == wanted, what="filtered to x-05x")
    assert text(browser, "#exchanges-page-info") == f"page 1 of 1 · 10 of {total} exchanges"
    # sorted by the server, by a click on a header: names, last first
    click(browser, "#exchanges th[data-sort='name']")
    click(browser, "#exchanges th[data-sort='name']")
    seen(browser, lambda: exchange_names(browser)[:2] == ["x-059", "x-058"], what="by name, desc")
    header = browser.find_element(By.CSS_SELECTOR, "#exchanges th[data-sort='name']")
    assert "sorted-desc" in str(header.get_attribute("class"))


#: the filter box's table: its rows and the attribute that names each
_FILTERED_ROWS = {
    "exchanges": ("#exchanges tbody tr", "data-exchange"),
    "queue": ("#queues tbody tr", "data-queue"),
}


def shown(browser: Any, page: str, box: str, filter_text: str) -> None:
    """Open ``page`` with its table filtered to ``filter_text`` (typed over what it had)."""
    browser.execute_script(f"window.location.hash = '#{page}'")
    field = seen(browser, lambda: browser.find_element(By.ID, f"{box}-filter"), what=box)
    field.send_keys(Keys.CONTROL, "a")
    field.send_keys(filter_text)
    rows = _FILTERED_ROWS.get(box)
    if rows is None or not filter_text:
        return

    def filtered() -> bool:
        # the server's filtered page drawn (the table shrinks: a click aimed at what is
        # below it before then lands elsewhere)
        info = text(browser, f"#{box}-page-info")
        keys = row_keys(browser, *rows)
        return bool(re.search(r"· [\d,]+ of [\d,]+ ", info)) and all(
            filter_text in key for key in keys
        )

    seen(browser, filtered, what=f"{box} filtered to {filter_text}")


def test_an_administrator_adds_binds_publishes_gets_and_removes(
    browser: Any, qpidd: BrokerProcess, shots: Path
) -> None:
    """RabbitMQ's object pages in one walk, as an administrator: add a queue (with an
    argument) and an exchange; bind them from the queue's page; publish to the exchange
    with a delivery mode, headers and properties; get it with "Automatic ack" (taken
    away), its properties shown; the queue's consumers; unbind; delete the exchange; a
    client's own name for its connection; the bindings and connections sorted by a
    click."""
    queue, exchange, app_name = "made-in-console", "console-direct", "orders-app (pika)"
    log_in(browser, qpidd, "admin", page="overview")
    # the Overview (RabbitMQ's first page): totals as the API counts them, node figures
    listed = http("GET", qpidd.mgmt_port, "/api/queues")
    ready = sum(q["messages"] for q in listed)
    totals = (f"{len(listed):,}", f"{ready:,}")
    shown_totals = ("#ov-queues .value", "#ov-ready .value")
    seen(
        browser, lambda: tuple(text(browser, css) for css in shown_totals) == totals, what="totals"
    )
    assert text(browser, "#ov-publish .value").endswith("/s")
    node = "#overview-node tbody tr"
    assert re.fullmatch(r"\d+ / [\d,]+ available", text(browser, f"{node} td.fds"))
    assert re.fullmatch(r"[\d.]+ MiB.*", text(browser, f"{node} td.memory"))
    listeners = text(browser, f"{node} td.listeners")
    assert listeners == f"amqp {qpidd.port}, http {qpidd.mgmt_port}", listeners
    # its charts over RabbitMQ's ranges: the last minute, the last day, then the last hour
    axis = "#overview-charts .chart svg text:last-of-type"
    seen(browser, lambda: text(browser, axis).startswith("last minute ("), what="a minute")
    for label, axis_text in (("Last day", "last day ("), ("Last hour", "last hour (")):
        Select(browser.find_element(By.ID, "overview-range")).select_by_visible_text(label)
        seen(browser, lambda: text(browser, axis).startswith(axis_text), what=label)  # noqa: B023
    browser.save_screenshot(str(shots / "overview.png"))
    browser.execute_script("window.location.hash = '#queues'")
    seen(browser, lambda: browser.find_element(By.ID, "add-queue"), what="the add form")
    browser.find_element(By.CSS_SELECTOR, "#add-queue summary").click()
    browser.find_element(By.ID, "new-queue-name").send_keys(queue)
    browser.find_element(By.ID, "new-queue-arguments").send_keys('{"x-max-length": 10}')
    browser.find_element(By.ID, "add-queue-button").click()
    seen(browser, lambda: f"queue {queue} declared in vhost /" in text(browser, "#toast"))
    shown(browser, "exchanges", "exchanges", exchange)
    click(browser, "#exchange-add summary")
    browser.find_element(By.ID, "new-exchange-name").send_keys(exchange)
    browser.find_element(By.ID, "add-exchange-button").click()
    row = f"#exchanges tr[data-exchange='{exchange}']"
    seen(browser, lambda: browser.find_elements(By.CSS_SELECTOR, row), what="the new exchange")
    assert text(browser, f"{row} td:nth-child(3)") == "direct"

    # the queue's page: its argument, the default binding; bound from there
    shown(browser, "queues", "queue", queue)
    mine = f"#queues tr[data-queue='{queue}']"
    seen(browser, lambda: text(browser, f"{mine} td.args") == "x-max-length=10", what="args")
    click(browser, mine)
    seen(browser, lambda: browser.find_element(By.ID, "bind-source")).send_keys(exchange)
    browser.find_element(By.ID, "bind-key").send_keys("k1")
    browser.find_element(By.ID, "bind-button").click()
    bound = f"#queue-bindings tr[data-source='{exchange}']"
    seen(browser, lambda: text(browser, f"{bound} td.key") == "k1", what="the new binding")
    assert text(browser, "#queue-bindings tbody tr:first-child td") == "(default exchange binding)"

    # a consumer on the queue (shown on its page), from a client that names its connection
    parameters = pika.URLParameters(qpidd.url)
    parameters.client_properties = {"connection_name": app_name}
    with pika.BlockingConnection(parameters) as client:
        channel = client.channel()
        channel.basic_consume(queue, lambda *a: None, consumer_tag="orders-worker")
        tag = "#queue-consumers tr[data-tag='orders-worker'] td.tag-name"
        seen(browser, lambda: text(browser, tag) == "orders-worker", what="its consumer")
        # the Channels and Consumers tabs (RabbitMQ's) list it too, pages of the live
        # stream: no request of their own each second
        browser.execute_script("performance.clearResourceTimings()")
        browser.execute_script("window.location.hash = '#consumers'")
        consumer = "#consumers-table tr[data-tag='orders-worker']"
        seen(browser, lambda: text(browser, f"{consumer} td.queue") == queue, what="consumers")
        on = text(browser, f"{consumer} td.channel")
        browser.execute_script("window.location.hash = '#channels'")
        mine_channel = f"#channels-table tr[data-channel='{on}']"
        seen(
            browser,
            lambda: text(browser, f"{mine_channel} td.consumers") == "1",
            what="its channel",
        )
        assert "1 shown" in text(browser, "#channels-page-info")
        live_at = "return window.consoleApp.state.snapshot.at"
        since = browser.execute_script(live_at)
        seen(browser, lambda: browser.execute_script(live_at) >= since + 2.5, what="3 ticks")
        fetched = browser.execute_script(
            "return performance.getEntriesByType('resource').map((entry) => entry.name)"
        )
        # the tabs' reads were /api/channels?page=... and /api/consumers?page=...; the queue
        # page's consumers (/api/consumers?use_regex=...) may end after the clear
        polled = [
            url for url in fetched if "/api/channels?page=" in url or "/api/consumers?page=" in url
        ]
        assert not polled, fetched
        channel.basic_cancel("orders-worker")  # the message below is the get's
        # the client's own name for its connection; the connections sorted by user
        shown(browser, "connections", "connections", "")
        named = "#connections td.name .client-name"
        seen(browser, lambda: text(browser, named) == app_name, what="the client's name")
        click(browser, "#connections th[data-sort='user']")
        header = "#connections th[data-sort='user']"
        seen(browser, lambda: "sorted-asc" in classes(browser, header), what="sorted by user")

    # publish to the exchange with a delivery mode, headers and properties
    shown(browser, "exchanges", "exchanges", exchange)
    click(browser, f"{row} button.publish")
    seen(browser, lambda: browser.find_element(By.ID, "publish-key")).send_keys("k1")
    Select(browser.find_element(By.ID, "publish-delivery-mode")).select_by_value("2")
    browser.find_element(By.ID, "publish-headers").send_keys('{"region": "eu"}')
    browser.find_element(By.ID, "publish-properties").send_keys('{"content_type": "text/plain"}')
    payload = browser.find_element(By.ID, "publish-payload")
    payload.clear()
    payload.send_keys("order 1")
    browser.find_element(By.ID, "publish-send").click()
    seen(browser, lambda: f"published to {exchange}: 1 queue(s)" in text(browser, "#toast"))

    # get with "Automatic ack": the message is taken away, its properties shown
    shown(browser, "queues", "queue", queue)
    seen(browser, lambda: text(browser, f"{mine} td.ready") == "1", what="1 ready")
    click(browser, mine)
    mode = seen(browser, lambda: browser.find_element(By.ID, "get-ackmode"), what="get form")
    Select(mode).select_by_visible_text("Automatic ack")
    browser.find_element(By.ID, "get-message").click()
    got = seen(browser, lambda: text(browser, "#got"), what="the message got")
    assert got.startswith("Message 1: k1: order 1; 0 left"), got
    for part in ('"delivery_mode":2', '"content_type":"text/plain"', '"region":"eu"'):
        assert part in got, got
    seen(browser, lambda: text(browser, f"{mine} td.ready") == "0", what="taken away")
    browser.save_screenshot(str(shots / "queue-page.png"))

    # unbind from the queue's page, then delete the exchange (each after confirming)
    click(browser, f"{bound} button.unbind")
    confirm_says(browser, lambda q: f"Unbind queue {queue} from exchange {exchange}" in q)
    browser.find_element(By.ID, "confirm-ok").click()
    seen(browser, lambda: not browser.find_elements(By.CSS_SELECTOR, bound), what="unbound")
    shown(browser, "exchanges", "exchanges", exchange)
    click(browser, "#bindings th[data-sort='routing_key']")
    click(browser, f"{row} button.delete-exchange")
    confirm_says(browser, lambda q: f"Delete exchange {exchange}" in q)
    browser.find_element(By.ID, "confirm-ok").click()
    seen(browser, lambda: not browser.find_elements(By.CSS_SELECTOR, row), what="deleted")
    assert "sorted-asc" in classes(browser, "#bindings th[data-sort='routing_key']")
