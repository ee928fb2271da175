"""Anomalies: what must not happen in a fail-over, found in the logs.

:Status: Beta

Inputs: normalised events (:func:`analytics.parse.normalise`), the state intervals and
primary stints (:mod:`analytics.states`) and the promotions
(:func:`analytics.failover.promotions`). One pure function, :func:`anomalies`: two
primaries at once, a promotion of a broker that was not ready while a ready one existed,
confirmed messages lost.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from analytics.parse import US_PER_MS
from analytics.states import primary_stints

ANOMALY_COLUMNS = ("kind", "cluster", "epoch", "node", "other_node", "at_us", "ms", "detail")


def anomalies(
    events: DataFrame,
    intervals: DataFrame,
    promoted: DataFrame,
    stints: DataFrame | None = None,
) -> DataFrame:
    """Three kinds, one row each (columns :data:`ANOMALY_COLUMNS`):

    ``two_primaries``: two brokers of a cluster primary (recovering/active) at once by
    their logs, for ``ms`` > 0; ``two_primaries_silent`` when the one promoted first logged
    nothing during the overlap (a frozen node: it did not serve, and is fenced when it
    runs again). ``promoted_not_ready``: a broker promoted from a state other than ready
    (joining, catch-up) while another broker of the cluster was ready.
    ``confirmed_lost``: a ``drill_finished`` with ``lost`` > 0.
    """
    stints = primary_stints(intervals) if stints is None else stints
    a = stints.alias("a")
    b = stints.alias("b")
    overlaps = (
        a.join(
            b,
            (F.col("a.cluster") == F.col("b.cluster"))
            & (F.col("a.node") != F.col("b.node"))
            & (
                (F.col("a.start_us") < F.col("b.start_us"))
                | (
                    (F.col("a.start_us") == F.col("b.start_us"))
                    & (F.col("a.node") < F.col("b.node"))
                )
            )
            & (F.col("b.start_us") < F.col("a.end_us")),
        )
        .select(
            F.col("a.cluster").alias("cluster"),
            F.col("b.epoch").alias("epoch"),
            F.col("a.node").alias("node"),
            F.col("b.node").alias("other_node"),
            F.col("b.start_us").alias("at_us"),
            F.least("a.end_us", "b.end_us").alias("o_end"),
        )
        .withColumn("ms", (F.col("o_end") - F.col("at_us")) / US_PER_MS)
    )
    broker_lines = events.where(F.col("source") == "broker").select(
        F.col("cluster").alias("l_cluster"), F.col("node").alias("l_node"), F.col("us")
    )
    logged = (
        overlaps.join(
            broker_lines,
            (F.col("l_cluster") == F.col("cluster"))
            & (F.col("l_node") == F.col("node"))
            & (F.col("us") > F.col("at_us"))
            & (F.col("us") < F.col("o_end")),
        )
        .groupBy("cluster", "node", "other_node", "at_us")
        .agg(F.count(F.lit(1)).alias("lines"))
    )
    two = overlaps.join(logged, ["cluster", "node", "other_node", "at_us"], "left").select(
        F.when(F.col("lines").isNull(), F.lit("two_primaries_silent"))
        .otherwise(F.lit("two_primaries"))
        .alias("kind"),
        "cluster",
        "epoch",
        "node",
        "other_node",
        "at_us",
        "ms",
        F.concat(
            F.col("other_node"),
            F.lit(" promoted while "),
            F.col("node"),
            F.lit(" was still primary ("),
            F.coalesce(F.col("lines"), F.lit(0)).cast("string"),
            F.lit(" lines logged by it meanwhile)"),
        ).alias("detail"),
    )

    ready = intervals.where(F.col("state") == "ready").select(
        F.col("cluster").alias("r_cluster"),
        F.col("node").alias("r_node"),
        F.col("start_us").alias("r_start"),
        F.col("end_us").alias("r_end"),
    )
    not_ready = (
        promoted.where(
            F.col("recovering_us").isNotNull()
            & F.col("old_state").isNotNull()
            & (F.col("old_state") != "ready")
        )
        .join(
            ready,
            (F.col("r_cluster") == F.col("cluster"))
            & (F.col("r_node") != F.col("node"))
            & (F.col("r_start") <= F.col("recovering_us"))
            & (F.col("r_end") > F.col("recovering_us")),
        )
        .groupBy("cluster", "epoch", "node", "recovering_us", "old_state")
        .agg(F.min("r_node").alias("other_node"))
        .select(
            F.lit("promoted_not_ready").alias("kind"),
            "cluster",
            "epoch",
            "node",
            "other_node",
            F.col("recovering_us").alias("at_us"),
            F.lit(None).cast("double").alias("ms"),
            F.concat(
                F.col("node"),
                F.lit(" promoted from "),
                F.col("old_state"),
                F.lit(" while "),
                F.col("other_node"),
                F.lit(" was ready"),
            ).alias("detail"),
        )
    )

    lost = events.where((F.col("event") == "drill_finished") & (F.col("lost") > 0)).select(
        F.lit("confirmed_lost").alias("kind"),
        "cluster",
        "epoch",
        "node",
        F.lit(None).cast("string").alias("other_node"),
        F.col("us").alias("at_us"),
        F.lit(None).cast("double").alias("ms"),
        F.concat(
            F.col("lost").cast("string"),
            F.lit(" confirmed messages lost (of "),
            F.coalesce(F.col("confirmed").cast("string"), F.lit("?")),
            F.lit(" confirmed)"),
        ).alias("detail"),
    )
    return two.unionByName(not_ready).unionByName(lost)
