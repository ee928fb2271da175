"""A connection's data rates in the console (issue 30: RabbitMQ's From client / To client,
the ``recv_oct`` and ``send_oct`` rates): a part of the connections page's test
(tests/console/test_console_browser.py), which holds the client's connection open."""

from __future__ import annotations

from typing import Any

import pika

from tests.console.page import seen, text

#: A body big enough that a few a second are a rate the page shows in KiB/s.
BODY = b"x" * 2048


def rates_shown_while_it_publishes(browser: Any, client: pika.BlockingConnection, row: str) -> None:
    """While ``client`` publishes (unroutable messages: nothing is kept), its row's From
    client rate is above 0 B/s, as ``GET /api/connections`` has it."""
    channel = client.channel()

    def reading() -> str | None:
        channel.basic_publish("", "console-rates-nowhere", BODY)
        client.process_data_events(0)
        shown = text(browser, f"{row} td.recv-rate")
        return shown if shown.endswith("KiB/s") else None

    shown = seen(browser, reading, what="a From client rate in KiB/s")
    assert shown.endswith("/s") and text(browser, f"{row} td.send-rate").endswith("/s")
    listed = browser.execute_async_script(
        "fetch('/api/connections').then((r) => r.json()).then(arguments[0])"
    )
    mine = [c for c in listed if c["user"] == "app"]
    assert mine and mine[0]["recv_oct"] > 0 and mine[0]["send_oct"] > 0
    assert set(mine[0]["recv_oct_details"]) == {"rate"}
    channel.close()
