"""Clocks checked against causality: an effect logged before its cause on another node
says that a clock is off; the offset is estimated, warned about and corrected, or the
phases that depend on it are withheld.

:Status: Beta

The job times a fail-over across machines (the failure on one, the promotion on another,
the clients' outage on a third), so one clock 2 s off shifts phases by 2 s, makes two
primaries out of one and matches client outages to the wrong fail-over, silently. These
pairs are cause and effect whatever the clocks say (``docs/analytics.md``, "Clocks"):

``link_up``
    a backup's ``ha_link_up`` to a primary of epoch ``E`` comes after that primary's
    ``ha_state_changed`` to recovering with ``E`` (it announces ``E`` only once promoted);
``reconnect``
    a drill client's ``client_reconnected`` with epoch ``E`` comes after the promotion to
    ``E`` (the same announcement);
``kill``
    the nemesis drill's ``broker_sigkilled`` comes before the target's agent sees its
    broker exit (``broker_process_exited``); the exit nearest the record within
    :data:`MAX_OFFSET_US` is taken. (The backups' ``ha_link_down`` is no such pair: a
    stale backup's link was cut on purpose before the kill.)
``resign``
    the promotion to ``E`` (``ha_state_changed`` to recovering) comes after the resignation
    it followed: the first ``agent_fenced`` or ``election_withdraw`` of the previous
    primary's agent after its own promotion, when no ``zookeeper_session_fence`` nor
    ``agent_started`` of that agent came between (it still held its session, so its
    resignation deleted the primary record the next claim waited for; after a session
    fence or a restart the record went with the expired session instead, and a frozen
    node's resignation can come after the promotion). Within :data:`MAX_OFFSET_US`.

:func:`pairs` (Spark) collects them (a few rows per fail-over); :func:`estimate` (pure)
finds the offsets: for each node, the largest amount by which its effects precede their
causes elsewhere (its clock behind) or its causes follow their effects (ahead). Violations
within :data:`TOLERANCE_US` are scheduling noise (a note is logged just after the signal
it records). The node in violation with the most other nodes is corrected first, by the
middle of the interval its pairs allow (the edge when one side is open); until no
violation is left. A node whose pairs allow no offset, or a tie between two nodes that
only contradict each other, is *unresolved*: it is named in a warning and the fail-overs
it takes part in keep no phases (evidence ``clock_unresolved``). :func:`apply` (Spark) adds
each node's offset to its events' times.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from common.failover_phases import RESIGN_EVENTS

__all__ = ["MAX_OFFSET_US", "TOLERANCE_US", "Clocks", "Pair", "apply", "estimate", "pairs"]

#: Cause after effect by at most this much is noise, not a clock (100 ms).
TOLERANCE_US = 100_000
#: The furthest apart a fault record and its effect are looked for (30 s).
MAX_OFFSET_US = 30_000_000

Node = tuple[str, str]  # (cluster, node)


@dataclass(frozen=True)
class Pair:
    """A cause on one node and its effect on another (microseconds, each by its clock)."""

    kind: str
    cause: Node
    cause_us: int
    effect: Node
    effect_us: int

    @property
    def violation(self) -> int:
        """How much the effect precedes its cause (> 0: a clock is off)."""
        return self.cause_us - self.effect_us


@dataclass
class Clocks:
    """What :func:`estimate` found: ``offsets`` (microseconds to add to a node's times),
    ``unresolved`` nodes and one ``warnings`` line per node."""

    offsets: dict[Node, int] = field(default_factory=dict)
    unresolved: set[Node] = field(default_factory=set)
    warnings: list[str] = field(default_factory=list)


def _violations(ps: Sequence[Pair], offsets: dict[Node, int]) -> list[tuple[Pair, int]]:
    out = []
    for p in ps:
        v = p.violation + offsets.get(p.cause, 0) - offsets.get(p.effect, 0)
        if v > TOLERANCE_US:
            out.append((p, v))
    return out


def _bounds(ps: Sequence[Pair], node: Node, offsets: dict[Node, int]) -> tuple[float, float]:
    """The offsets of ``node`` its pairs allow, the others' as they are: [lo, hi]."""
    lo, hi = float("-inf"), float("inf")
    for p in ps:
        if p.effect == node and p.cause != node:
            lo = max(lo, p.violation + offsets.get(p.cause, 0) - TOLERANCE_US)
        elif p.cause == node and p.effect != node:
            hi = min(hi, -p.violation + offsets.get(p.effect, 0) + TOLERANCE_US)
    return lo, hi


def _name(node: Node) -> str:
    return f"{node[1]} (cluster {node[0] or '-'})"


def estimate(ps: Sequence[Pair]) -> Clocks:
    """The clock offsets the pairs show (see the module's docstring)."""
    out = Clocks()
    offsets: dict[Node, int] = {}
    for _ in range(len({n for p in ps for n in (p.cause, p.effect)}) + 1):
        bad = _violations(ps, offsets)
        if not bad:
            break
        partners: dict[Node, set[Node]] = defaultdict(set)
        for p, _v in bad:
            if p.cause not in out.unresolved and p.effect not in out.unresolved:
                partners[p.cause].add(p.effect)
                partners[p.effect].add(p.cause)
        if not partners:
            break
        most = max(len(v) for v in partners.values())
        top = sorted(n for n, v in partners.items() if len(v) == most)
        if len(top) > 1 and most == 1:
            # two nodes that only contradict each other: which clock is off is unknown
            for node in top:
                out.unresolved.add(node)
            example = next(p for p, _v in bad if p.cause in top or p.effect in top)
            out.warnings.append(
                f"clock: {_name(example.effect)} logged {example.kind} "
                f"{example.violation / 1000:.0f} ms before its cause on "
                f"{_name(example.cause)}, and nothing else tells which clock is off: the "
                f"phases of their fail-overs are withheld"
            )
            continue
        node = top[0]
        lo, hi = _bounds(ps, node, offsets)
        if lo > hi:
            out.unresolved.add(node)
            out.warnings.append(
                f"clock: {_name(node)} logs effects before their causes on other nodes, by "
                f"amounts no one offset explains: the phases of its fail-overs are withheld"
            )
            continue
        value = (
            (lo + hi) / 2
            if lo > float("-inf") and hi < float("inf")
            else (lo if lo > float("-inf") else hi)
        )
        offsets[node] = int(value)
        worst = max((v for p, v in bad if node in (p.cause, p.effect)), default=0)
        kinds = sorted({p.kind for p, _v in bad if node in (p.cause, p.effect)})
        side = "behind" if value > 0 else "ahead of"
        out.warnings.append(
            f"clock: {_name(node)} is about {abs(value) / 1e6:.3f} s {side} the other nodes "
            f"(effects before their causes by up to {worst / 1000:.0f} ms: "
            f"{', '.join(kinds)}): its times are corrected by {value / 1000:+.0f} ms"
        )
    out.offsets = {n: v for n, v in offsets.items() if v and n not in out.unresolved}
    return out


def _rows(df: DataFrame) -> list[Any]:
    return list(df.collect())


def pairs(events: DataFrame) -> list[Pair]:
    """The cause-and-effect pairs of the normalised events (collected; see the module)."""
    rec = (
        events.where(
            (F.col("source") == "broker")
            & (F.col("event") == "ha_state_changed")
            & (F.col("new") == "recovering")
        )
        .groupBy("cluster", "epoch")
        .agg(F.min("us").alias("c_us"), F.min_by("node", "us").alias("c_node"))
    )
    ups = (
        events.where((F.col("event") == "ha_link_up") & F.col("primary_epoch").isNotNull())
        .groupBy("cluster", "node", F.col("primary_epoch").alias("epoch"))
        .agg(F.min("us").alias("e_us"))
        .withColumn("kind", F.lit("ha_link_up after its primary's promotion"))
    )
    back = (
        events.where((F.col("event") == "client_reconnected") & F.col("epoch").isNotNull())
        .groupBy("cluster", "node", "epoch")
        .agg(F.min("us").alias("e_us"))
        .withColumn("kind", F.lit("client_reconnected after the promotion it names"))
    )
    columns = ["kind", "c_cluster", "c_node", "c_us", "cluster", "node", "e_us"]
    promoted = (
        ups.unionByName(back)
        .join(rec, ["cluster", "epoch"])
        .where(F.col("node") != F.col("c_node"))
        .withColumn("c_cluster", F.col("cluster"))
        .select(*columns)
    )
    kills = events.where(
        (F.col("source") == "drill") & (F.col("event") == "broker_sigkilled")
    ).select(
        F.col("cluster").alias("c_cluster"), F.col("node").alias("c_node"),
        F.col("us").alias("c_us"), "target",
    )  # fmt: skip
    exits = events.where(
        (F.col("event") == "broker_process_exited") & (F.col("source") == "agent")
    ).select("cluster", "node", "us")
    near = (
        kills.join(
            exits,
            ((F.col("c_cluster") == F.col("cluster")) | (F.col("c_cluster") == ""))
            & (F.abs(F.col("us") - F.col("c_us")) <= MAX_OFFSET_US)
            & (F.col("node") == F.col("target")),
        )
        .groupBy("c_cluster", "c_node", "c_us", "cluster", "node")
        .agg(F.min_by("us", F.abs(F.col("us") - F.col("c_us"))).alias("e_us"))
        .withColumn("kind", F.lit("broker_process_exited after the drill's kill"))
        .select(*columns)
    )  # fmt: skip
    return [
        Pair(r["kind"], (r["c_cluster"], r["c_node"]), int(r["c_us"]),
             (r["cluster"], r["node"]), int(r["e_us"]))
        for r in _rows(promoted.unionByName(near).unionByName(_resigned(events, rec)))
    ]  # fmt: skip


def _resigned(events: DataFrame, rec: DataFrame) -> DataFrame:
    """The ``resign`` pairs (see the module): cause the previous primary's resignation,
    effect the next promotion's move to recovering, in :func:`pairs`' columns."""
    turns = rec.select(
        "cluster", "epoch", F.col("c_node").alias("node"), F.col("c_us").alias("e_us"),
        F.lag("c_node").over(Window.partitionBy("cluster").orderBy("epoch")).alias("x_node"),
        F.lag("c_us").over(Window.partitionBy("cluster").orderBy("epoch")).alias("x_us"),
    ).where(F.col("x_node").isNotNull() & (F.col("x_node") != F.col("node")))  # fmt: skip
    agent = events.where(F.col("source") == "agent")
    resigns = agent.where(F.col("event").isin(*RESIGN_EVENTS)).select(
        "cluster", F.col("node").alias("x_node"), F.col("us").alias("r_us")
    )
    first = (
        turns.join(resigns, ["cluster", "x_node"])
        .where(F.col("r_us") > F.col("x_us"))
        .groupBy("cluster", "epoch", "node", "e_us", "x_node", "x_us")
        .agg(F.min("r_us").alias("r_us"))
    )
    sessionless = agent.where(
        F.col("event").isin("zookeeper_session_fence", "agent_started")
    ).select("cluster", F.col("node").alias("x_node"), F.col("us").alias("s_us"))
    lost = (
        first.join(sessionless, ["cluster", "x_node"])
        .where((F.col("s_us") > F.col("x_us")) & (F.col("s_us") <= F.col("r_us")))
        .select("cluster", "epoch")
        .distinct()
    )
    return (
        first.join(lost, ["cluster", "epoch"], "left_anti")
        .where(F.abs(F.col("r_us") - F.col("e_us")) <= MAX_OFFSET_US)
        .select(
            F.lit("recovering after the resignation it followed").alias("kind"),
            F.col("cluster").alias("c_cluster"), F.col("x_node").alias("c_node"),
            F.col("r_us").alias("c_us"), "cluster", "node", "e_us",
        )
    )  # fmt: skip


OFFSET_SCHEMA = T.StructType(
    [
        T.StructField("o_cluster", T.StringType()),
        T.StructField("o_node", T.StringType()),
        T.StructField("clock_offset_us", T.LongType()),
    ]
)


def apply(spark: SparkSession, events: DataFrame, clocks: Clocks) -> DataFrame:
    """``events`` with each node's offset added to ``us`` (and kept as
    ``clock_offset_us``, for times inside fields: the drill's ``*_confirm_ts``)."""
    if not clocks.offsets:
        return events.withColumn("clock_offset_us", F.lit(0).cast("long"))
    rows = [(c, n, v) for (c, n), v in sorted(clocks.offsets.items())]
    table: Any = spark.createDataFrame(rows, OFFSET_SCHEMA)
    return (
        events.join(
            F.broadcast(table),
            (F.col("o_cluster") == F.col("cluster")) & (F.col("o_node") == F.col("node")),
            "left",
        )
        .withColumn("clock_offset_us", F.coalesce("clock_offset_us", F.lit(0).cast("long")))
        .withColumn("us", F.col("us") + F.col("clock_offset_us"))
        .drop("o_cluster", "o_node")
    )
