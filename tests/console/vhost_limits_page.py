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

from common.polling import poll_until
from tests.agent.agent_cluster import AgentCluster, Node
from tests.console.page import click, confirm_says, seen, text


def _limits_on(node: Node, vhost: str) -> Any:
    from tests.ha.cluster import http

    return http("GET", node.mgmt_port, f"/api/vhost-limits/{vhost}")


def _declare(node: Node, vhost: str, queue: str) -> None:
    parameters = pika.ConnectionParameters("127.0.0.1", node.port, vhost)
    with pika.BlockingConnection(parameters) as connection:
        connection.channel().queue_declare(queue)


_FILL_AND_SEND = """
const form = document.querySelector('#vhost-limit-form details');
const vhost = document.getElementById('limit-vhost');
if (!form || !vhost || ![...vhost.options].some((o) => o.value === arguments[0])) return false;
form.open = true;
vhost.value = arguments[0];
document.getElementById('limit-name').value = 'max-queues';
document.getElementById('limit-value').value = '0';
document.getElementById('set-limit-button').click();
return true;
"""


def a_limit_set_and_cleared_in_the_page(
    browser: Any, cluster: AgentCluster, primary: Node, vhost: str
) -> None:
    """``vhost`` (made in the page, empty) gets max-queues 0, then loses it."""
    # The form is filled and sent in one script turn: the page rebuilds its forms when the
    # vhosts or the role it saw change (a status tick late on a loaded machine), which
    # between separate WebDriver steps closed the form and dropped what was chosen.
    seen(browser, lambda: browser.execute_script(_FILL_AND_SEND, vhost), what="the limit sent")
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
    confirm_says(browser, lambda q: q == f"Clear max-queues of vhost {vhost}?")
    browser.find_element(By.ID, "confirm-ok").click()
    seen(browser, lambda: text(browser, cell) == "-", what="the limit gone")
    _declare(primary, vhost, "allowed")
