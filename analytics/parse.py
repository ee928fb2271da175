"""Raw log lines to normalised events: the analysis's first step.

:Status: Beta

Inputs: the JSON log lines of brokers, agents and drill clients (``docs/log-schema.md``,
schema 1) as :func:`analytics.job.read_lines` reads them (a ``value`` column). Pure
DataFrame-to-DataFrame functions: nothing here reads or writes files or collects rows.

1. :func:`summarise`: one pass over the raw lines; each line's ``event``, ``node`` and
   ``schema`` read without parsing it, a line cut short (``{`` without its closing ``}``:
   a file still being written, a disk full) flagged ``truncated``, the line kept only when
   its event is one the analysis uses (:data:`RELEVANT_EVENTS`), grouped by file with a
   count.
2. :func:`event_counts`: lines by source, node and event, from the summary;
   :func:`file_stats`: lines, events, truncated lines, schema versions and nodes by file.
3. :func:`relevant`: the kept lines parsed with :data:`RAW_SCHEMA`; :func:`malformed`: the
   kept lines that are not JSON or have no readable ``ts``, by file and node.
4. :func:`normalise`: drop lines that are not events, time as integer microseconds ``us``,
   ``source`` (broker, agent, drill), the cluster of broker events that log none (a
   broker without ``--ha-cluster-name``) from the agent of the same node
   (:func:`node_clusters`).

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
        T.StructField("expected", T.ArrayType(T.StringType())),
        T.StructField("dropped", T.ArrayType(T.StringType())),
        T.StructField("ha_backup_timeout", T.DoubleType()),
        # nemesis drill (component nemesis, in the drill's log)
        T.StructField("nemesis", T.StringType()),
        T.StructField("target", T.StringType()),
        T.StructField("run_id", T.StringType()),
        # the store's cluster id (ha_cluster_id_created, ha_cluster_id_adopted)
        T.StructField("cluster_id", T.StringType()),
        # ha_link_up: the primary's epoch (a backup links to a primary once it is promoted)
        T.StructField("primary_epoch", T.LongType()),
        T.StructField("primary", T.StringType()),
        # the agents' options (agent_started), the brokers' (ha_started)
        T.StructField("check_interval", T.DoubleType()),
        T.StructField("broker_timeout", T.DoubleType()),
        T.StructField("link_maintenance_interval", T.DoubleType()),
        # also the brokers' (ha_started)
        T.StructField("link_heartbeat_interval", T.DoubleType()),
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
    "ha_backup_removal_pending",
    "nemesis_cluster_started",
    "nemesis_cycle_started",
    "nemesis_cycle_checked",
    "nemesis_teardown_started",
    "broker_sigkilled",
    "node_sigkilled",
    "broker_paused",
    "node_paused",
    "node_partitioned",
    "zk_ensemble_paused",
    "zk_ensemble_resumed",
    "ha_cluster_id_created",
    "ha_cluster_id_adopted",
)
#: The log schema versions this job reads (``docs/log-schema.md``).
SUPPORTED_SCHEMAS = ("1",)

#: The agent's events (``docs/log-schema.md``), to name the source of a line unparsed.
AGENT_EVENTS = (
    "agent_started", "agent_stopping", "agent_stopped", "broker_state",
    "promotion_eligibility", "election_contending", "election_won", "election_withdraw",
    "election_ended", "epoch_taken", "agent_promoted", "promotion_refused",
    "promotion_failed", "promotion_slow", "agent_fenced", "zookeeper_session_fence",
    "broker_killed",
    "broker_process_started", "broker_process_exited", "broker_process_start_failed",
    "vip_added", "vip_removed", "vip_failed", "vip_announce_failed", "zookeeper_error",
    "zookeeper_unreachable", "member_record_invalid", "primary_record_invalid",
)  # fmt: skip
DRILL_EVENTS = (
    "drill_started", "client_connected", "client_disconnected", "client_reconnected",
    "client_gave_up", "confirm_gap", "drill_unreachable", "drill_finished",
    "nemesis_cluster_started", "nemesis_cycle_started", "nemesis_cycle_checked",
    "nemesis_teardown_started", "broker_sigkilled", "node_sigkilled", "broker_paused",
    "node_paused", "node_partitioned", "zk_ensemble_paused", "zk_ensemble_resumed",
    "new_primary_seen",
)  # fmt: skip

#: Microseconds in a millisecond: durations in ``*_ms`` are differences of ``us`` over this.
US_PER_MS = 1000.0


def micros(column: Column) -> Column:
    """ISO-8601 text (``2026-11-22T07:42:02.123456Z``) to microseconds since the epoch."""
    return F.unix_micros(F.try_to_timestamp(column))


def _source(component: Column) -> Column:
    return (
        F.when(component == "agent", F.lit("agent"))
        .when(component.isin("drill", "nemesis"), F.lit("drill"))
        .otherwise(F.lit("broker"))
    )


def _key(name: str) -> Column:
    """The string value of top-level key ``name`` in a JSON line, found by a regular
    expression without parsing the line (``"name": "value"``, any spaces); ``""`` when
    absent or not a string. Values are snake_case names, so no escapes to handle."""
    return F.regexp_extract(F.col("value"), f'"{name}":\\s*"([^"]*)"', 1)


def _schema_version() -> Column:
    """The ``schema`` value of a JSON line, a string (``"1"``) or a bare number (``2``);
    ``""`` when absent."""
    return F.regexp_extract(F.col("value"), '"schema":\\s*"?([^",}\\s]*)', 1)


def summarise(lines: DataFrame) -> DataFrame:
    """One pass over the raw lines (a ``value`` column, as ``spark.read.text`` gives, and
    optionally ``file``): ``event``, ``node`` and ``schema`` read from each line without
    parsing it, ``truncated`` (a line that opens a JSON object, ``{"``, and does not close it), and
    the line itself only when its event is one the analysis uses (and it is whole); grouped
    with a count. The result is small (the used lines plus one row per file, node and
    event), so the job caches it and parses only those lines: millions of connection events
    cost a scan, not a parse.
    """
    event = _key("event")
    value = F.col("value")
    truncated = value.startswith('{"') & ~F.rtrim(value, F.lit(" \t\r")).endswith("}")
    keep = event.isin(*RELEVANT_EVENTS) & ~truncated
    file = F.col("file") if "file" in lines.columns else F.lit("")
    return (
        lines.select(
            file.alias("file"),
            event.alias("event"),
            _key("node").alias("node"),
            _schema_version().alias("schema"),
            truncated.alias("truncated"),
            F.when(keep, value).alias("line"),
        )
        .groupBy("file", "event", "node", "schema", "truncated", "line")
        .agg(F.count(F.lit(1)).alias("lines"))
    )


def event_counts(summary: DataFrame) -> DataFrame:
    """Lines by source, node and event (from :func:`summarise`). The source comes from the
    event's name (:data:`AGENT_EVENTS`, :data:`DRILL_EVENTS`, else broker: one regular
    expression less per line); lines with no event (not JSON, or no ``event`` key) count
    as source ``skipped``."""
    is_event = (F.col("event") != "") & ~F.col("truncated")
    return (
        summary.select(
            F.when(F.col("event").isin(*AGENT_EVENTS), F.lit("agent"))
            .when(F.col("event").isin(*DRILL_EVENTS), F.lit("drill"))
            .when(is_event, F.lit("broker"))
            .when(F.col("truncated"), F.lit("truncated"))
            .otherwise(F.lit("skipped"))
            .alias("source"),
            F.when(is_event, F.col("node")).alias("node"),
            F.when(is_event, F.col("event")).alias("event"),
            "lines",
        )
        .groupBy("source", "node", "event")
        .agg(F.sum("lines").alias("lines"))
    )


def file_stats(summary: DataFrame) -> DataFrame:
    """By file: ``lines``, ``events`` (whole JSON lines with an ``event``), ``truncated``,
    ``versions`` (the ``schema`` values of its events, sorted; ``""``: none given) and
    ``nodes`` (the node names of its events, sorted)."""
    is_event = (F.col("event") != "") & ~F.col("truncated")
    return summary.groupBy("file").agg(
        F.sum("lines").alias("lines"),
        F.sum(F.when(is_event, F.col("lines")).otherwise(0)).alias("events"),
        F.sum(F.when(F.col("truncated"), F.col("lines")).otherwise(0)).alias("truncated"),
        F.array_sort(F.collect_set(F.when(is_event, F.col("schema")))).alias("versions"),
        F.array_sort(F.collect_set(F.when(F.col("node") != "", F.col("node")))).alias("nodes"),
    )


def _parsed(summary: DataFrame) -> DataFrame:
    parsed = F.from_json(F.col("line"), RAW_SCHEMA, {"mode": "PERMISSIVE"})
    return summary.where(F.col("line").isNotNull()).select(
        parsed.alias("e"), "file", F.col("node").alias("raw_node"), "lines"
    )


def relevant(summary: DataFrame) -> DataFrame:
    """The used lines of :func:`summarise`, parsed with :data:`RAW_SCHEMA` (a field of the
    wrong type is null), with the ``file`` they came from."""
    return _parsed(summary).select("e.*", "file")


def malformed(summary: DataFrame) -> DataFrame:
    """The used lines that are not JSON objects, or have no ``event`` or no readable
    ``ts`` (ISO-8601 text, schema 1), by file and node (``node`` as read from the raw line):
    ``lines``."""
    parsed = _parsed(summary)
    bad = F.col("e").isNull() | F.col("e.event").isNull() | micros(F.col("e.ts")).isNull()
    return (
        parsed.where(bad)
        .groupBy("file", F.col("raw_node").alias("node"))
        .agg(F.sum("lines").alias("lines"))
    )


def _directory(file: Column) -> Column:
    return F.regexp_replace(file, r"/[^/]*$", "")


def node_clusters(events: DataFrame) -> DataFrame:
    """(``directory``, ``node``) -> ``cluster`` from the agents' events (for a broker that
    logs no cluster name: its node name is its agent's ``--node``): the cluster of the
    agent of that node name whose log is in the same directory, else of the only cluster
    with an agent of that name. A node name of several clusters' agents, none beside the
    broker's log, gives none (``""``): brokers of two clusters with the same node names
    are never read as one cluster (a false split-brain)."""
    agents = events.where((F.col("component") == "agent") & F.col("cluster").isNotNull())
    by_directory = agents.groupBy(_directory(F.col("file")).alias("dir"), "node").agg(
        F.min("cluster").alias("dir_cluster"),
        F.countDistinct("cluster").alias("dir_clusters"),
    )
    by_name = agents.groupBy("node").agg(
        F.min("cluster").alias("name_cluster"), F.countDistinct("cluster").alias("clusters")
    )
    return by_directory.join(by_name, "node", "full").select(
        "dir",
        "node",
        F.when(F.col("dir_clusters") == 1, F.col("dir_cluster")).alias("dir_cluster"),
        F.when(F.col("clusters") == 1, F.col("name_cluster")).alias("name_cluster"),
    )


def normalise(raw: DataFrame) -> DataFrame:
    """Events with ``us`` (microseconds), ``source`` and a ``cluster`` on every line.

    Lines without ``event`` or a parsable ``ts`` are dropped; a line without a cluster (a
    broker's without ``--ha-cluster-name``) takes the cluster of its node's agent; a line
    with no cluster at all gets ``""``.
    """
    events = (
        raw.withColumn("us", micros(F.col("ts")))
        .where(F.col("event").isNotNull() & F.col("us").isNotNull())
        .withColumn("source", _source(F.col("component")))
    )
    clusters = node_clusters(events)
    in_dir = clusters.select("dir", "node", "dir_cluster").where(F.col("dir").isNotNull())
    by_name = clusters.groupBy("node").agg(F.max("name_cluster").alias("name_cluster"))
    return (
        events.withColumn("dir", _directory(F.coalesce(F.col("file"), F.lit(""))))
        .join(F.broadcast(in_dir), ["dir", "node"], "left")
        .join(F.broadcast(by_name), "node", "left")
        .withColumn("cluster", F.coalesce("cluster", "dir_cluster", "name_cluster", F.lit("")))
        .drop("dir", "dir_cluster", "name_cluster")
    )
