"""The console's vhost limits (issue 30), driven in a real browser: a part of the admin
page's test (tests/console/test_console_browser.py), which shares its cluster and its
vhost. An administrator sets ``max-queues`` on a vhost in the "Users & vhosts" tab: the
vhosts table shows it, every broker of the cluster has it, the primary refuses a new queue
there with 406 as RabbitMQ does; cleared in the page, a queue is made again."""

from __future__ import annotations

import functools
from typing import Any

import pika
import pika.exceptions
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from common.polling import poll_until
from tests.agent.agent_cluster import AgentCluster, Node
from tests.console.page import click, seen, text


def _limits_on(node: Node, vhost: str) -> Any:
    from tests.ha.cluster import http

    return http("GET", node.mgmt_port, f"/api/vhost-limits/{vhost}")


def _declare(node: Node, vhost: str, queue: str) -> None:
    parameters = pika.ConnectionParameters("127.0.0.1", node.port, vhost)
    with pika.BlockingConnection(parameters) as connection:
        connection.channel().queue_declare(queue)


def a_limit_set_and_cleared_in_the_page(
    browser: Any, cluster: AgentCluster, primary: Node, vhost: str
) -> None:
    """``vhost`` (made in the page, empty) gets max-queues 0, then loses it."""
    browser.execute_script("document.querySelector('#vhost-limit-form details').open = true")
    Select(browser.find_element(By.ID, "limit-vhost")).select_by_value(vhost)
    Select(browser.find_element(By.ID, "limit-name")).select_by_value("max-queues")
    browser.find_element(By.ID, "limit-value").send_keys("0")
    browser.execute_script("arguments[0].click()", browser.find_element(By.ID, "set-limit-button"))
    seen(browser, lambda: f"max-queues of vhost {vhost} set to 0" in text(browser, "#toast"))
    cell = f"#vhosts tr[data-vhost='{vhost}'] td.limits"
    seen(browser, lambda: text(browser, cell) == "max-queues: 0 Clear", what="the limit shown")
    wanted = [{"vhost": vhost, "value": {"max-queues": 0}}]
    for node in cluster.nodes:
        has = functools.partial(_limits_on, node, vhost)
        poll_until(lambda: has() == wanted, 10, f"the limit on {node.name}")  # noqa: B023
    try:
        _declare(primary, vhost, "over")
    except pika.exceptions.ChannelClosedByBroker as exc:
        assert exc.reply_code == 406
        assert exc.reply_text.endswith(f"queue limit in vhost '{vhost}' (0) is reached")
    else:
        raise AssertionError("a queue over max-queues was declared")
    click(browser, f"{cell} button.clear-limit", what="the limit's Clear button")
    assert text(browser, "#confirm-text") == f"Clear max-queues of vhost {vhost}?"
    browser.find_element(By.ID, "confirm-ok").click()
    seen(browser, lambda: text(browser, cell) == "-", what="the limit gone")
    _declare(primary, vhost, "allowed")
