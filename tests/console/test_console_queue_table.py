"""The console's queue table in Chromium on a broker with a few hundred queues: the server
filters (a regular expression), sorts and pages it, and the page follows the queues live
(a message published shows in its row within the next ticks, by a delta). The exchanges'
table the same way (the server filters and pages it: the live stream carries no whole
list)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pika
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select

from tests.broker_process import BrokerProcess
from tests.console.page import click, log_in, seen, text
from tests.console.support import write_users

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


def names(browser: Any) -> list[str]:
    rows = browser.find_elements(By.CSS_SELECTOR, "#queues tbody tr")
    return [str(row.get_attribute("data-queue")) for row in rows]


def test_filter_sort_and_page_the_queue_table(browser: Any, qpidd: BrokerProcess) -> None:
    log_in(browser, qpidd, "watcher", page="queues")
    # the first page of 50, by name
    seen(browser, lambda: len(names(browser)) == 50 and names(browser)[0] == "t-000", what="page 1")
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
    rows = browser.find_elements(By.CSS_SELECTOR, "#exchanges tbody tr")
    return [str(row.get_attribute("data-exchange")) for row in rows]


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
