"""Exact answers on small hand-made logs (golden rows): the three clusters of
:mod:`tests.analytics.three_clusters`, one job run; its whole output is the recorded one
test_cluster_mode.py checks the standalone cluster's run against."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from analytics import job, percentiles, states
from tests.analytics import three_clusters
from tests.analytics.log_lines import us

#: The first job of a test session also starts Spark: minutes on a loaded machine.
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def logs(three_clusters_run: tuple[Path, job.Result]) -> Path:
    return three_clusters_run[0]


@pytest.fixture(scope="module")
def result(three_clusters_run: tuple[Path, job.Result]) -> job.Result:
    return three_clusters_run[1]


def by_key(rows: list[dict[str, Any]]) -> dict[tuple[str, int], dict[str, Any]]:
    return {(r["cluster"], r["epoch"]): r for r in rows}


PHASE_COLUMNS = ("detection_ms", "election_ms", "promotion_ms", "recovering_ms",
                 "failover_ms", "agent_promote_ms", "client_outage_ms")  # fmt: skip


def phases(row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(row[c] for c in PHASE_COLUMNS)


def test_lines_counted_and_non_events_skipped(result: job.Result, logs: Path) -> None:
    # 66 events in the hand-made files, one ZooKeeper line; *.txt is not read
    assert (result.lines, result.skipped) == (67, 1)
    assert result.problems == [] and result.warnings == [
        f"1 file(s) not read (not matching {job.DEFAULT_GLOB}): {logs / 'ignored.txt'}",
        # b's frozen primary and c's broker-only fail-over: their failure is a guess
        "2 fail-over(s) withheld from the percentiles (missing or contradictory evidence): "
        "- e2 (failure_inferred); b e2 (failure_inferred)",
    ]


def test_every_table_and_warning_is_the_recorded_run(result: job.Result, logs: Path) -> None:
    """The run's every table (CSV) and warning line, as ``three_clusters.RECORDED`` holds
    them: test_cluster_mode.py checks the standalone cluster's run against the same file, so
    the cluster gives this run's tables. ``QPID_TEST_RECORD_TABLES=1`` writes it anew."""
    found = three_clusters.run_record(result.out, result.warnings, logs)
    if os.environ.get("QPID_TEST_RECORD_TABLES") == "1":
        three_clusters.record(found)
    assert found == three_clusters.recorded()


def test_failovers_golden_rows(result: job.Result) -> None:
    rows = by_key(result.tables["failovers"])
    assert sorted(rows) == [("", 1), ("", 2), ("a", 1), ("a", 2), ("a", 3), ("b", 1), ("b", 2)]
    a1, a2, a3 = rows[("a", 1)], rows[("a", 2)], rows[("a", 3)]
    assert (a1["kind"], a1["node"], a1["old_node"], a1["failure_us"]) == (
        "initial", "a1", None, None)  # fmt: skip
    assert phases(a1) == (None, None, 200.0, 10.0, None, 250.0, None)
    assert (a2["kind"], a2["node"], a2["old_node"], a2["old_epoch"], a2["old_state"]) == (
        "failover", "a2", "a1", 1, "ready")  # fmt: skip
    assert (a2["failure_by"], a2["failure_us"], a2["resigned_us"], a2["won_us"]) == (
        "broker_process_exited", us(10000), us(10300), us(10450))  # fmt: skip
    assert phases(a2) == (300.0, 150.0, 50.0, 100.0, 600.0, 70.0, 800.0)
    assert (a2["scenario"], a2["config"]) == ("kill", "session-timeout 2s")
    assert (a2["failure_kind"], a2["spurious"], a2["evidence"]) == (
        "process_exit", False, "complete")  # fmt: skip
    assert (a1["failure_kind"], a1["spurious"], a1["evidence"]) == (None, None, "initial")
    assert a3["failure_by"] == "broker_process_exited"
    assert phases(a3) == (500.0, 100.0, 100.0, 200.0, 900.0, 150.0, 1234.0)

    b2 = rows[("b", 2)]  # frozen primary: failure = its last event, detected by the election
    assert (b2["old_node"], b2["failure_by"], b2["failure_us"], b2["resigned_us"]) == (
        "b1", "last_seen", us(4000), None)  # fmt: skip
    assert phases(b2) == (5000.0, 0.0, 100.0, 100.0, 5200.0, 150.0, None)
    assert (b2["scenario"], b2["config"], b2["old_state"]) == (
        "unlabelled", "session-timeout 4s", "joining")  # fmt: skip
    assert (b2["failure_kind"], b2["spurious"], b2["evidence"]) == (
        "silent_node", False, "failure_inferred")  # fmt: skip
    # a guessed failure: kept in the table, out of the percentiles, and said so
    assert b2["withheld"] == "failure_inferred"

    c2 = rows[("", 2)]  # broker logs only: no agent, so no detection nor election
    assert (c2["old_node"], c2["failure_by"], c2["failure_us"]) == ("c1", "last_seen", us(110))
    assert phases(c2) == (None, None, None, 100.0, 4990.0, None, None)
    assert (c2["scenario"], c2["config"]) == ("unlabelled", "unlabelled")
    # failure to active is known, its phases are not: marked, never invented
    assert c2["evidence"] == "failure_inferred, no_agent_logs"


def test_percentiles_golden_rows(result: job.Result) -> None:
    rows = {(r["scenario"], r["config"], r["phase"]): r for r in result.tables["percentiles"]}
    detection = rows[("kill", "session-timeout 2s", "detection")]
    # two values, 300 and 500: too few for percentiles, shown as the samples
    assert (detection["failovers"], detection["samples_ms"], detection["max_ms"]) == (
        2, "300, 500", 500.0)  # fmt: skip
    assert (detection["p50_ms"], detection["p90_ms"], detection["p99_ms"]) == (None,) * 3
    assert detection["mean_ms"] is None
    outage = rows[("kill", "session-timeout 2s", "client_outage")]
    assert (outage["samples_ms"], outage["max_ms"]) == ("800, 1234", 1234.0)
    # b's frozen primary and c's broker-only fail-over have a guessed failure: withheld
    assert not [k for k in rows if k[1] in ("session-timeout 4s", "unlabelled")]
    order = [r["phase"] for r in result.tables["percentiles"] if r["scenario"] == "kill"]
    assert order == list(percentiles.PHASES)


def test_anomalies_golden_rows(result: job.Result) -> None:
    found = sorted(
        (r["kind"], r["cluster"], r["epoch"], r["node"], r["other_node"], r["at_us"], r["ms"])
        for r in result.tables["anomalies"]
    )
    assert found == [
        ("confirmed_lost", "a", None, "d", None, us(30000), None),
        ("promoted_not_ready", "b", 2, "b3", "b2", us(9100), None),
        ("two_primaries", "", 2, "c1", "c2", us(5000), 3000.0),
        ("two_primaries_silent", "b", 2, "b1", "b3", us(9100), 2901.0),
    ]


def test_primary_stints_golden_rows(result: job.Result) -> None:
    stints = sorted(
        (r["cluster"], r["node"], r["epoch"], r["start_us"], r["end_us"], r["end_by"])
        for r in result.tables["primary_stints"]
    )
    assert stints == [
        ("", "c1", 1, us(100), us(8000), "broker_stopped"),
        ("", "c2", 2, us(5000), us(8000), "log_end"),
        ("a", "a1", 1, us(1200), us(10000), "broker_process_exited"),
        ("a", "a2", 2, us(10500), us(20000), "broker_process_exited"),
        ("a", "a3", 3, us(20700), us(30000), "log_end"),
        ("b", "b1", 1, us(1100), us(12001), "broker_killed"),
        ("b", "b3", 2, us(9100), us(12001), "log_end"),
    ]


def test_state_intervals_of_one_broker(spark: SparkSession, logs: Path) -> None:
    events = job.load_events(spark, [str(logs / "a1.broker.log"), str(logs / "a1.agent.log")])
    rows = [
        (r["state"], r["start_us"], r["end_us"], r["end_by"])
        for r in states.state_intervals(events).orderBy("start_us").collect()
    ]
    assert rows == [
        ("joining", us(100), us(1200), "ha_state_changed"),
        ("recovering", us(1200), us(1210), "ha_state_changed"),
        ("active", us(1210), us(10000), "broker_process_exited"),
        ("joining", us(11500), us(11600), "ha_state_changed"),
        ("catch-up", us(11600), us(11700), "ha_state_changed"),
        ("ready", us(11700), us(11700), "log_end"),
    ]
