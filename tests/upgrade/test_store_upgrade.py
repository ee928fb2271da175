"""The store across releases (issue 24, store format 2; docs/deploy.md, "Upgrading a
cluster"): a store written by the previous release (format 1 only) recovers on the tree as
that release recorded it, and the tree adds format-2 records to it; the previous release
started over that store refuses it with one line, naming the record kind it does not know,
and never misreads it or cuts it as a torn tail."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pika
import pytest

from tests.broker_process import BrokerProcess
from tests.ha.cluster import http
from tests.upgrade.releases import build, previous_release

ARGUMENTS = {"x-max-length": 10, "n" * 200: "long name", "deep": {"a": [1, {"b": "c"}]}}


def _as_stored(value: Any) -> Any:
    """What 0.1.0's store held of ``value``: pamqp cut field names at 128 bytes (format 1;
    the tree recovers exactly that, and keeps what it writes exactly)."""
    if isinstance(value, dict):
        return {key[:128]: _as_stored(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_as_stored(item) for item in value]
    return value


def _state(port: int) -> dict[str, Any]:
    queue = http("GET", port, "/api/queues/%2F/kept")
    bindings = http("GET", port, "/api/bindings")
    return {
        "queue": queue["arguments"],
        "messages": queue["messages"],
        "exchange": http("GET", port, "/api/exchanges/%2F/kept.x")["arguments"],
        "binding": [b["arguments"] for b in bindings if b["source"] == "kept.x"],
    }


def test_a_store_of_the_previous_release_recovers_and_it_refuses_the_tree_s(tmp_path: Path) -> None:
    release = previous_release()
    old = build(release, tmp_path / "release")
    data = f"--data-dir={tmp_path / 'data'}"
    broker = BrokerProcess(tmp_path / "old", args=[data], program=str(old / "qpidd"))
    broker.start()
    try:
        connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port))
        channel = connection.channel()
        channel.confirm_delivery()
        channel.exchange_declare("kept.x", "headers", durable=True, arguments=ARGUMENTS)
        channel.queue_declare("kept", durable=True, arguments=ARGUMENTS)
        channel.queue_bind("kept", "kept.x", "", arguments={**ARGUMENTS, "x-match": "all"})
        channel.basic_publish("", "kept", b"m", pika.BasicProperties(delivery_mode=2))
        connection.close()
        written = _state(broker.mgmt_port)
    finally:
        broker.stop()
    assert written["messages"] == 1 and len(written["binding"]) == 1

    tree = BrokerProcess(tmp_path / "tree", args=[data])
    tree.start()
    try:
        assert _state(tree.mgmt_port) == _as_stored(written)  # as the release recorded it

        created = http("PUT", tree.mgmt_port, "/api/queues/%2F/new", {"durable": True})
        assert "http_status" not in created, created
    finally:
        tree.stop()

    again = BrokerProcess(tmp_path / "again", args=[data], program=str(old / "qpidd"))
    with pytest.raises(RuntimeError, match="exited with") as refused:
        again.start()
    lines = (tmp_path / "again" / "stderr").read_text().splitlines()
    assert len(lines) == 1 and "unknown record kind 16" in lines[0], (lines, refused.value)
