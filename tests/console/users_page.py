"""The console's "Users & vhosts" forms driven in a real browser (issue 30), for the admin
page's test and the fail-over test (tests/console/test_console_browser.py): a vhost, a user
and its permission made in the page; and such a user logging in on a broker, in its console
and with pika in its vhost, its connection shown on the Connections tab."""

from __future__ import annotations

from typing import Any

import pika

from tests.agent.agent_cluster import Node
from tests.console.page import log_in, seen, text

#: Fill a form's fields and press its button in one script turn: the page rebuilds its
#: forms when the vhosts or the role it saw change (a tick late on a loaded machine), which
#: between separate WebDriver steps closed a form and dropped what was typed. False while a
#: field, or the option a select is to take, is not there yet.
_FILL_AND_SEND = """
const [values, button] = arguments;
for (const [id, value] of Object.entries(values)) {
  const field = document.getElementById(id);
  if (!field) return false;
  const options = field.tagName === 'SELECT' ? [...field.options].map((o) => o.value) : [value];
  if (!options.includes(value)) return false;
}
for (const [id, value] of Object.entries(values)) {
  const field = document.getElementById(id);
  field.closest('details').open = true;
  field.value = value;
}
document.getElementById(button).click();
return true;
"""


def send_form(browser: Any, values: dict[str, str], button: str, answer: str) -> None:
    """The form of ``button`` filled with ``values`` (field id -> value) and sent; then its
    ``answer`` in the page's toast."""
    sent = lambda: browser.execute_script(_FILL_AND_SEND, values, button)  # noqa: E731
    seen(browser, sent, what=f"the form of {button} sent")
    seen(browser, lambda: answer in text(browser, "#toast"), what=answer)


def add_vhost(browser: Any, vhost: str) -> None:
    send_form(browser, {"new-vhost-name": vhost}, "add-vhost-button", f"vhost {vhost} added")


def add_user(browser: Any, user: str, password: str, tags: str) -> None:
    fields = {"new-user-name": user, "new-user-password": password, "new-user-tags": tags}
    send_form(browser, fields, "add-user-button", f"user {user} saved ({tags})")


def set_permission(browser: Any, user: str, vhost: str) -> None:
    """Every right (``.*``, the form's default) for ``user`` in ``vhost``."""
    fields = {"permission-user": user, "permission-vhost": vhost}
    send_form(browser, fields, "set-permission-button", f"{user} may open vhost {vhost}")


def logs_in_on(browser: Any, node: Node, user: str, password: str, vhost: str) -> None:
    """``user`` opens ``node``'s console (Chromium), then an AMQP connection (pika) to
    ``vhost`` there, declares a queue in it, and the console lists that connection in
    ``vhost``."""
    log_in(browser, node, user, "connections", password=password)
    credentials = pika.PlainCredentials(user, password)
    parameters = pika.ConnectionParameters("127.0.0.1", node.port, vhost, credentials)
    with pika.BlockingConnection(parameters) as client:
        client.channel().queue_declare(f"{user}-inbox")
        cell = f"#connections tr[data-user='{user}'] td.vhost"
        seen(browser, lambda: text(browser, cell) == vhost, what=f"{user}'s connection in {vhost}")
