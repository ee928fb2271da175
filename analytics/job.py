"""The fail-over analytics job: JSON logs in, a report out.

:Status: Beta

Inputs: files or directories (read recursively, files matching ``--glob``, by default
``*.{log,json,jsonl}``) on any Hadoop-compatible path (local, ``file://``, ``hdfs://``,
``s3a://`` with its connector), holding JSON log lines of brokers, agents and drill clients
(``docs/log-schema.md``). Lines that are not JSON events (a ZooKeeper log beside them) are
counted and skipped.

Output (``--out``, a local directory on the driver): ``report.html`` with its plots in
``plots/``, every table as CSV in ``tables/`` and as Parquet in ``parquet/`` (written by
Spark: with a cluster ``--master``, give an ``--parquet`` path every executor can write,
e.g. ``hdfs://...``).

Stages (each logged with its elapsed time on stderr; a long Spark stage also logs its task
progress every few seconds): one pass over the raw lines that counts them by node and
event and keeps the lines of the events the analysis uses (cached, small), parse those,
analyse (:mod:`analytics.transforms`), write tables, render the report
(:mod:`analytics.report`).

Error handling: unusable input (no such path, no events at all) raises :class:`JobError`,
which the command line prints as one line with exit status 2.
"""

from __future__ import annotations

import contextlib
import csv
import os
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from analytics import failover, parse, report, transforms

DEFAULT_GLOB = "*.{log,json,jsonl}"
#: Rows of a table shown in the HTML page (the CSV and Parquet files have them all).
HTML_ROWS = 200


class JobError(Exception):
    """Bad input: one line for the user."""


class Progress:
    """A line per stage on ``stream`` with the time since the start; while a stage runs,
    the active Spark stages' task counts every ``interval`` seconds."""

    def __init__(self, stream: TextIO | None = sys.stderr, interval: float = 5.0) -> None:
        self.stream = stream
        self.interval = interval
        self.started = time.monotonic()

    def log(self, message: str) -> None:
        if self.stream is not None:
            print(f"[analytics {time.monotonic() - self.started:6.1f}s] {message}",
                  file=self.stream, flush=True)  # fmt: skip

    @contextlib.contextmanager
    def stage(self, name: str, spark: SparkSession) -> Iterator[None]:
        self.log(f"{name} ...")
        done = threading.Event()
        watcher = threading.Thread(target=self._watch, args=(spark, done), daemon=True)
        if self.stream is not None:
            watcher.start()
        began = time.monotonic()
        try:
            yield
        finally:
            done.set()
            if watcher.is_alive():
                watcher.join()
        self.log(f"{name}: done in {time.monotonic() - began:.1f}s")

    def _watch(self, spark: SparkSession, done: threading.Event) -> None:
        tracker = spark.sparkContext.statusTracker()
        while not done.wait(self.interval):
            parts = []
            for stage_id in tracker.getActiveStageIds():
                info = tracker.getStageInfo(stage_id)
                if info is not None:
                    parts.append(
                        f"stage {stage_id}: {info.numCompletedTasks}/{info.numTasks} tasks"
                    )
            if parts:
                self.log("  " + ", ".join(parts))


def spark_session(master: str = "local[*]", app_name: str = "qpid-ha-analytics") -> SparkSession:
    """A session for the job (or the tests): quiet console, UTC, two shuffle partitions
    and no adaptive execution (the analysed events are few: per-stage overhead dominates;
    the big scan is one map-side aggregation)."""
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder: Any = SparkSession.builder
    spark: SparkSession = (
        builder.master(master)
        .appName(app_name)
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.driver.memory", os.environ.get("ANALYTICS_DRIVER_MEMORY", "2g"))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _has_scheme(path: str) -> bool:
    return "://" in path


def check_paths(paths: Sequence[str]) -> None:
    if not paths:
        raise JobError("no log paths given")
    for path in paths:
        if not _has_scheme(path) and not Path(path).exists():
            raise JobError(f"no such file or directory: {path}")


def read_lines(spark: SparkSession, paths: Sequence[str], glob: str = DEFAULT_GLOB) -> DataFrame:
    """The raw lines under ``paths`` (a ``value`` column), directories read recursively."""
    check_paths(paths)
    return (
        spark.read.option("recursiveFileLookup", "true")
        .option("pathGlobFilter", glob)
        .text(list(paths))
    )


def load_events(spark: SparkSession, paths: Sequence[str], glob: str = DEFAULT_GLOB) -> DataFrame:
    """The normalised events the analysis uses (no cache: for tests and notebooks)."""
    summary = parse.summarise(read_lines(spark, paths, glob))
    return parse.normalise(parse.relevant(summary))


@dataclass
class Result:
    """What the job produced: local paths, the collected tables and counts."""

    out: Path
    html: Path
    lines: int
    skipped: int
    events_used: int
    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    seconds: float = 0.0


def checkpoint(df: DataFrame) -> DataFrame:
    """Materialise a small intermediate table and cut its lineage (see
    :data:`analytics.failover.Checkpoint`)."""
    return df.localCheckpoint(eager=True)


def _rows(df: DataFrame) -> list[dict[str, Any]]:
    return [row.asDict() for row in df.collect()]


def _with_times(df: DataFrame) -> DataFrame:
    """Every ``*_us`` column also as a readable UTC timestamp ``*_ts`` (tables for people)."""
    out = df
    for name in df.columns:
        if name.endswith("_us"):
            out = out.withColumn(name[:-3] + "_ts", F.timestamp_micros(F.col(name)))
    return out


def write_csv(path: Path, rows: list[dict[str, Any]], columns: Sequence[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=list(columns))
        writer.writeheader()
        for row in rows:
            writer.writerow({k: "" if row.get(k) is None else row[k] for k in columns})


def run(
    spark: SparkSession,
    paths: Sequence[str],
    out: Path,
    *,
    labels: failover.Labels | None = None,
    glob: str = DEFAULT_GLOB,
    parquet: str | None = None,
    progress: Progress | None = None,
) -> Result:
    """Read ``paths``, analyse, write the tables and ``report.html`` under ``out``."""
    progress = progress or Progress(None)
    started = time.monotonic()
    lines_df = read_lines(spark, paths, glob)
    with progress.stage("read logs: count lines by node and event, keep the used ones", spark):
        summary = parse.summarise(lines_df).cache()
        counts = parse.event_counts(summary).cache()
        count_rows: list[Row] = counts.collect()
    lines = sum(int(r["lines"]) for r in count_rows)
    skipped = sum(int(r["lines"]) for r in count_rows if r["source"] == "skipped")
    if lines == skipped:
        raise JobError(f"no JSON log events in {', '.join(paths)} (files matching {glob})")
    progress.log(f"{lines} lines, {skipped} not events")
    with progress.stage("parse the used events", spark):
        events = parse.normalise(parse.relevant(summary)).cache()
        used = events.count()
    progress.log(f"{used} events used")
    # small tables from here on: interpreted plans start faster than compiled ones
    spark.conf.set("spark.sql.codegen.wholeStage", "false")
    with progress.stage("analyse fail-overs, phases, percentiles, anomalies", spark):
        tables = transforms.analyse(events, labels, checkpoint)
        named: dict[str, DataFrame] = {
            "failovers": _with_times(tables.failovers).orderBy("cluster", "epoch"),
            "percentiles": tables.percentiles,
            "phases": tables.phases.orderBy("cluster", "epoch"),
            "anomalies": _with_times(tables.anomalies).orderBy("at_us"),
            "primary_stints": _with_times(tables.primary_stints).orderBy("cluster", "start_us"),
            "event_counts": counts.orderBy(F.desc("lines")),
        }
        collected = {name: _rows(df) for name, df in named.items()}
    out.mkdir(parents=True, exist_ok=True)
    with progress.stage("write tables (CSV, Parquet)", spark):
        parquet_root = parquet or (out / "parquet").resolve().as_uri()
        for name, df in named.items():
            write_csv(out / "tables" / f"{name}.csv", collected[name], df.columns)
            df.coalesce(1).write.mode("overwrite").parquet(f"{parquet_root}/{name}")
    seconds = time.monotonic() - started
    with progress.stage("render report.html", spark):
        html = report.render(
            out,
            collected,
            report.Summary(
                paths=list(paths), lines=lines, skipped=skipped, events_used=used,
                seconds=seconds,
            ),
        )  # fmt: skip
    events.unpersist()
    counts.unpersist()
    summary.unpersist()
    return Result(
        out=out,
        html=html,
        lines=lines,
        skipped=skipped,
        events_used=used,
        tables=collected,
        seconds=time.monotonic() - started,
    )
