"""Each broker's HA states over time, and its stints as primary.

:Status: Beta

Input: normalised events (:func:`analytics.parse.normalise`). Pure DataFrame-to-DataFrame
functions. :func:`state_intervals`: each broker's HA state from one ``ha_state_changed``
to the next, ended by its stop, fence or death (its agent's ``broker_process_exited`` or
``broker_killed``) or by the end of its log; :func:`primary_stints` merges recovering and
active into one stint as primary (what :func:`analytics.anomalies.anomalies` compares).
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from common.failover_phases import BROKER_FAILURE_EVENTS

PRIMARY_STATES = ("recovering", "active")
#: Broker events that end a broker's current state: it stopped, was fenced or failed (the
#: web console's timeline reads the same list).
BROKER_END_EVENTS = BROKER_FAILURE_EVENTS
#: Agent events that say its broker process is gone.
AGENT_DEATH_EVENTS = ("broker_process_exited", "broker_killed")


def state_intervals(events: DataFrame) -> DataFrame:
    """Each broker's HA states as intervals ``[start_us, end_us)``.

    Marks per node, in time order: ``ha_started`` (state ``joining``), ``ha_state_changed``
    (state ``new``), and the ends with no state: the broker's ``broker_stopped``,
    ``ha_fenced``, ``ha_illegal_transition`` and its agent's ``broker_process_exited`` and
    ``broker_killed``. A state lasts until the next mark of its node; the last one until
    the cluster's last event (``end_by`` ``log_end``: nothing says it changed before the
    logs end). Columns: cluster, node, state, epoch,
    old (the state before), start_us, end_us, end_by.
    """
    is_ha = F.col("source") == "broker"
    marks = events.where(
        (is_ha & F.col("event").isin("ha_started", "ha_state_changed", *BROKER_END_EVENTS))
        | ((F.col("source") == "agent") & F.col("event").isin(*AGENT_DEATH_EVENTS))
    ).select(
        "cluster",
        "node",
        "us",
        "event",
        "epoch",
        F.when(F.col("event") == "ha_started", F.lit("joining"))
        .when(F.col("event") == "ha_state_changed", F.col("new"))
        .alias("state"),
        F.when(F.col("event") == "ha_state_changed", F.col("old")).alias("old"),
        # at equal times a state change comes after the end it follows
        F.when(F.col("event").isin("ha_started", "ha_state_changed"), F.lit(1))
        .otherwise(F.lit(0))
        .alias("order"),
    )
    last_seen = events.groupBy("cluster").agg(F.max("us").alias("last_us"))
    by_node = Window.partitionBy("cluster", "node").orderBy("us", "order")
    return (
        marks.withColumn("end_us", F.lead("us").over(by_node))
        .withColumn("end_by", F.lead("event").over(by_node))
        .where(F.col("state").isNotNull())
        .join(last_seen, "cluster", "left")
        .select(
            "cluster",
            "node",
            "state",
            "epoch",
            "old",
            F.col("us").alias("start_us"),
            F.coalesce("end_us", "last_us").alias("end_us"),
            F.coalesce("end_by", F.lit("log_end")).alias("end_by"),
        )
    )


def primary_stints(intervals: DataFrame) -> DataFrame:
    """A broker's time as primary: consecutive recovering/active intervals of one node
    merged. Columns: cluster, node, epoch (at promotion), start_us, end_us, end_by."""
    by_node = Window.partitionBy("cluster", "node").orderBy("start_us")
    primary = intervals.where(F.col("state").isin(*PRIMARY_STATES))
    flagged = primary.withColumn("prev_end", F.lag("end_us").over(by_node)).withColumn(
        "new_stint",
        F.when(
            F.col("prev_end").isNull() | (F.col("prev_end") != F.col("start_us")), F.lit(1)
        ).otherwise(F.lit(0)),
    )
    numbered = flagged.withColumn(
        "stint",
        F.sum("new_stint").over(by_node.rowsBetween(Window.unboundedPreceding, 0)),
    )
    return (
        numbered.groupBy("cluster", "node", "stint")
        .agg(
            F.min_by("epoch", "start_us").alias("epoch"),
            F.min("start_us").alias("start_us"),
            F.max("end_us").alias("end_us"),
            F.max_by("end_by", "end_us").alias("end_by"),
        )
        .drop("stint")
    )
