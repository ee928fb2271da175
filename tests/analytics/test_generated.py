"""The generator's known parameters recovered by the job, and the rendered HTML report.

One generated log set (``generated`` in ``conftest.py``: 12 clusters, 10 fail-overs each,
two configurations, connection noise written by Spark, one drill with lost messages)
through the whole job; ``test_phases_shared.py`` and ``test_report_browser.py`` read the
same run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from analytics import generate, job

pytestmark = pytest.mark.timeout(300)


def test_every_line_read_and_every_failover_found(
    generated: tuple[generate.Params, job.Result],
) -> None:
    params, result = generated
    assert result.lines - result.skipped == params.events
    failovers = [r for r in result.tables["failovers"] if r["kind"] == "failover"]
    assert len(failovers) == params.failovers == 120
    assert all(r["failure_by"] == "broker_process_exited" for r in failovers)
    assert all(r["evidence"] == "complete" and r["spurious"] is False for r in failovers)
    assert all(r["scenario"] == generate.SCENARIO for r in failovers)


def test_medians_recovered_within_tolerance(
    generated: tuple[generate.Params, job.Result],
) -> None:
    _params, result = generated
    rows = {(r["config"], r["phase"]): r for r in result.tables["percentiles"]}
    for cfg in generate.DEFAULT_CONFIGS:
        for phase in ("detection", "election", "promotion", "recovering"):
            row = rows[(cfg.label, phase)]
            assert row["failovers"] == 60
            expected = getattr(cfg, f"{phase}_ms")
            assert row["p50_ms"] == pytest.approx(expected, rel=0.15), (cfg.label, phase)
            assert row["p50_ms"] <= row["p90_ms"] <= row["p99_ms"] <= row["max_ms"]
        # lognormal: p90 / p50 = exp(1.2816 sigma)
        detection = rows[(cfg.label, "detection")]
        ratio = detection["p90_ms"] / detection["p50_ms"]
        assert ratio == pytest.approx(2.718281828 ** (1.2816 * cfg.sigma), rel=0.2)
        tuning = next(r for r in result.tables["tuning"] if r["config"] == cfg.label)
        # the brokers' settings from their ha_started lines
        assert (tuning["link_heartbeat_s"], tuning["ha_backup_timeout_s"]) == (
            cfg.link_heartbeat, cfg.backup_timeout)  # fmt: skip
        assert tuning["detection_p50_per_heartbeat"] == pytest.approx(
            tuning["p50_detection_ms"] / (cfg.link_heartbeat * 1000)
        )
        outage = rows[(cfg.label, "client_outage")]
        assert outage["p50_ms"] > rows[(cfg.label, "failover")]["p50_ms"]


def test_only_the_planted_anomaly(generated: tuple[generate.Params, job.Result]) -> None:
    _params, result = generated
    assert [(r["kind"], r["cluster"]) for r in result.tables["anomalies"]] == [
        ("confirmed_lost", "c0000")
    ]


def test_report_has_its_plots_and_tables(generated: tuple[generate.Params, job.Result]) -> None:
    _params, result = generated
    page = result.html.read_text()
    images = re.findall(r'<img src="([^"]+)"', page)
    assert len(images) == 3
    for src in images:
        png = result.out / src
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    # column names may wrap after an underscore (<wbr>)
    tables = re.findall(r"<table[^>]*>.*?</table>", page.replace("<wbr>", ""), flags=re.S)
    # tuning, tuning by kind, percentiles (2), anomalies, fail-overs, primaries, line counts
    assert len(tables) == 8
    # the tuning table: a row per measure, a column per configuration
    assert "<tr><th>spurious</th>" in tables[0]
    assert "<th>session-timeout 2s</th><th>session-timeout 4s</th>" in tables[0]
    assert "<th>failure_kind</th>" in tables[1] and "process_exit" in tables[1]
    assert "<th>p99_ms</th>" in tables[2] and "<th>failure_kind</th>" in tables[2]
    assert "<th>scenario</th>" in tables[3] and "session-timeout 4s" in tables[3]
    assert "confirmed_lost" in tables[4]
    assert "1 anomalies" in page
    assert "every line read was usable" in page
    # what to change, by kind: a process exit's detection is the agents' check
    assert "session-timeout 4s, process_exit (60 fail-overs): detection dominates" in page
    assert "--check-interval" in page
    for name in ("failovers", "percentiles", "percentiles_by_kind", "tuning", "phases",
                 "anomalies", "primary_stints"):  # fmt: skip
        csv = result.out / "tables" / f"{name}.csv"
        assert csv.read_text().count("\n") >= 2, name
        assert list((result.out / "parquet" / name).glob("*.parquet")), name


def test_parquet_tables_read_back(
    spark: SparkSession, generated: tuple[generate.Params, job.Result]
) -> None:
    _params, result = generated
    back = spark.read.parquet(str(result.out / "parquet" / "failovers"))
    assert back.count() == len(result.tables["failovers"]) == 12 * 11
    assert {"detection_ms", "failure_ts", "client_outage_ms"} <= set(back.columns)


def test_generator_writes_what_it_says(tmp_path: Path) -> None:
    params = generate.generate(tmp_path, clusters=2, failovers=3, seed=1)
    assert params.failovers == 6 and params.files == 2 * 3 * 2 + 2
    lines = sum(len(f.read_text().splitlines()) for f in tmp_path.glob("*.log"))
    assert lines == params.events
