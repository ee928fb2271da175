"""pika BlockingConnection: topic, headers and alternate-exchange routing."""

from __future__ import annotations

from typing import Any

import pika
import pytest
from pika.exceptions import UnroutableError
from pika.spec import BasicProperties

from tests.e2e.support import drain, unique


def test_topic_routing(conn: pika.BlockingConnection) -> None:
    channel = conn.channel()
    exchange = unique("topic")
    channel.exchange_declare(exchange, "topic", auto_delete=True)
    patterns = {"star": "a.*.c", "hash": "a.#", "tail": "#.z", "exact": "a.b.c", "all": "#"}
    queues = {name: unique(f"topic-{name}") for name in patterns}
    for name, pattern in patterns.items():
        channel.queue_declare(queues[name], auto_delete=True)
        channel.queue_bind(queues[name], exchange, routing_key=pattern)
    keys = ["a.b.c", "a.x.c", "a", "a.b.c.d", "q.z", "z", "a.b", "b.c"]
    for key in keys:
        channel.basic_publish(exchange, key, key.encode())
    expected = {
        "star": {"a.b.c", "a.x.c"},
        "hash": {"a.b.c", "a.x.c", "a", "a.b.c.d", "a.b"},
        "tail": {"q.z", "z"},
        "exact": {"a.b.c"},
        "all": set(keys),
    }
    for name, queue in queues.items():
        assert {body.decode() for body in drain(channel, queue)} == expected[name], name


def test_headers_routing(conn: pika.BlockingConnection) -> None:
    channel = conn.channel()
    exchange = unique("headers")
    channel.exchange_declare(exchange, "headers", auto_delete=True)
    q_all, q_any = unique("h-all"), unique("h-any")
    for queue, arguments in (
        (q_all, {"x-match": "all", "format": "pdf", "type": "report"}),
        (q_any, {"x-match": "any", "format": "pdf", "type": "log"}),
    ):
        channel.queue_declare(queue, auto_delete=True)
        channel.queue_bind(queue, exchange, arguments=arguments)
    messages: dict[bytes, dict[str, Any] | None] = {
        b"pdf-report": {"format": "pdf", "type": "report"},
        b"pdf": {"format": "pdf"},
        b"log": {"type": "log", "extra": 1},
        b"zip-report": {"format": "zip", "type": "report"},
        b"no-headers": None,
    }
    for body, headers in messages.items():
        channel.basic_publish(exchange, "ignored", body, BasicProperties(headers=headers))
    assert drain(channel, q_all) == [b"pdf-report"]
    assert drain(channel, q_any) == [b"pdf-report", b"pdf", b"log"]

    # The built-in amq.match exchange routes the same way.
    channel.queue_bind(q_all, "amq.match", arguments={"x-match": "any", "n": 7})
    channel.basic_publish("amq.match", "", b"seven", BasicProperties(headers={"n": 7}))
    channel.basic_publish("amq.match", "", b"eight", BasicProperties(headers={"n": 8}))
    assert drain(channel, q_all) == [b"seven"]
    channel.queue_unbind(q_all, "amq.match", arguments={"x-match": "any", "n": 7})


def test_alternate_exchange(conn: pika.BlockingConnection) -> None:
    channel = conn.channel()
    channel.confirm_delivery()
    alternate, main = unique("ae"), unique("main")
    q_main, q_alt = unique("ae-main"), unique("ae-alt")
    channel.exchange_declare(alternate, "fanout", auto_delete=True)
    channel.exchange_declare(
        main, "direct", auto_delete=True, arguments={"alternate-exchange": alternate}
    )
    for queue, exchange, key in ((q_main, main, "known"), (q_alt, alternate, "")):
        channel.queue_declare(queue, auto_delete=True)
        channel.queue_bind(queue, exchange, routing_key=key)

    channel.basic_publish(main, "known", b"direct")
    channel.basic_publish(main, "unknown", b"diverted", mandatory=True)  # routed: no return
    assert drain(channel, q_main) == [b"direct"]
    assert drain(channel, q_alt) == [b"diverted"]

    dangling = unique("dangling")
    channel.exchange_declare(
        dangling, "direct", auto_delete=True, arguments={"alternate-exchange": unique("none")}
    )
    with pytest.raises(UnroutableError):
        channel.basic_publish(dangling, "unknown", b"lost", mandatory=True)
    channel.exchange_delete(dangling)
