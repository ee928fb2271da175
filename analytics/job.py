"""The fail-over analytics job: JSON logs in, a report out.

:Status: Beta

Inputs: files or directories (read recursively, files matching ``--glob``, by default
logs, JSON lines and their rotations: :data:`analytics.inputs.DEFAULT_GLOB`) on any
Hadoop-compatible path (local, ``file://``, ``hdfs://``, ``s3a://`` with its connector),
holding JSON log lines of brokers, agents and drill clients (``docs/log-schema.md``).
Local paths are listed before Spark starts (:mod:`analytics.inputs`): files left unread
are named. Lines that are not JSON events (a ZooKeeper log beside them) are counted and
skipped; events of a schema version the job does not read stop it; truncated and malformed
lines are counted per file, and the fail-overs of their nodes marked incomplete.

Output (``--out``, a local directory on the driver): ``report.html`` with its plots in
``plots/``, every table as CSV in ``tables/`` and as Parquet in ``parquet/`` (written by
Spark: with a cluster ``--master``, give an ``--parquet`` path every executor can write,
e.g. ``hdfs://...``).

Stages (each logged with its elapsed time on stderr; a long Spark stage also logs its task
progress every few seconds): one pass over the raw lines that counts them by node and
event and keeps the lines of the events the analysis uses (cached, small), parse those,
analyse (:mod:`analytics.transforms`), write tables, render the report
(:mod:`analytics.report`).

Error handling: unusable input (no such path, no log files, no events at all, an unknown
schema version) raises :class:`JobError`, which the command line prints as one line with
exit status 2.
"""

from __future__ import annotations

import contextlib
import csv
import os
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from analytics import clocks, failover, inputs, missing_logs, parse, report, runs, transforms

DEFAULT_GLOB = inputs.DEFAULT_GLOB
#: Rows of a table shown in the HTML page (the CSV and Parquet files have them all).
HTML_ROWS = 200

#: Bad input: one line for the user.
JobError = inputs.InputError


class Progress:
    """A line per stage on ``stream`` with the time since the start; while a stage runs,
    the active Spark stages' task counts every ``interval`` seconds."""

    def __init__(self, stream: TextIO | None = sys.stderr, interval: float = 5.0) -> None:
        self.stream = stream
        self.interval = interval
        self.started = time.monotonic()
        self._groups = 0

    def log(self, message: str) -> None:
        if self.stream is not None:
            print(f"[analytics {time.monotonic() - self.started:6.1f}s] {message}",
                  file=self.stream, flush=True)  # fmt: skip

    @contextlib.contextmanager
    def stage(self, name: str, spark: SparkSession) -> Iterator[None]:
        """The stage's Spark jobs run in a job group of their own: its line at the end
        also says how many Spark jobs and stages it ran (skipped stages, whose shuffle
        output an earlier job left, not counted)."""
        self.log(f"{name} ...")
        done = threading.Event()
        watcher = threading.Thread(target=self._watch, args=(spark, done), daemon=True)
        if self.stream is not None:
            watcher.start()
        context = spark.sparkContext
        self._groups += 1
        group = f"qpid-ha-analytics-{id(self)}-{self._groups}"
        context.setJobGroup(group, name)
        began = time.monotonic()
        try:
            yield
        finally:
            context.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
            context.setLocalProperty("spark.job.description", None)  # type: ignore[arg-type]
            done.set()
            if watcher.is_alive():
                watcher.join()
        jobs, stages = spark_work(spark, group)
        self.log(
            f"{name}: done in {time.monotonic() - began:.1f}s ({jobs} Spark jobs, {stages} stages)"
        )

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


def spark_work(spark: SparkSession, group: str) -> tuple[int, int]:
    """(jobs, stages) Spark ran in job group ``group``; a stage skipped (its shuffle
    output already there) is not counted."""
    tracker = spark.sparkContext.statusTracker()
    jobs = tracker.getJobIdsForGroup(group)
    stages = set()
    for job_id in jobs:
        info = tracker.getJobInfo(job_id)
        for stage_id in info.stageIds if info is not None else ():
            stage = tracker.getStageInfo(stage_id)
            if stage is not None and stage.numCompletedTasks > 0:
                stages.add(stage_id)
    return len(jobs), len(stages)


def driver_address(master: str) -> str | None:
    """The local address this host reaches a ``spark://host:port`` master from (the first
    of several masters), found by connecting a UDP socket (no packet is sent); None for
    other masters or a master whose name does not resolve. The driver must bind to an
    address the workers can reach: without ``SPARK_LOCAL_IP`` Spark takes the host's first
    interface, which may be one the workers cannot reach."""
    if not master.startswith("spark://"):
        return None
    first = master[len("spark://") :].split(",")[0]
    host, _, port = first.rpartition(":")
    if not host:
        host, port = first, "7077"
    host = host.strip("[]")
    try:
        family, kind, proto, _name, address = socket.getaddrinfo(
            host, int(port or 7077), type=socket.SOCK_DGRAM
        )[0]
        with socket.socket(family, kind, proto) as probe:
            probe.connect(address)
            return str(probe.getsockname()[0])
    except (OSError, ValueError):
        return None


#: Log4j 2 configuration of the driver: errors only on stderr from Spark, Hadoop and
#: Parquet (``org.apache``), no "default profile" banner (Spark prints it when it falls
#: back on its own configuration) and no "Setting default log level" lines (PySpark prints
#: them when the level its logger is configured with, else WARN, differs from the root's).
LOG4J2 = """rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
logger.apache.name = org.apache
logger.apache.level = error
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n%ex
"""


def _log4j2_file() -> str:
    path = Path(tempfile.gettempdir()) / f"qpid-ha-analytics-log4j2-{os.getuid()}.properties"
    if not path.exists() or path.read_text() != LOG4J2:
        path.write_text(LOG4J2)
    return str(path)


@contextlib.contextmanager
def _stderr_to_devnull(enabled: bool) -> Iterator[None]:
    """While the JVM starts, file descriptor 2 goes to /dev/null: the JVM inherits it, so
    its own warnings (``Using incubator modules``) stay off the terminal for its life."""
    if not enabled:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


#: Up to this many paths given to one read are listed by the driver, not by a Spark job.
#: The job names every local file it reads (:func:`check_paths`: 702 for the 10M-line
#: benchmark), and Spark's default (32) turned that into a listing job of one task per
#: file: about 10 CPU seconds and 7 s of wall time before the scan, for a ``stat`` each.
LIST_ON_DRIVER = "100000"

#: The driver JVM's server compiler (C2) only for code run ten times as often as HotSpot's
#: defaults ask (Tier4 thresholds): the scan's inner loops, run per line, still get it;
#: Spark's planner and scheduler, run per query and per task, stay with the client
#: compiler. Measured (10M-line benchmark, under load): C2 compiling took 30-50 CPU
#: seconds of the job's 110-130; compiling with C1 alone made the scan three times as
#: costly (38 -> 127 CPU s).
DRIVER_JIT = (
    "-XX:Tier4InvocationThreshold=50000 -XX:Tier4MinInvocationThreshold=6000 "
    "-XX:Tier4CompileThreshold=150000 -XX:Tier4BackEdgeThreshold=400000"
)

#: What the stages after the scan run with: they read about 30,000 events in a hundred
#: small stages, where compiling each plan (whole-stage code generation) and each
#: expression (Janino; ``NO_CODEGEN`` is Spark's switch to its interpreted evaluators)
#: costs more CPU than interpreting it. Nothing they compute depends on it (the tests'
#: session runs the whole job so; tests/analytics/test_cluster_mode.py compares tables).
#: And they run in ONE partition (the events are coalesced to one before they are cached,
#: :func:`checkpoint` keeps one): a join or aggregation of tables that are each one
#: partition needs no shuffle, so no new stage; no broadcast (a Spark job of its own per
#: joined table); one-partition inputs stay one partition whatever Spark estimates their
#: size (``maxSinglePartitionBytes``: a checkpoint's estimate is unknown, so huge).
#: Measured on the 67 lines of tests/analytics/three_clusters.py: 84 Spark jobs and 156
#: stages before, 38 and 72 after (docs/analytics.md, "Spark jobs and stages").
#: No constraint propagation: the optimizer works out every plan node's constraints (for
#: filters it could infer or prune) once per query, and the analysis' plans, dozens of
#: joins and filters over the same events, made that the larger part of planning
#: (PruneFilters, pruning nothing, the costliest rule at load 30), only to add ``isnotnull``
#: filters to tables of a few thousand rows. Measured on the same 67 lines, a warm session,
#: two sessions each way side by side at load 10-14: driver CPU about 9.0 -> 7.5 s a run
#: (runs 2 and 3), rule time 2.7-3.5 -> 2.1-2.3 s.
SMALL_TABLES = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    "spark.sql.shuffle.partitions": "1",
    "spark.sql.autoBroadcastJoinThreshold": "-1",
    "spark.sql.maxSinglePartitionBytes": str(2**62),
    "spark.sql.constraintPropagation.enabled": "false",
}


@contextlib.contextmanager
def small_tables(spark: SparkSession) -> Iterator[None]:
    """:data:`SMALL_TABLES` set inside, the session's own settings back after."""
    before = {key: spark.conf.get(key, None) for key in SMALL_TABLES}
    for key, value in SMALL_TABLES.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, old in before.items():
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)


def spark_session(
    master: str = "local[*]", app_name: str = "qpid-ha-analytics", *, quiet: bool = False
) -> SparkSession:
    """A session for the job (or the tests): errors only on the console (``quiet``: not
    even the JVM's start-up warnings), UTC, two shuffle partitions and no adaptive
    execution (the analysed events are few: per-stage overhead dominates; the big scan is
    one map-side aggregation), input files listed by the driver (:data:`LIST_ON_DRIVER`).
    The driver binds to loopback for a local master, and for a
    ``spark://`` master to the address that reaches it (:func:`driver_address`), unless
    ``SPARK_LOCAL_IP`` says otherwise."""
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    elif "SPARK_LOCAL_IP" not in os.environ:
        address = driver_address(master)
        if address is not None:
            os.environ["SPARK_LOCAL_IP"] = address
    builder: Any = SparkSession.builder
    with _stderr_to_devnull(quiet):
        spark: SparkSession = (
            builder.master(master)
            .appName(app_name)
            .config(
                "spark.driver.extraJavaOptions",
                f"-Dlog4j2.configurationFile={_log4j2_file()} {DRIVER_JIT}",
            )
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.sql.adaptive.enabled", "false")
            .config("spark.sql.sources.parallelPartitionDiscovery.threshold", LIST_ON_DRIVER)
            .config("spark.driver.memory", os.environ.get("ANALYTICS_DRIVER_MEMORY", "2g"))
            .getOrCreate()
        )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def check_paths(paths: Sequence[str], glob: str = DEFAULT_GLOB) -> inputs.Listing:
    """The files to read (:func:`analytics.inputs.list_local`), before Spark starts."""
    return inputs.list_local(paths, glob)


def read_lines(
    spark: SparkSession,
    paths: Sequence[str],
    glob: str = DEFAULT_GLOB,
    listing: inputs.Listing | None = None,
) -> DataFrame:
    """The raw lines of the files to read (``value``) and their ``file``: the local files
    listed (:func:`check_paths`), and under remote paths the files matching ``glob``
    (directories read recursively)."""
    listing = listing or check_paths(paths, glob)
    frames = []
    if listing.read:
        frames.append(spark.read.text(listing.read))
    if listing.remote:
        frames.append(
            spark.read.option("recursiveFileLookup", "true")
            .option("pathGlobFilter", glob)
            .text(listing.remote)
        )
    with_file = [df.select("value", F.col("_metadata.file_path").alias("file")) for df in frames]
    return with_file[0] if len(with_file) == 1 else with_file[0].unionByName(with_file[1])


def load_events(spark: SparkSession, paths: Sequence[str], glob: str = DEFAULT_GLOB) -> DataFrame:
    """The normalised events the analysis uses (no cache: for tests and notebooks)."""
    summary = parse.summarise(read_lines(spark, paths, glob))
    return parse.normalise(parse.relevant(summary))


@dataclass
class Result:
    """What the job produced: local paths, the collected tables and counts; ``problems``
    (files with truncated or malformed lines), ``unread`` (local files the glob left out)
    and ``warnings`` (one line each, for stderr)."""

    out: Path
    html: Path
    lines: int
    skipped: int
    events_used: int
    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    seconds: float = 0.0
    problems: list[inputs.FileProblem] = field(default_factory=list)
    unread: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def checkpoint(df: DataFrame) -> DataFrame:
    """Materialise a small intermediate table in one partition and cut its lineage (see
    :data:`analytics.failover.Checkpoint`; one partition: :data:`SMALL_TABLES`)."""
    return df.coalesce(1).localCheckpoint(eager=True)


def _rows(df: DataFrame) -> list[dict[str, Any]]:
    return [row.asDict() for row in df.collect()]


def _with_times(df: DataFrame) -> DataFrame:
    """Every ``*_us`` column also as a readable UTC timestamp ``*_ts`` (tables for people)."""
    times = {n[:-3] + "_ts": F.timestamp_micros(F.col(n)) for n in df.columns if n.endswith("_us")}
    return df.withColumns(times) if times else df


def write_csv(path: Path, rows: list[dict[str, Any]], columns: Sequence[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=list(columns))
        writer.writeheader()
        for row in rows:
            writer.writerow({k: "" if row.get(k) is None else row[k] for k in columns})


def warnings_for(
    problems: Sequence[inputs.FileProblem], unread: Sequence[str], glob: str
) -> list[str]:
    """One line each: the files with lines the job could not use, and the files it did
    not read."""
    out = []
    if problems:
        truncated = sum(p.truncated for p in problems)
        malformed = sum(p.malformed for p in problems)
        nodes = inputs.suspect_nodes(problems)
        out.append(
            f"{truncated} truncated and {malformed} malformed line(s) in {len(problems)} "
            f"file(s) ({'; '.join(p.describe() for p in problems[: inputs.NAMED_FILES])}"
            f"{' ...' if len(problems) > inputs.NAMED_FILES else ''}): fail-overs of "
            f"{', '.join(nodes) or 'unknown nodes'} marked incomplete"
        )
    if unread:
        out.append(f"{len(unread)} file(s) not read (not matching {glob}): {inputs.named(unread)}")
    return out


def withheld_warnings(failovers: Sequence[dict[str, Any]]) -> list[str]:
    """One line naming the fail-overs left out of the percentiles, and why."""
    held = [r for r in failovers if r.get("kind") == "failover" and r.get("withheld")]
    if not held:
        return []
    named = "; ".join(f"{r['cluster'] or '-'} e{r['epoch']} ({r['withheld']})" for r in held[:10])
    return [
        f"{len(held)} fail-over(s) withheld from the percentiles (missing or contradictory "
        f"evidence): {named}{' ...' if len(held) > 10 else ''}"
    ]


def _identities_and_clocks(
    spark: SparkSession, events: DataFrame
) -> tuple[DataFrame, clocks.Clocks, list[str]]:
    """Cluster names holding several clusters split into runs (:mod:`analytics.runs`),
    then clocks checked and corrected (:mod:`analytics.clocks`): the events to analyse,
    the clocks found and a warning line for each thing changed or withheld."""
    assignment = runs.split(runs.units(events))
    if assignment.rows:
        events = checkpoint(runs.apply(spark, events, assignment))
    clocked = clocks.estimate(clocks.pairs(events))
    if clocked.offsets:
        events = checkpoint(clocks.apply(spark, events, clocked))
    else:
        events = clocks.apply(spark, events, clocked)
    return events, clocked, assignment.warnings + clocked.warnings


def run(
    spark: SparkSession,
    paths: Sequence[str],
    out: Path,
    *,
    labels: failover.Labels | None = None,
    glob: str = DEFAULT_GLOB,
    parquet: str | None = None,
    progress: Progress | None = None,
    listing: inputs.Listing | None = None,
) -> Result:
    """Read ``paths``, analyse, write the tables and ``report.html`` under ``out``.

    :raises JobError: no events, or events of a schema version this job does not read."""
    progress = progress or Progress(None)
    started = time.monotonic()
    listing = listing or check_paths(paths, glob)
    lines_df = read_lines(spark, paths, glob, listing)
    with progress.stage("read logs: count lines by node and event, keep the used ones", spark):
        summary = parse.summarise(lines_df).cache()
        counts = parse.event_counts(summary).cache()
        count_rows: list[Row] = counts.collect()
        stats = _rows(parse.file_stats(summary))
    lines = sum(int(r["lines"]) for r in count_rows)
    skipped = sum(int(r["lines"]) for r in count_rows if r["source"] == "skipped")
    truncated = sum(int(r["lines"]) for r in count_rows if r["source"] == "truncated")
    if lines == skipped + truncated:
        summary.unpersist()
        counts.unpersist()
        raise JobError(f"no JSON log events in {', '.join(paths)} (files matching {glob})")
    try:
        inputs.check_versions(stats)
    except JobError:
        summary.unpersist()
        counts.unpersist()
        raise
    progress.log(f"{lines} lines, {skipped} not events, {truncated} truncated")
    # small tables from here on (SMALL_TABLES)
    with small_tables(spark):
        with progress.stage("parse the used events", spark):
            # a checkpoint, not a cache: every table below is planned from these events,
            # and a cached frame keeps its whole parse plan for each analysis to walk
            events = parsed = checkpoint(parse.normalise(parse.relevant(summary)))
            used = events.count()
            bad = _rows(parse.malformed(summary))
        problems = inputs.line_problems(stats, bad)
        warnings = warnings_for(problems, listing.unread, glob)
        progress.log(f"{used} events used")
        with progress.stage("tell runs apart, check clocks against causality", spark):
            events, clocked, truth = _identities_and_clocks(spark, events)
            agentless = missing_logs.agentless(missing_logs.node_logs(events))
        warnings += truth
        for line in truth:
            progress.log(f"warning: {line}")
        with progress.stage("analyse fail-overs, phases, percentiles, anomalies", spark):
            tables = transforms.analyse(
                events,
                labels,
                checkpoint,
                suspect=inputs.suspect_nodes(problems),
                unclocked=sorted(clocked.unresolved),
                agentless=agentless,
            )
            named: dict[str, DataFrame] = {
                "failovers": _with_times(tables.failovers).orderBy("cluster", "epoch"),
                "percentiles": tables.percentiles,
                "percentiles_by_kind": tables.percentiles_by_kind,
                "tuning": tables.tuning,
                "tuning_by_kind": tables.tuning_by_kind,
                "phases": tables.phases.orderBy("cluster", "epoch"),
                "anomalies": _with_times(tables.anomalies).orderBy("at_us"),
                "primary_stints": _with_times(tables.primary_stints).orderBy("cluster", "start_us"),
                "event_counts": counts.orderBy(F.desc("lines")),
            }
            # each table computed once: its collect fills the cache its Parquet file is
            # written from (the anomalies' plan alone is a dozen joins)
            named = {name: df.cache() for name, df in named.items()}
            collected = {name: _rows(df) for name, df in named.items()}
        withheld_lines = missing_logs.warnings(agentless, collected["failovers"])
        withheld_lines += withheld_warnings(collected["failovers"])
        warnings += withheld_lines
        out.mkdir(parents=True, exist_ok=True)
        with progress.stage("write tables (CSV, Parquet)", spark):
            parquet_root = parquet or (out / "parquet").resolve().as_uri()
            for name, df in named.items():
                write_csv(out / "tables" / f"{name}.csv", collected[name], df.columns)
                df.coalesce(1).write.mode("overwrite").parquet(f"{parquet_root}/{name}")
            file_rows = _file_rows(stats, problems)
            write_csv(out / "tables" / "files.csv", file_rows, FILE_COLUMNS)
        seconds = time.monotonic() - started
        with progress.stage("render report.html", spark):
            html = report.render(
                out,
                collected,
                report.Summary(
                    paths=list(paths), lines=lines, skipped=skipped, events_used=used,
                    seconds=seconds, truncated=truncated,
                    problems=[p.describe() for p in problems],
                    suspect_nodes=inputs.suspect_nodes(problems),
                    unread=[inputs.local_name(f) for f in listing.unread],
                    warnings=truth + withheld_lines,
                ),
            )  # fmt: skip
        for df in named.values():
            df.unpersist()
        parsed.unpersist()
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
        problems=problems,
        unread=list(listing.unread),
        warnings=warnings,
    )


FILE_COLUMNS = ("file", "lines", "events", "truncated", "malformed", "versions", "nodes")


def _file_rows(
    stats: Sequence[dict[str, Any]], problems: Sequence[inputs.FileProblem]
) -> list[dict[str, Any]]:
    bad = {p.file: p.malformed for p in problems}
    return [
        {
            "file": inputs.local_name(str(r["file"])),
            "lines": r["lines"],
            "events": r["events"],
            "truncated": r["truncated"],
            "malformed": bad.get(str(r["file"]), 0),
            "versions": " ".join(r["versions"] or ()),
            "nodes": " ".join(r["nodes"] or ()),
        }
        for r in sorted(stats, key=lambda r: str(r["file"]))
    ]
