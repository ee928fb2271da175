"""Raw log lines to normalised events: the analysis's first step.

:Status: Beta

Inputs: the JSON log lines of brokers, agents and drill clients (``docs/log-schema.md``,
schema 1) as :func:`analytics.job.read_lines` reads them (a ``value`` column). Pure
DataFrame-to-DataFrame functions: nothing here reads or writes files or collects rows.

1. :func:`summarise`: one pass over the raw lines; each line's ``event`` and ``node`` read
   without parsing it, the line kept only when its event is one the analysis uses
   (:data:`RELEVANT_EVENTS`), grouped with a count.
2. :func:`event_counts`: lines by source, node and event, from the summary.
3. :func:`relevant`: the kept lines parsed with :data:`RAW_SCHEMA`.
4. :func:`normalise`: drop lines that are not events, time as integer microseconds ``us``,
   ``source`` (broker, agent, drill), the cluster of broker events (the broker logs none)
   from the agent of the same node (:func:`node_clusters`).

Times are microseconds since the Unix epoch (``us``, exact integers, :func:`micros`);
durations are milliseconds (``*_ms``, doubles: microseconds / :data:`US_PER_MS`).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

#: The fields the job reads; any other field of a line is ignored. A line that is not JSON
#: or has no ``event``/``ts`` is counted as skipped.
RAW_SCHEMA = T.StructType(
    [
        T.StructField("ts", T.StringType()),
        T.StructField("level", T.StringType()),
        T.StructField("event", T.StringType()),
        T.StructField("node", T.StringType()),
        T.StructField("cluster", T.StringType()),
        T.StructField("epoch", T.LongType()),
        T.StructField("component", T.StringType()),
        # HA and agent
        T.StructField("old", T.StringType()),
        T.StructField("new", T.StringType()),
        T.StructField("reason", T.StringType()),
        T.StructField("ha_state", T.StringType()),
        T.StructField("new_epoch", T.LongType()),
        T.StructField("took_ms", T.DoubleType()),
        T.StructField("session_timeout", T.DoubleType()),
        # drill
        T.StructField("scenario", T.StringType()),
        T.StructField("role", T.StringType()),
        T.StructField("outage_ms", T.DoubleType()),
        T.StructField("gap_ms", T.DoubleType()),
        T.StructField("last_confirm_ts", T.StringType()),
        T.StructField("first_confirm_ts", T.StringType()),
        T.StructField("sent", T.LongType()),
        T.StructField("confirmed", T.LongType()),
        T.StructField("lost", T.LongType()),
    ]
)

#: Events the analysis uses; every other event is only counted.
RELEVANT_EVENTS = (
    "ha_started",
    "ha_state_changed",
    "ha_fenced",
    "ha_illegal_transition",
    "ha_link_up",
    "ha_link_down",
    "ha_primary_refused",
    "ha_promote_requested",
    "broker_stopped",
    "agent_started",
    "broker_state",
    "broker_process_exited",
    "broker_killed",
    "agent_fenced",
    "election_withdraw",
    "election_won",
    "agent_promoted",
    "zookeeper_session_fence",
    "drill_started",
    "client_disconnected",
    "client_reconnected",
    "confirm_gap",
    "drill_finished",
)

#: The agent's events (``docs/log-schema.md``), to name the source of a line unparsed.
AGENT_EVENTS = (
    "agent_started", "agent_stopping", "agent_stopped", "broker_state",
    "promotion_eligibility", "election_contending", "election_won", "election_withdraw",
    "election_ended", "epoch_taken", "agent_promoted", "promotion_refused",
    "promotion_failed", "agent_fenced", "zookeeper_session_fence", "broker_killed",
    "broker_process_started", "broker_process_exited", "broker_process_start_failed",
    "vip_added", "vip_removed", "vip_failed", "vip_announce_failed", "zookeeper_error",
    "zookeeper_unreachable", "member_record_invalid", "primary_record_invalid",
)  # fmt: skip
DRILL_EVENTS = (
    "drill_started", "client_disconnected", "client_reconnected", "confirm_gap",
    "drill_finished",
)  # fmt: skip

#: Microseconds in a millisecond: durations in ``*_ms`` are differences of ``us`` over this.
US_PER_MS = 1000.0


def micros(column: Column) -> Column:
    """ISO-8601 text (``2026-11-22T07:42:02.123456Z``) to microseconds since the epoch."""
    return F.unix_micros(F.try_to_timestamp(column))


def _source(component: Column) -> Column:
    return (
        F.when(component == "agent", F.lit("agent"))
        .when(component == "drill", F.lit("drill"))
        .otherwise(F.lit("broker"))
    )


def _key(name: str) -> Column:
    """The string value of top-level key ``name`` in a JSON line, found by a regular
    expression without parsing the line (``"name": "value"``, any spaces); ``""`` when
    absent or not a string. Values are snake_case names, so no escapes to handle."""
    return F.regexp_extract(F.col("value"), f'"{name}":\\s*"([^"]*)"', 1)


def summarise(lines: DataFrame) -> DataFrame:
    """One pass over the raw lines (a ``value`` column, as ``spark.read.text`` gives):
    ``event`` and ``node`` read from each line without parsing it, and the
    line itself only when its event is one the analysis uses; grouped with a count. The
    result is small (the used lines plus one row per node and event), so the job caches it
    and parses only those lines: millions of connection events cost a scan, not a parse.
    """
    event = _key("event")
    keep = event.isin(*RELEVANT_EVENTS)
    return (
        lines.select(
            event.alias("event"),
            _key("node").alias("node"),
            F.when(keep, F.col("value")).alias("line"),
        )
        .groupBy("event", "node", "line")
        .agg(F.count(F.lit(1)).alias("lines"))
    )


def event_counts(summary: DataFrame) -> DataFrame:
    """Lines by source, node and event (from :func:`summarise`). The source comes from the
    event's name (:data:`AGENT_EVENTS`, :data:`DRILL_EVENTS`, else broker: one regular
    expression less per line); lines with no event (not JSON, or no ``event`` key) count
    as source ``skipped``."""
    is_event = F.col("event") != ""
    return (
        summary.select(
            F.when(F.col("event").isin(*AGENT_EVENTS), F.lit("agent"))
            .when(F.col("event").isin(*DRILL_EVENTS), F.lit("drill"))
            .when(is_event, F.lit("broker"))
            .otherwise(F.lit("skipped"))
            .alias("source"),
            F.when(is_event, F.col("node")).alias("node"),
            F.when(is_event, F.col("event")).alias("event"),
            "lines",
        )
        .groupBy("source", "node", "event")
        .agg(F.sum("lines").alias("lines"))
    )


def relevant(summary: DataFrame) -> DataFrame:
    """The used lines of :func:`summarise`, parsed with :data:`RAW_SCHEMA` (a field of the
    wrong type is null)."""
    parsed = F.from_json(F.col("line"), RAW_SCHEMA, {"mode": "PERMISSIVE"})
    return summary.where(F.col("line").isNotNull()).select(parsed.alias("e")).select("e.*")


def node_clusters(events: DataFrame) -> DataFrame:
    """``node`` -> ``cluster`` from the agents' events (a broker logs no cluster name; its
    node name is its agent's ``--node``). A node name seen in several clusters takes the
    smallest name."""
    return (
        events.where((F.col("component") == "agent") & F.col("cluster").isNotNull())
        .groupBy("node")
        .agg(F.min("cluster").alias("agent_cluster"))
    )


def normalise(raw: DataFrame) -> DataFrame:
    """Events with ``us`` (microseconds), ``source`` and a ``cluster`` on every line.

    Lines without ``event`` or a parsable ``ts`` are dropped; broker events take the
    cluster of their node's agent; a line with no cluster at all gets ``""``.
    """
    events = (
        raw.withColumn("us", micros(F.col("ts")))
        .where(F.col("event").isNotNull() & F.col("us").isNotNull())
        .withColumn("source", _source(F.col("component")))
    )
    clusters = node_clusters(events)
    return (
        events.join(F.broadcast(clusters), "node", "left")
        .withColumn("cluster", F.coalesce("cluster", "agent_cluster", F.lit("")))
        .drop("agent_cluster")
    )
