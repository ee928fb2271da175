"""A replication failure is an event, not a traceback (issue 24, item 2), on real brokers.

The replication contract keeps clients from declaring what the wire cannot carry, but a
store written before it (a stand-alone broker's, then made a cluster member) may hold such
an object. Promoted, that broker has two backups that cannot replicate it:

- a queue whose arguments nest 70 deep (release 0.1.0's stand-alone management API took
  them; the AMQP codec stops at 64, and so do the declare contract since, replication format
  2 and the store's format 2; the tree recovers 0.1.0's record as 0.1.0 wrote it): the
  primary cannot encode
  its snapshot; it logs ``ha_replication_error`` naming the backup and why, closes the link
  (541), and each backup says so and dials again ever more slowly (exponential, capped by
  the link-maintenance interval: a few relinks in three seconds, never dozens a second);
- a queue named with 250 bytes, and backups that speak only replication format 1 (release
  0.1.0's wire, whose stream names cannot hold it): each backup's link is refused at
  connection.open (540) with one line naming the queue, ``ha_link_format_refused`` on both
  sides, the backup's ``link_error`` and ``qpid-ha status`` say so, and it dials again every
  link-maintenance interval, never in a tight loop.

In both, the statuses say which object and why, and no broker writes a traceback or a line
outside the log schema.
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
from common.version import TEST_REPLICATION_FORMATS_ENV
from qpid_ha_cli.main import app
from tests.broker_process import BrokerProcess
from tests.drill.log_schema import problems
from tests.ha.cluster import Cluster, http
from tests.upgrade.releases import build, previous_release

LONG = "q" * 250
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
    named with 250 bytes (``request.param`` "long", the backups then speaking only
    replication format 1) or one with arguments nested 70 deep ("deep", given to a broker of
    release 0.1.0, before the declare contract could refuse them)."""
    alone = BrokerProcess(tmp_path / "alone", args=[f"--data-dir={tmp_path / 'b0' / 'data'}"])
    if request.param == "deep":
        alone.program = str(build(previous_release(), tmp_path / "release") / "qpidd")
    alone.start()
    try:
        connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", alone.port))
        channel = connection.channel()
        if request.param == "long":
            channel.queue_declare(LONG, durable=True)
        else:
            body = {"durable": True, "arguments": {"x": _nested(69)}}
            created = http("PUT", alone.mgmt_port, "/api/queues/%2F/deep", body)
            assert "http_status" not in created, created
        channel.queue_declare("fine", durable=True)
        connection.close()
    finally:
        alone.stop()
    trio = Cluster(tmp_path, 3, f"--link-maintenance-interval={INTERVAL}")
    if request.param == "long":
        for backup in trio.brokers[1:]:
            backup.env = {TEST_REPLICATION_FORMATS_ENV: "1-1"}
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
def test_a_queue_no_backup_s_format_can_carry_is_a_refusal_a_status_and_a_slow_redial(
    cluster: Cluster,
) -> None:
    cluster.promote(0, epoch=1)
    cluster.wait_state(0, "active")
    primary = f"127.0.0.1:{cluster.ports[0]}"

    def refused(i: int) -> dict[str, Any] | None:
        error = cluster.ha(i)["link_error"]
        return dict(error) if error and error["address"] == primary else None

    why = "speaks replication format 1 at most: upgrade it; queue name is 250 bytes"
    for i in (1, 2):
        error = poll_until(partial(refused, i), 30)
        assert error["reason"].startswith("refused: NOT_IMPLEMENTED - no common replication")
        assert why in error["reason"], error
        [line] = _refusals(cluster, i)  # once, not at every redial
        assert line["level"] == "warning" and why in line["reason"], line
        assert why in _status(cluster, i)
        assert cluster.state(i) == "joining"
    lines = _refusals(cluster, 0)
    assert {line["reason"].split("backup ")[1].split(" ")[0] for line in lines} == {
        f"127.0.0.1:{cluster.ports[i]}" for i in (1, 2)
    }
    assert all(why in line["reason"] for line in lines)
    assert not cluster.ha(0)["backups"]  # never linked: no guard, nothing held for them

    # Redials are paced by the link-maintenance interval: a handful in three seconds.
    before = {i: poll_until(partial(refused, i), 5)["count"] for i in (1, 2)}

    def few_redials() -> bool:
        return all(
            (refused(i) or {"count": 0})["count"] - before[i] <= 3.0 / INTERVAL + 2 for i in (1, 2)
        )

    holds_for(few_redials, 3.0, interval=0.1)
    assert all((refused(i) or {"count": 0})["count"] > before[i] for i in (1, 2))  # trying
    _no_traceback_and_schema(cluster)


def _refusals(cluster: Cluster, i: int) -> list[dict[str, Any]]:
    events = cluster.brokers[i].events()
    return [e for e in events if e.get("event") == "ha_link_format_refused"]


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
    deeper than any replication format takes). It logs which backup, which event and why, closes the
    backup's link with 541 naming them, and each backup says so and backs off."""
    cluster.promote(0, epoch=1)
    cluster.wait_state(0, "active")

    def failed_backups() -> list[dict[str, Any]] | None:
        errors = list(cluster.ha(0)["replication_errors"])
        return errors if len(errors) == 2 else None

    for error in poll_until(failed_backups, 15):
        assert error["reason"].startswith("primary: configuration stream (snapshot event): ")
        assert "nested more than 67 deep" in error["reason"], error
    for i in (1, 2):
        own = poll_until(partial(_own_error, cluster, i), 10)
        assert own["reason"].startswith("closed by the primary: replication error: "), own
        assert "nested more than 67 deep" in own["reason"]
        [first, *_] = _errors(cluster, i)
        assert first["object"] == "primary" and "541" in first["reason"]
    _backs_off(cluster)
    _no_traceback_and_schema(cluster)
