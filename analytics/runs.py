"""Runs told apart: one cluster name, several clusters (a drill run twice, a cluster
rebuilt), split by their identity, never by name alone.

:Status: Beta

A cluster's identity is its store's cluster id (``ha_cluster_id_created`` by its first
primary, ``ha_cluster_id_adopted`` by each backup: seed 002); a drill's is its run id
(``run_id`` on every line of ``qpid-ha drill``'s log, and of a nemesis drill's). Epochs
start again at 1 in a new cluster, so two runs read under one name would pair promotions
of one run with failures of the other. Brokers older than the cluster id log none: a name
whose promotions' epochs start again (a promotion to an epoch no higher than an earlier
one's) holds several clusters, told apart by the drills' run ids when there are several,
else named in a warning (its fail-overs are mixed; nothing in the logs tells them apart).

- :func:`units` (Spark): the log's units, one per file, cluster name and run id, with
  their first and last times and the cluster ids they logged (small: a row per file).
- :func:`split` (pure, no Spark): for every cluster name with more than one cluster id (or
  with epochs that start again and more than one drill run id: the ids are then the run
  ids), the run each unit belongs to, by the first rule that gives one: the ids it logged
  itself (from each id's first time on); else those of the files in its directory; else
  those of the files under it (a nemesis drill's ``drill.log`` sits above
  ``n1/qpidd.log``); else those of the files in the nearest directory above it; else the
  run whose time span overlaps it most. Such a name's events take the cluster
  ``name@<first 8 characters of the id>``; a unit no rule places is named in a warning
  and keeps the bare name (its events then match no run's fail-overs).
- :func:`apply` (Spark): the new cluster names on the events.

A name with one cluster id (or none) is left as it is: the tables of one run do not change.
"""

from __future__ import annotations

import posixpath
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

__all__ = ["ID_EVENTS", "Assignment", "Unit", "apply", "restart", "split", "units"]

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
    #: (time, epoch) of each promotion this unit logged (a broker's move to recovering)
    promotions: tuple[tuple[int, int], ...] = ()


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
            F.collect_set(
                F.when(
                    (F.col("event") == "ha_state_changed")
                    & (F.col("new") == "recovering")
                    & F.col("epoch").isNotNull(),
                    F.struct("us", "epoch"),
                )
            ).alias("promotions"),
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
                promotions=tuple(sorted((int(at), int(e)) for at, e in r["promotions"] or ())),
            )
        )
    return out


def _label(cluster: str, cid: str) -> str:
    return f"{cluster}@{cid[:ID_CHARS]}"


def _under(directory: str, other: str) -> bool:
    return other != directory and other.startswith(directory.rstrip("/") + "/")


def restart(members: Sequence[Unit]) -> tuple[int, int, int] | None:
    """The first promotion of these units, in time order, to an epoch no higher than an
    earlier one's: ``(time, epoch, the highest before)``; None when epochs only rise (one
    cluster: every promotion takes a higher epoch)."""
    highest: int | None = None
    for at, epoch in sorted({p for u in members for p in u.promotions}):
        if highest is not None and epoch <= highest:
            return at, epoch, highest
        highest = epoch if highest is None else max(highest, epoch)
    return None


def _run_identity(members: Sequence[Unit]) -> Callable[[Unit], tuple[tuple[int, str], ...]]:
    """A unit's drill run id as its identity, a run nested in another run's span of the
    same file taken as that one (a nemesis drill's clients log their own run ids on
    ``drill_started``, inside the nemesis run's lines)."""
    outer: dict[tuple[str, str], str] = {}
    for u in members:
        around = [
            o
            for o in members
            if o.file == u.file and o.run_id and o.run_id != u.run_id
            and o.first_us <= u.first_us and u.last_us <= o.last_us
        ]  # fmt: skip
        if u.run_id and around:
            outer[(u.file, u.run_id)] = max(around, key=lambda o: o.last_us - o.first_us).run_id

    def identity(u: Unit) -> tuple[tuple[int, str], ...]:
        if not u.run_id:
            return ()
        return ((u.first_us, outer.get((u.file, u.run_id), u.run_id)),)

    return identity


def _cluster_ids(u: Unit) -> tuple[tuple[int, str], ...]:
    return u.ids


def split(all_units: Sequence[Unit]) -> Assignment:
    """The run of every unit of a cluster name with several cluster ids, or with epochs
    that start again and several drill run ids (see the module)."""
    by_name: dict[str, list[Unit]] = defaultdict(list)
    for u in all_units:
        by_name[u.cluster].append(u)
    out = Assignment()
    for name, members in sorted(by_name.items()):
        identity: Callable[[Unit], tuple[tuple[int, str], ...]] = _cluster_ids
        ids = sorted({cid for u in members for _, cid in u.ids})
        what = "clusters (store cluster ids"
        if len(ids) < 2:
            again = restart(members)
            if again is None:
                continue
            identity = _run_identity(members)
            ids = sorted({c for u in members for _, c in identity(u)})
            what = (
                f"clusters (epoch {again[1]} promoted after epoch {again[2]}, and no cluster "
                f"id: drill run ids"
            )
            if len(ids) < 2:
                out.warnings.append(
                    f"cluster name {name!r} holds several clusters (epoch {again[1]} promoted "
                    f"after epoch {again[2]}) and no cluster id nor drill run id tells them "
                    f"apart: its fail-overs are mixed (give each run its own --cluster)"
                )
                continue
        out.split_names.append(name)
        unplaced = _place(name, members, identity, out)
        out.warnings.append(
            f"cluster name {name!r} holds {len(ids)} {what} "
            f"{', '.join(i[:ID_CHARS] for i in ids)}): read as {len(ids)} runs, named "
            f"{', '.join(_label(name, i) for i in ids)}"
            + (f"; lines placed in none: {', '.join(sorted(unplaced)[:5])}" if unplaced else "")
        )
    return out


def _nearby(
    directory: str,
    members: Sequence[Unit],
    identity: Callable[[Unit], tuple[tuple[int, str], ...]],
) -> set[str]:
    """The ids of the files in ``directory``; else of the files under it; else of the
    files in the nearest directory above it that holds any (empty or several: no answer
    here)."""
    where: dict[str, set[str]] = defaultdict(set)
    for o in members:
        for _, c in identity(o):
            where[posixpath.dirname(o.file)].add(c)
    near = where.get(directory, set())
    if len(near) != 1:
        near = {c for d, cs in where.items() if _under(directory, d) for c in cs}
    up = directory
    while len(near) != 1 and not where.get(up) and posixpath.dirname(up) != up:
        up = posixpath.dirname(up)
        near = where.get(up, set())
    return near


def _place(
    name: str,
    members: Sequence[Unit],
    identity: Callable[[Unit], tuple[tuple[int, str], ...]],
    out: Assignment,
) -> list[str]:
    """Rows of ``out`` for every unit of ``members`` (see the module); the units no rule
    places."""
    span: dict[str, list[int]] = {}
    for u in members:
        for cid in {c for _, c in identity(u)}:
            lo, hi = span.get(cid, [u.first_us, u.last_us])
            span[cid] = [min(lo, u.first_us), max(hi, u.last_us)]
    unplaced = []
    for u in members:
        row = (u.file, u.cluster, u.run_id)
        own = identity(u)
        if own:
            for i, (at, cid) in enumerate(own):
                out.rows.append((*row, -(2**62) if i == 0 else at, _label(name, cid)))
            continue
        near = _nearby(posixpath.dirname(u.file), members, identity)
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
    return unplaced


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
