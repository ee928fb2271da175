"""A replication failure is an event, not a traceback (issue 24, item 2), on real brokers.

The replication contract keeps clients from declaring what the wire cannot carry, but a
store written before it (a stand-alone broker's, then made a cluster member) may hold such
a queue: here one named with 250 bytes, whose stream name no backup can consume. Promoted,
that broker has two backups that cannot replicate it. Each backup logs
``ha_replication_error`` naming the queue and why, closes its link saying so (541), and
dials again ever more slowly (exponential, capped by the link-maintenance interval: a few
relinks in three seconds, never dozens a second); the primary's ``/api/ha`` shows on each
backup's row which object and why, the backup's own status shows it, ``qpid-ha status``
prints it on both, and no broker writes a traceback or a line outside the log schema.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pika
import pytest
from typer.testing import CliRunner

from common.polling import holds_for, poll_until
from qpid_ha_cli.main import app
from tests.broker_process import BrokerProcess
from tests.drill.log_schema import problems
from tests.ha.cluster import Cluster

LONG = "q" * 250
#: How the errors name that queue, and why its stream cannot be consumed.
SHOWN = f"queue '{'q' * 40}...' (250 bytes) in vhost '/'"
WHY = "TypeError: string exceeds maximum length of 255 bytes"
#: The links' maintenance interval here: the cap of the backoff between relinks.
INTERVAL = 1.0


def _nested(levels: int) -> dict[str, Any]:
    table: dict[str, Any] = {"leaf": 1}
    for _ in range(levels - 1):
        table = {"x": table}
    return table


@pytest.fixture
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """Three brokers; broker 0's store holds what a stand-alone broker was given: a queue
    named with 250 bytes (``request.param`` "long") or one with arguments nested 40 deep
    ("deep"), both before the replication contract could refuse them."""
    alone = BrokerProcess(tmp_path / "alone", args=[f"--data-dir={tmp_path / 'b0' / 'data'}"])
    alone.start()
    try:
        connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", alone.port))
        channel = connection.channel()
        if request.param == "long":
            channel.queue_declare(LONG, durable=True)
        else:
            channel.queue_declare("deep", durable=True, arguments={"x-n": _nested(39)})
        channel.queue_declare("fine", durable=True)
        connection.close()
    finally:
        alone.stop()
    trio = Cluster(tmp_path, 3, f"--link-maintenance-interval={INTERVAL}")
    trio.start()
    try:
        yield trio
    finally:
        trio.stop()


def _status(cluster: Cluster, i: int) -> str:
    address = f"guest/guest@127.0.0.1:{cluster.brokers[i].mgmt_port}"
    result = CliRunner().invoke(app, ["-b", address, "status"], prog_name="qpid-ha")
    return str(result.stdout)


def _own_error(cluster: Cluster, i: int) -> dict[str, Any] | None:
    error = cluster.ha(i)["replication_error"]
    return None if error is None else dict(error)


def _errors(cluster: Cluster, i: int) -> list[dict[str, Any]]:
    return [e for e in cluster.brokers[i].events() if e.get("event") == "ha_replication_error"]


@pytest.mark.parametrize("cluster", ["long"], indirect=True)
def test_a_stream_no_backup_can_consume_is_an_event_a_status_and_a_slow_redial(
    cluster: Cluster,
) -> None:
    cluster.promote(0, epoch=1)
    cluster.wait_state(0, "active")
    primary = cluster.ha

    def failed_backups() -> list[dict[str, Any]] | None:
        errors = list(primary(0)["replication_errors"])
        return errors if len(errors) == 2 else None

    urls = {f"127.0.0.1:{cluster.ports[i]}" for i in (1, 2)}
    errors = poll_until(failed_backups, 15)
    assert {e["url"] for e in errors} == urls
    for error in errors:
        assert error["reason"] == f"backup: {SHOWN}: {WHY}", error
        assert error["count"] >= 1 and error["since"].endswith("Z")
    for row in primary(0)["backups"]:  # a backup linked at this moment: on its row too
        assert not row["ready"]
        assert row["replication_error"] is None or row["replication_error"]["reason"].startswith(
            f"backup: {SHOWN}: "
        )
    for i in (1, 2):
        own = cluster.ha(i)["replication_error"]
        assert own is not None and own["reason"] == f"{SHOWN}: {WHY}", own
        [first, *_] = _errors(cluster, i)
        assert first["level"] == "warning" and first["object"] == SHOWN
        assert first["reason"] == WHY
        assert f"replication error: {SHOWN}: {WHY}" in _status(cluster, i)
    primary_status = _status(cluster, 0)
    assert primary_status.startswith("active\n")
    assert primary_status.count(f"replication error: backup: {SHOWN}: {WHY}") == 2, primary_status
    assert any(e.get("event") == "ha_replication_error" for e in cluster.brokers[0].events())

    # Relinks back off: over three seconds, a handful, not dozens a second.
    _backs_off(cluster)
    _no_traceback_and_schema(cluster)


def _backs_off(cluster: Cluster) -> None:
    """Over three seconds each backup relinks a few times, paced by the backoff's cap."""
    before = {i: len(_errors(cluster, i)) for i in (1, 2)}
    most = 3.0 / INTERVAL + 2  # the cap's pace, and the doubling steps below it

    def few_relinks() -> bool:
        return all(len(_errors(cluster, i)) - before[i] <= most for i in (1, 2))

    holds_for(few_relinks, 3.0, interval=0.1)
    assert all(len(_errors(cluster, i)) > before[i] for i in (1, 2))  # still trying


def _no_traceback_and_schema(cluster: Cluster) -> None:
    for broker in cluster.brokers:
        stderr = (broker.workdir / "stderr").read_text(errors="replace")
        assert "Traceback" not in stderr and "exception was never retrieved" not in stderr, stderr
        for event in broker.events():
            assert not problems(event), (event, problems(event))


@pytest.mark.parametrize("cluster", ["deep"], indirect=True)
def test_a_snapshot_the_primary_cannot_send_is_an_event_and_a_slow_redial(
    cluster: Cluster,
) -> None:
    """The primary's side: its configuration snapshot cannot be encoded (arguments nested
    deeper than the wire takes). It logs which backup, which event and why, closes the
    backup's link with 541 naming them, and each backup says so and backs off."""
    cluster.promote(0, epoch=1)
    cluster.wait_state(0, "active")

    def failed_backups() -> list[dict[str, Any]] | None:
        errors = list(cluster.ha(0)["replication_errors"])
        return errors if len(errors) == 2 else None

    for error in poll_until(failed_backups, 15):
        assert error["reason"].startswith("primary: configuration stream (snapshot event): ")
        assert "nested more than 32 deep" in error["reason"], error
    for i in (1, 2):
        own = poll_until(partial(_own_error, cluster, i), 10)
        assert own["reason"].startswith("closed by the primary: replication error: "), own
        assert "nested more than 32 deep" in own["reason"]
        [first, *_] = _errors(cluster, i)
        assert first["object"] == "primary" and "541" in first["reason"]
    _backs_off(cluster)
    _no_traceback_and_schema(cluster)
