"""Issue 24's two reproductions against a real primary and two backups.

A client declares arguments nested 40 deep, or a queue name of 250 bytes. Before the
replication contract the first never got its declare-ok and the second's queue could not be
replicated (a backup's stream name ``qpid.ha-queue:<name>`` passed 255 bytes); both left the
cluster unable to confirm while every status said "in sync". On a cluster that speaks
replication format 2 (every broker of this tree) both are accepted, replicated to both
backups, and a confirmed publish to them is confirmed and on both backups.

With a backup that speaks only format 1 (release 0.1.0's wire; here the test-only
environment variable): while the primary holds such a queue, that backup's link is refused
at connection.open with one line naming the queue (on both sides: never a stall); once the
queue is gone it joins, and from then on such declares are refused at once with 406 naming
the limit and the backup, a confirmed publish on another queue is confirmed, both backups
stay in the in-sync set, and no broker writes a traceback.
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
from common.version import REPLICATION_FORMATS, TEST_REPLICATION_FORMATS_ENV
from tests.drill.log_schema import problems
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


LONG = "q" * 250
DEEP = "deep"
#: The objects of this module only format 2 carries (a format-1 backup is refused while
#: the primary holds one).
FORMAT_2_ONLY = [LONG, DEEP, "e" * 250, "api-deep", "f" * 250, "api-x", "m" * 250]


def _messages_are(port: int, path: str, count: int) -> bool:
    return bool(http("GET", port, path).get("messages") == count)


def _has_arguments(port: int, path: str) -> bool:
    return "arguments" in http("GET", port, path)


def _declared_and_confirmed_on_both_backups(
    cluster: Cluster, queue: str, arguments: dict[str, Any] | None = None
) -> None:
    """Declared with ``arguments``, a confirmed publish to it confirmed, then on both
    backups (the arguments too); both stay in the in-sync set; no traceback."""
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", cluster.ports[0]))
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        _within(
            ANSWER_WITHIN, lambda: channel.queue_declare(queue, durable=True, arguments=arguments)
        )
        _within(ANSWER_WITHIN, lambda: channel.basic_publish("", queue, b"m", mandatory=True))
    finally:
        _within(ANSWER_WITHIN, connection.close)
    path = f"/api/queues/%2F/{quote(queue, safe='')}"
    for i in (1, 2):
        port = cluster.brokers[i].mgmt_port
        poll_until(partial(_messages_are, port, path, 1), 30)
        assert http("GET", port, path)["arguments"] == (arguments or {})
    _confirmed_publish_and_in_sync(cluster, "after-" + queue[:20])


def test_arguments_nested_40_deep_replicate_in_format_2(trio: Cluster) -> None:
    _declared_and_confirmed_on_both_backups(trio, DEEP, {"x-nested": _nested(39)})


def test_a_250_byte_queue_name_replicates_in_format_2(trio: Cluster) -> None:
    _declared_and_confirmed_on_both_backups(trio, LONG)


def _format_refusals(cluster: Cluster, i: int) -> list[dict[str, Any]]:
    return [e for e in cluster.brokers[i].events() if e.get("event") == "ha_link_format_refused"]


def _restart(cluster: Cluster, i: int, **env: str) -> None:
    """Restart broker ``i`` with ``env``; as the cluster manager, commit the in-sync set
    without the broker that went (a new start is a new broker id): answers held for it
    (delete-ok, confirms) are released."""
    broker = cluster.brokers[i]
    broker.stop()
    broker.env = env
    broker.start()
    cluster.commit_in_sync(0)


def test_a_format_1_backup_is_refused_then_holds_declares_to_format_1(
    trio: Cluster,
) -> None:
    _declared_and_confirmed_on_both_backups(trio, "f" * 250)
    _restart(trio, 2, **{TEST_REPLICATION_FORMATS_ENV: "1-1"})
    try:
        [backup_line] = poll_until(lambda: _format_refusals(trio, 2), 30, "broker 2 refused")
        assert (
            "NOT_IMPLEMENTED - no common replication format carries this primary's"
            in (backup_line["reason"])
        )
        reason = backup_line["reason"]
        assert "speaks replication format 1 at most: upgrade it; " in reason, reason
        # the first object format 1 cannot carry: this test's queue or another test's
        assert "queue name is 250" in reason or "nest 40" in reason, reason
        assert any("upgrade it" in e["reason"] for e in _format_refusals(trio, 0))
        assert trio.state(2) == "joining" and trio.brokers[2].alive()
        # the primary no longer holds what format 1 cannot carry: the backup joins
        port = trio.brokers[0].mgmt_port
        for name in FORMAT_2_ONLY:
            http("DELETE", port, f"/api/queues/%2F/{quote(name, safe='')}")
            http("DELETE", port, f"/api/exchanges/%2F/{quote(name, safe='')}")
        trio.wait_state(2, "ready", timeout=30)
        # ... and from now on such declares are refused at once, naming the backup
        text = _refused_declare(trio, lambda ch: ch.queue_declare(LONG, durable=True))
        assert "250" in text and "255" in text, text
        assert f"replication format 1 (backup 127.0.0.1:{trio.ports[2]} speaks no higher)" in text
        text = _refused_declare(
            trio, lambda ch: ch.queue_declare(DEEP, arguments={"x-nested": _nested(39)})
        )
        assert "nest 40" in text and "at most 29" in text, text
        assert trio.queue_messages(0, DEEP) == -1  # never created
        poll_until(lambda: _in_sync_backups(trio) == 2, 30)
        _confirmed_publish_and_in_sync(trio, "after-format-1")
    finally:
        _restart(trio, 2)  # this tree's formats again: the other tests' cluster
        trio.wait_state(2, "ready", timeout=30)
        poll_until(lambda: _in_sync_backups(trio) == 2, 30)


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
    """PUT /api/queues and /api/exchanges go through the same virtual host: what format 2
    carries is created (and replicated), what no format carries is 400 naming the limit,
    nothing created, the backups still in sync."""
    port = trio.brokers[0].mgmt_port
    deep = http("PUT", port, "/api/queues/%2F/api-deep", {"arguments": {"x": _nested(39)}})
    assert "http_status" not in deep, deep  # created
    deeper = http("PUT", port, "/api/queues/%2F/api-deeper", {"arguments": {"x": _nested(70)}})
    assert deeper["http_status"] == 400 and "nest more than 64" in deeper["reason"], deeper
    assert "the AMQP codec carries at most 64" in deeper["reason"], deeper
    name = "e" * 250
    long = http("PUT", port, f"/api/queues/%2F/{name}", {"durable": True})
    assert "http_status" not in long, long
    exchange = http(
        "PUT", port, "/api/exchanges/%2F/api-x", {"type": "direct", "arguments": {"f": 0.1}}
    )
    assert "http_status" not in exchange, exchange
    reserved = http("PUT", port, "/api/queues/%2F/qpid.ha-queue:x", {})
    assert reserved["http_status"] == 403, reserved
    assert http("GET", port, "/api/queues/%2F/api-deeper")["http_status"] == 404
    for i in (1, 2):
        backup = trio.brokers[i].mgmt_port
        poll_until(partial(_has_arguments, backup, "/api/queues/%2F/api-deep"), 30)
        poll_until(partial(_has_arguments, backup, "/api/exchanges/%2F/api-x"), 30)
        assert http("GET", backup, "/api/exchanges/%2F/api-x")["arguments"] == {"f": 0.1}
    assert _in_sync_backups(trio) == 2


def test_members_the_cluster_manager_reports_hold_declares_to_their_format(trio: Cluster) -> None:
    """``POST /api/ha/members`` (an agent, from ZooKeeper's member records): while a member
    speaks only format 1, declares only format 2 carries are refused, naming it."""
    port = trio.brokers[0].mgmt_port
    members = {"b0": "1-2", "b1": "1-2", "n3": "1-1"}
    refused = http("POST", port, "/api/ha/members", {"replication_formats": members})
    assert refused["http_status"] == 403, refused
    bad = {"cluster_manager": True, "replication_formats": {"n3": "one"}}
    assert http("POST", port, "/api/ha/members", bad)["http_status"] == 400
    body = {"cluster_manager": True, "replication_formats": members}
    try:
        answer = http("POST", port, "/api/ha/members", body)
        assert answer == {"format": 1, "why": "member n3 speaks no higher"}, answer
        text = _refused_declare(trio, lambda ch: ch.queue_declare("m" * 250, durable=True))
        assert "replication format 1 (member n3 speaks no higher)" in text, text
        [line] = [e for e in trio.brokers[0].events() if e.get("event") == "ha_contract_format"]
        assert line["format"] == 1 and problems(line) == [], line
    finally:
        every = REPLICATION_FORMATS.text  # every member speaks what this build speaks
        body["replication_formats"] = {"b0": every, "b1": every, "b2": every}
        top = REPLICATION_FORMATS.highest
        assert http("POST", port, "/api/ha/members", body) == {"format": top, "why": ""}
    _declared_and_confirmed_on_both_backups(trio, "m" * 250)
