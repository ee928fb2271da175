"""Runs told apart: one cluster name, several clusters (a drill run twice, a cluster
rebuilt), split by their identity, never by name alone.

:Status: Beta

A cluster's identity is its store's cluster id (``ha_cluster_id_created`` by its first
primary, ``ha_cluster_id_adopted`` by each backup: seed 002); a drill's is its run id
(``run_id`` on every line of ``qpid-ha drill``'s log, and of a nemesis drill's). Epochs
start again at 1 in a new cluster, so two runs read under one name would pair promotions
of one run with failures of the other.

- :func:`units` (Spark): the log's units, one per file, cluster name and run id, with
  their first and last times and the cluster ids they logged (small: a row per file).
- :func:`split` (pure, no Spark): for every cluster name with more than one cluster id, the
  run each unit belongs to, by the first rule that gives one: the ids it logged itself
  (from each id's first time on); else those of the files in its directory; else those of
  the files under it (a nemesis drill's ``drill.log`` sits above ``n1/qpidd.log``); else the
  run whose time span overlaps it most. Such a name's events take the cluster
  ``name@<first 8 characters of the id>``; a unit no rule places is named in a warning
  and keeps the bare name (its events then match no run's fail-overs).
- :func:`apply` (Spark): the new cluster names on the events.

A name with one cluster id (or none) is left as it is: the tables of one run do not change.
"""

from __future__ import annotations

import posixpath
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

__all__ = ["ID_EVENTS", "Assignment", "Unit", "apply", "split", "units"]

#: The events that name a broker's cluster id.
ID_EVENTS = ("ha_cluster_id_created", "ha_cluster_id_adopted")
#: Characters of the cluster id in a split cluster's name.
ID_CHARS = 8


@dataclass(frozen=True)
class Unit:
    """The lines of one file, cluster name and run id (``""``: none)."""

    file: str
    cluster: str
    run_id: str
    first_us: int
    last_us: int
    #: (first time, cluster id) of each id this unit logged
    ids: tuple[tuple[int, str], ...] = ()


@dataclass
class Assignment:
    """Where each unit's lines go: ``(file, cluster, run_id, from_us, cluster name)`` rows
    (a unit's lines at or after ``from_us`` and before the next row's), and warnings."""

    rows: list[tuple[str, str, str, int, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    split_names: list[str] = field(default_factory=list)


def units(events: DataFrame) -> list[Unit]:
    """The units of the normalised events (collected: a row per file, name and run)."""
    run_id = F.coalesce(F.col("run_id"), F.lit(""))
    rows = (
        events.groupBy("file", "cluster", run_id.alias("run"))
        .agg(
            F.min("us").alias("first_us"),
            F.max("us").alias("last_us"),
            F.collect_set(
                F.when(
                    F.col("event").isin(*ID_EVENTS) & F.col("cluster_id").isNotNull(),
                    F.struct("us", "cluster_id"),
                )
            ).alias("ids"),
        )
        .collect()
    )
    out = []
    for r in rows:
        first: dict[str, int] = {}
        for at, cid in r["ids"] or ():
            first[cid] = min(first.get(cid, at), at)
        out.append(
            Unit(
                file=str(r["file"] or ""),
                cluster=str(r["cluster"] or ""),
                run_id=str(r["run"]),
                first_us=int(r["first_us"]),
                last_us=int(r["last_us"]),
                ids=tuple(sorted((at, cid) for cid, at in first.items())),
            )
        )
    return out


def _label(cluster: str, cid: str) -> str:
    return f"{cluster}@{cid[:ID_CHARS]}"


def _under(directory: str, other: str) -> bool:
    return other != directory and other.startswith(directory.rstrip("/") + "/")


def split(all_units: Sequence[Unit]) -> Assignment:
    """The run of every unit of a cluster name with several cluster ids (see the module)."""
    by_name: dict[str, list[Unit]] = defaultdict(list)
    for u in all_units:
        by_name[u.cluster].append(u)
    out = Assignment()
    for name, members in sorted(by_name.items()):
        ids = sorted({cid for u in members for _, cid in u.ids})
        if len(ids) < 2:
            continue
        out.split_names.append(name)
        span: dict[str, list[int]] = {}
        for u in members:
            for cid in {c for _, c in u.ids}:
                lo, hi = span.get(cid, [u.first_us, u.last_us])
                span[cid] = [min(lo, u.first_us), max(hi, u.last_us)]
        unplaced = []
        for u in members:
            row = (u.file, u.cluster, u.run_id)
            if u.ids:
                for i, (at, cid) in enumerate(u.ids):
                    out.rows.append((*row, -(2**62) if i == 0 else at, _label(name, cid)))
                continue
            directory = posixpath.dirname(u.file)
            near = {c for o in members for _, c in o.ids if posixpath.dirname(o.file) == directory}
            if len(near) != 1:
                near = {
                    c
                    for o in members
                    for _, c in o.ids
                    if _under(directory, posixpath.dirname(o.file))
                }
            if len(near) != 1:
                overlap = {
                    cid: min(u.last_us, hi) - max(u.first_us, lo) for cid, (lo, hi) in span.items()
                }
                best = max(overlap, key=lambda c: overlap[c])
                near = {best} if overlap[best] >= 0 else set()
            if len(near) == 1:
                out.rows.append((*row, -(2**62), _label(name, next(iter(near)))))
            else:
                unplaced.append(u.file + (f" (run {u.run_id})" if u.run_id else ""))
        out.warnings.append(
            f"cluster name {name!r} holds {len(ids)} clusters (store cluster ids "
            f"{', '.join(i[:ID_CHARS] for i in ids)}): read as {len(ids)} runs, named "
            f"{', '.join(_label(name, i) for i in ids)}"
            + (f"; lines placed in none: {', '.join(sorted(unplaced)[:5])}" if unplaced else "")
        )
    return out


ASSIGNMENT_SCHEMA = T.StructType(
    [
        T.StructField("a_file", T.StringType()),
        T.StructField("a_cluster", T.StringType()),
        T.StructField("a_run", T.StringType()),
        T.StructField("a_from", T.LongType()),
        T.StructField("a_name", T.StringType()),
    ]
)


def apply(spark: SparkSession, events: DataFrame, assignment: Assignment) -> DataFrame:
    """``events`` with each assigned line's ``cluster`` replaced by its run's name (the
    last assignment row of its unit at or before its time)."""
    if not assignment.rows:
        return events
    table: Any = spark.createDataFrame(assignment.rows, ASSIGNMENT_SCHEMA)
    keyed = events.withColumn("_row", F.monotonically_increasing_id())
    run_id = F.coalesce(F.col("run_id"), F.lit(""))
    matched = (
        keyed.select("_row", "file", "cluster", run_id.alias("run"), "us")
        .join(
            F.broadcast(table),
            (F.col("a_file") == F.col("file"))
            & (F.col("a_cluster") == F.col("cluster"))
            & (F.col("a_run") == F.col("run"))
            & (F.col("a_from") <= F.col("us")),
        )
        .groupBy("_row")
        .agg(F.max_by("a_name", "a_from").alias("_name"))
    )
    return (
        keyed.join(matched, "_row", "left")
        .withColumn("cluster", F.coalesce("_name", "cluster"))
        .drop("_row", "_name")
    )
