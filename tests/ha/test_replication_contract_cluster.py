"""Issue 24's two reproductions against a real primary and two backups.

A client declares what the replication wire cannot carry: arguments nested 40 deep (the
configuration wire takes fewer), or a queue name of 250 bytes (a backup's stream name
``qpid.ha-queue:<name>`` would pass 255 bytes). Before the replication contract the first
never got its declare-ok and the second's queue could not be replicated (a backup's
subscribe raised); both left the cluster unable to confirm while every status said "in
sync". Now each declare is refused at once with 406 naming the limit, a confirmed publish
on another queue is confirmed, both backups stay in the in-sync set, and no broker writes a
traceback.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any
from urllib.parse import quote

import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from common.polling import poll_until
from tests.ha.cluster import Cluster, http

#: What "promptly" means for a refused declare (today: never).
ANSWER_WITHIN = 10.0


@pytest.fixture(scope="module")
def trio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A primary (broker 0) and two ready backups, shared by this module's tests."""
    cluster = Cluster(tmp_path_factory.mktemp("trio"), 3).start()
    try:
        cluster.promote(0, epoch=1)
        cluster.wait_state(0, "active")
        cluster.wait_state(1, "ready")
        cluster.wait_state(2, "ready")
        poll_until(lambda: _in_sync_backups(cluster) == 2, 15)
        yield cluster
    finally:
        cluster.stop()


def _in_sync_backups(cluster: Cluster) -> int:
    backups = cluster.ha(0)["backups"]
    return sum(1 for b in backups if b["ready"] and b["in_sync"] and not b["pending_removal"])


def _within(seconds: float, call: Callable[[], Any]) -> Any:
    """``call()``'s result or exception, or AssertionError if it has not returned in
    ``seconds`` (the thread is left to end with the brokers' sockets)."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = call()
        except BaseException as exc:
            outcome["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        raise AssertionError(f"no answer in {seconds} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("result")


def _refused_declare(cluster: Cluster, declare: Callable[[BlockingChannel], Any]) -> str:
    """The reply text of the channel close a declare gets (406), within ANSWER_WITHIN."""
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", cluster.ports[0]))
    try:
        channel = connection.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            _within(ANSWER_WITHIN, lambda: declare(channel))
        assert refused.value.reply_code == 406, refused.value
        return str(refused.value.reply_text)
    finally:
        _within(ANSWER_WITHIN, connection.close)


def _confirmed_publish_and_in_sync(cluster: Cluster, queue: str) -> None:
    """A confirmed publish on ``queue`` is confirmed and is on both backups; both stay in
    the in-sync set; no broker wrote a traceback."""
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", cluster.ports[0]))
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        _within(ANSWER_WITHIN, lambda: channel.queue_declare(queue, durable=True))
        _within(
            ANSWER_WITHIN,
            lambda: channel.basic_publish("", queue, b"after", mandatory=True),
        )
    finally:
        _within(ANSWER_WITHIN, connection.close)
    poll_until(lambda: cluster.queue_messages(1, queue) == 1, 10)
    poll_until(lambda: cluster.queue_messages(2, queue) == 1, 10)
    assert _in_sync_backups(cluster) == 2, cluster.ha(0)["backups"]
    for i in (1, 2):
        assert cluster.state(i) == "ready"
        assert cluster.ha(i)["link_error"] is None
    for broker in cluster.brokers:
        stderr = (broker.workdir / "stderr").read_text(errors="replace")
        assert "Traceback" not in stderr and "Exception in callback" not in stderr, stderr[-3000:]
        assert "exception was never retrieved" not in stderr, stderr[-3000:]


def _nested(levels: int) -> dict[str, Any]:
    table: dict[str, Any] = {"leaf": 1}
    for _ in range(levels - 1):
        table = {"x": table}
    return table


def test_arguments_nested_40_deep_are_refused_and_the_cluster_keeps_confirming(
    trio: Cluster,
) -> None:
    text = _refused_declare(
        trio, lambda ch: ch.queue_declare("deep", arguments={"x-nested": _nested(39)})
    )
    assert "nest" in text and "40" in text, text
    _confirmed_publish_and_in_sync(trio, "after-deep")
    assert trio.queue_messages(0, "deep") == -1  # never created


def test_a_250_byte_queue_name_is_refused_and_the_cluster_keeps_confirming(
    trio: Cluster,
) -> None:
    name = "q" * 250
    text = _refused_declare(trio, lambda ch: ch.queue_declare(name, durable=True))
    assert "250" in text and "255" in text, text
    _confirmed_publish_and_in_sync(trio, "after-long")


def test_names_of_any_utf8_replicate_to_both_backups(trio: Cluster) -> None:
    """Names RabbitMQ takes (pamqp's pattern refused them in a backup's subscribe)."""
    names = ["t.a=b", "t.é", "t.a*b", "%", "<img src=x onerror=alert(1)>", "é" * 120]
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", trio.ports[0]))
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        for name in names:
            _within(ANSWER_WITHIN, partial(channel.queue_declare, name, durable=True))
            _within(ANSWER_WITHIN, partial(channel.basic_publish, "", name, b"m"))
    finally:
        _within(ANSWER_WITHIN, connection.close)

    def on_backup(port: int, path: str) -> bool:
        return bool(http("GET", port, path).get("messages") == 1)

    for i in (1, 2):
        for name in names:
            path = f"/api/queues/%2F/{quote(name, safe='')}"
            poll_until(partial(on_backup, trio.brokers[i].mgmt_port, path), 10)
    assert _in_sync_backups(trio) == 2


def test_the_management_api_is_held_to_the_same_contract(trio: Cluster) -> None:
    """PUT /api/queues and /api/exchanges go through the same virtual host: 400 naming the
    limit, nothing created, the backups still in sync."""
    port = trio.brokers[0].mgmt_port
    deep = http("PUT", port, "/api/queues/%2F/api-deep", {"arguments": {"x": _nested(39)}})
    assert deep["http_status"] == 400 and "nest 40" in deep["reason"], deep
    name = "e" * 250
    long = http("PUT", port, f"/api/queues/%2F/{name}", {"durable": True})
    assert long["http_status"] == 400 and "250 bytes" in long["reason"], long
    exchange = http(
        "PUT", port, "/api/exchanges/%2F/api-x", {"type": "direct", "arguments": {"f": 0.1}}
    )
    assert exchange["http_status"] == 400 and "32-bit" in exchange["reason"], exchange
    reserved = http("PUT", port, "/api/queues/%2F/qpid.ha-queue:x", {})
    assert reserved["http_status"] == 403, reserved
    assert http("GET", port, "/api/queues/%2F/api-deep")["http_status"] == 404
    assert _in_sync_backups(trio) == 2
