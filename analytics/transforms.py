"""Fail-over analytics as pure DataFrame-to-DataFrame transforms.

:Status: Beta

Inputs are the JSON log lines of brokers, agents and drill clients (``docs/log-schema.md``,
schema 1) as read by :func:`analytics.job.read_lines` (a ``value`` column); nothing here
reads or writes files, starts a session or collects rows: the job does that (the "Ready"
caller). Every function takes and returns DataFrames, so each one is tested on a few
hand-made rows against golden rows (``tests/analytics/test_transforms.py``).

The pipeline (:func:`analyse` composes it):

1. :func:`normalise`: drop lines that are not events, time as integer microseconds ``us``,
   ``source`` (broker, agent, drill), the cluster of broker events (the broker logs none)
   from the agent of the same node (:func:`node_clusters`).
2. :func:`state_intervals`: each broker's HA state from one ``ha_state_changed`` to the
   next, ended by its stop, fence or death (its agent's ``broker_process_exited`` or
   ``broker_killed``) or by the end of its log; :func:`primary_stints` merges recovering and
   active into one stint as primary.
3. :func:`promotions`: one row per (cluster, epoch): the broker's recovering and active, the
   agent's ``election_won`` and ``agent_promoted``.
4. :func:`failovers`: each promotion that had a primary before it: the old primary's
   failure, its resignation, the phases in milliseconds, the client outage, the scenario and
   the configuration. Exact definitions in ``docs/analytics.md``.
5. :func:`phase_durations` (long form), :func:`percentiles` (p50, p90, p99, max by
   scenario, configuration and phase) and :func:`anomalies` (two primaries at once, a
   promotion of a broker that was not ready while a ready one existed, confirmed messages
   lost).

Times are microseconds since the Unix epoch (``us``, exact integers); durations are
milliseconds (``*_ms``, doubles). Clocks of different machines are trusted as they are.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, Window
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

PRIMARY_STATES = ("recovering", "active")
#: Broker events that end a broker's current state: it stopped, was fenced or failed.
BROKER_END_EVENTS = ("broker_stopped", "ha_fenced", "ha_illegal_transition")
#: Agent events that say its broker process is gone.
AGENT_DEATH_EVENTS = ("broker_process_exited", "broker_killed")
#: Agent events that say the old primary's broker failed (with a null ``ha_state`` for
#: ``broker_state``), and broker events that say the broker stopped serving.
FAILURE_EVENTS = ("broker_process_exited", "broker_killed", "broker_state", *BROKER_END_EVENTS)
#: Agent events by which the old primary's agent resigns.
RESIGN_EVENTS = ("agent_fenced", "election_withdraw")

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

PHASES = ("detection", "election", "promotion", "recovering", "failover", "client_outage")

_MS = 1000.0


def _micros(column: Column) -> Column:
    """ISO-8601 text (``2026-11-22T07:42:02.123456Z``) to microseconds since the epoch."""
    return F.unix_micros(F.try_to_timestamp(column))


def _ms(end: str, start: str) -> Column:
    return (F.col(end) - F.col(start)) / _MS


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
        raw.withColumn("us", _micros(F.col("ts")))
        .where(F.col("event").isNotNull() & F.col("us").isNotNull())
        .withColumn("source", _source(F.col("component")))
    )
    clusters = node_clusters(events)
    return (
        events.join(F.broadcast(clusters), "node", "left")
        .withColumn("cluster", F.coalesce("cluster", "agent_cluster", F.lit("")))
        .drop("agent_cluster")
    )


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


def promotions(events: DataFrame) -> DataFrame:
    """One row per (cluster, epoch) a broker was promoted with.

    Broker side: ``ha_state_changed`` to recovering (``recovering_us``, ``old_state``) and
    the first to active after it with that epoch (``active_us``). Agent side:
    ``agent_promoted`` with ``new_epoch`` (``promoted_us``) and that agent's last
    ``election_won`` before it (``won_us``). Joined on cluster, node and epoch; either side
    may be missing (broker logs alone, or a broker log lost).
    """
    changes = events.where((F.col("source") == "broker") & (F.col("event") == "ha_state_changed"))
    recovering = (
        changes.where(F.col("new") == "recovering")
        .groupBy("cluster", "node", "epoch")
        .agg(
            F.min("us").alias("recovering_us"),
            F.min_by("old", "us").alias("old_state"),
        )
    )
    active = changes.where(F.col("new") == "active").select(
        "cluster", "node", "epoch", F.col("us").alias("a_us")
    )
    broker_side = (
        recovering.join(active, ["cluster", "node", "epoch"], "left")
        .where(F.col("a_us").isNull() | (F.col("a_us") >= F.col("recovering_us")))
        .groupBy("cluster", "node", "epoch", "recovering_us", "old_state")
        .agg(F.min("a_us").alias("active_us"))
    )
    promoted = (
        events.where((F.col("source") == "agent") & (F.col("event") == "agent_promoted"))
        .groupBy("cluster", "node", F.col("new_epoch").alias("epoch"))
        .agg(F.min("us").alias("promoted_us"))
    )
    won = events.where((F.col("source") == "agent") & (F.col("event") == "election_won")).select(
        "cluster", "node", F.col("us").alias("w_us")
    )
    agent_side = (
        promoted.join(won, ["cluster", "node"], "left")
        .where(F.col("w_us").isNull() | (F.col("w_us") <= F.col("promoted_us")))
        .groupBy("cluster", "node", "epoch", "promoted_us")
        .agg(F.max("w_us").alias("won_us"))
    )
    return broker_side.join(agent_side, ["cluster", "node", "epoch"], "full").select(
        "cluster",
        "node",
        "epoch",
        "old_state",
        "won_us",
        "promoted_us",
        "recovering_us",
        "active_us",
    )


@dataclass(frozen=True)
class Labels:
    """Scenario and configuration labels given on the command line: they win over the
    logs' (``drill_started``'s ``scenario``; the agents' ``session_timeout``)."""

    scenario: str | None = None
    config: str | None = None


def _identity(df: DataFrame) -> DataFrame:
    return df


#: Cuts a DataFrame's lineage (the job passes ``DataFrame.localCheckpoint``): the
#: fail-over steps join small tables derived from each other, and without a cut the plan
#: repeats every earlier step in every later join.
Checkpoint = Callable[[DataFrame], DataFrame]


def failovers(
    events: DataFrame,
    promoted: DataFrame,
    labels: Labels | None = None,
    checkpoint: Checkpoint = _identity,
) -> DataFrame:
    """One row per promotion, with the previous primary and the phases.

    ``kind`` is ``failover`` when an earlier promotion of the cluster is in the logs
    (``old_node`` is its node), else ``initial`` (first election). On ``old_node``, after
    its promotion and at or before this ``election_won`` (or recovering, without agent
    logs): ``failure_us`` is its first failure event (agent ``broker_process_exited``,
    ``broker_killed``, ``broker_state`` with a null ``ha_state``; broker ``broker_stopped``,
    ``ha_fenced``), else its last event of any kind (``failure_by`` ``last_seen``: a frozen
    node). ``resigned_us``: its agent's first ``agent_fenced`` or ``election_withdraw`` at
    or after the failure, if not after ``won_us``. ``detected_us``: the earlier of
    ``resigned_us`` and ``won_us``. Phases (ms): detection = detected - failure, election =
    won - detected, promotion = (recovering, else agent_promoted) - won, recovering = active -
    recovering, failover = active - failure; ``agent_promote_ms`` = agent_promoted - won.
    ``client_outage_ms``: the longest drill ``confirm_gap`` overlapping [failure, active]
    (``last_confirm_ts`` to ``first_confirm_ts``), else the longest ``client_reconnected``
    ``outage_ms`` with this epoch; null without drill events.
    """
    labels = labels or Labels()
    keys = ["cluster", "epoch"]
    by_cluster = Window.partitionBy("cluster").orderBy("epoch")
    p = checkpoint(
        promoted.withColumn("prev_node", F.lag("node").over(by_cluster))
        .withColumn("prev_us", F.lag(F.coalesce("recovering_us", "promoted_us")).over(by_cluster))
        .withColumn("prev_epoch", F.lag("epoch").over(by_cluster))
        .withColumn("bound_us", F.coalesce("won_us", "recovering_us", "promoted_us"))
        .withColumn("w_end", F.coalesce("active_us", "recovering_us", "promoted_us"))
    )

    # failure: on the old node, in (prev_us, bound_us]
    failure_marks = events.where(
        F.col("event").isin(*FAILURE_EVENTS)
        & ((F.col("event") != "broker_state") | F.col("ha_state").isNull())
        & ((F.col("source") == "broker") | (F.col("event") != "broker_stopped"))
    ).select("cluster", F.col("node").alias("prev_node"), F.col("us").alias("f_us"), "event")
    in_window = (F.col("f_us") > F.col("prev_us")) & (F.col("f_us") <= F.col("bound_us"))
    window = p.select("cluster", "epoch", "prev_node", "prev_us", "bound_us")
    failure = (
        window.join(failure_marks, ["cluster", "prev_node"])
        .where(in_window)
        .groupBy(*keys)
        .agg(F.min("f_us").alias("fail_us"), F.min_by("event", "f_us").alias("fail_by"))
    )
    seen = events.select("cluster", F.col("node").alias("prev_node"), F.col("us").alias("f_us"))
    last_seen = (
        window.join(seen, ["cluster", "prev_node"])
        .where(in_window)
        .groupBy(*keys)
        .agg(F.max("f_us").alias("seen_us"))
    )
    fw = checkpoint(
        p.join(failure, keys, "left")
        .join(last_seen, keys, "left")
        .withColumn(
            "failure_us",
            F.when(F.col("prev_node").isNotNull(), F.coalesce("fail_us", "seen_us")),
        )
        .withColumn(
            "failure_by",
            F.when(F.col("prev_node").isNull(), F.lit(None).cast("string"))
            .when(F.col("fail_us").isNotNull(), F.col("fail_by"))
            .when(F.col("seen_us").isNotNull(), F.lit("last_seen")),
        )
        .drop("fail_us", "fail_by", "seen_us")
    )

    resign_marks = events.where(
        (F.col("source") == "agent") & F.col("event").isin(*RESIGN_EVENTS)
    ).select("cluster", F.col("node").alias("prev_node"), F.col("us").alias("r_us"))
    resigned = (
        fw.select("cluster", "epoch", "prev_node", "failure_us", "won_us")
        .join(resign_marks, ["cluster", "prev_node"])
        .where(
            (F.col("r_us") >= F.col("failure_us"))
            & (F.col("won_us").isNull() | (F.col("r_us") <= F.col("won_us")))
        )
        .groupBy(*keys)
        .agg(F.min("r_us").alias("resigned_us"))
    )
    outage_gap, outage_reconnect = _client_outage(events, fw)
    fo = (
        fw.join(resigned, keys, "left")
        .join(outage_gap, keys, "left")
        .join(outage_reconnect, keys, "left")
        .join(_scenarios(events, fw), keys, "left")
        .join(_session_timeouts(events), "cluster", "left")
        .withColumn(
            "detected_us",
            F.when(
                F.col("failure_us").isNotNull(),
                F.least(F.coalesce("resigned_us", "won_us"), F.coalesce("won_us", "resigned_us")),
            ),
        )
    )
    return fo.select(
        "cluster",
        "epoch",
        F.when(F.col("prev_node").isNotNull(), F.lit("failover"))
        .otherwise(F.lit("initial"))
        .alias("kind"),
        (
            F.lit(labels.scenario)
            if labels.scenario
            else F.coalesce("d_scenario", F.lit("unlabelled"))
        ).alias("scenario"),
        (F.lit(labels.config) if labels.config else _config_label(F.col("timeout"))).alias(
            "config"
        ),
        "node",
        F.col("prev_node").alias("old_node"),
        F.col("prev_epoch").alias("old_epoch"),
        "old_state",
        "failure_by",
        "failure_us",
        "resigned_us",
        "detected_us",
        "won_us",
        "promoted_us",
        "recovering_us",
        "active_us",
        _ms("detected_us", "failure_us").alias("detection_ms"),
        _ms("won_us", "detected_us").alias("election_ms"),
        ((F.coalesce("recovering_us", "promoted_us") - F.col("won_us")) / _MS).alias(
            "promotion_ms"
        ),
        _ms("active_us", "recovering_us").alias("recovering_ms"),
        _ms("active_us", "failure_us").alias("failover_ms"),
        _ms("promoted_us", "won_us").alias("agent_promote_ms"),
        F.coalesce("gap_outage_ms", "reconnect_outage_ms").alias("client_outage_ms"),
    )


def _same_cluster(drill_cluster: Column) -> Column:
    """A drill event without a cluster matches every cluster."""
    return (drill_cluster == F.lit("")) | (drill_cluster == F.col("cluster"))


def _client_outage(events: DataFrame, fw: DataFrame) -> tuple[DataFrame, DataFrame]:
    """(cluster, epoch, gap_outage_ms) and (cluster, epoch, reconnect_outage_ms)."""
    gaps = events.where(F.col("event") == "confirm_gap").select(
        F.col("cluster").alias("d_cluster"),
        "gap_ms",
        F.coalesce(
            _micros(F.col("last_confirm_ts")), F.col("us") - (F.col("gap_ms") * _MS).cast("long")
        ).alias("g_start"),
        F.coalesce(_micros(F.col("first_confirm_ts")), F.col("us")).alias("g_end"),
    )
    by_gap = (
        fw.where(F.col("failure_us").isNotNull())
        .select("cluster", "epoch", "failure_us", "w_end")
        .join(
            gaps,
            _same_cluster(F.col("d_cluster"))
            & (F.col("g_start") <= F.col("w_end"))
            & (F.col("g_end") >= F.col("failure_us")),
        )
        .groupBy("cluster", "epoch")
        .agg(F.max("gap_ms").alias("gap_outage_ms"))
    )
    reconnects = events.where(F.col("event") == "client_reconnected").select(
        F.col("cluster").alias("d_cluster"), F.col("epoch").alias("d_epoch"), "outage_ms"
    )
    by_reconnect = (
        fw.where(F.col("prev_node").isNotNull())
        .select("cluster", "epoch")
        .join(reconnects, (F.col("d_epoch") == F.col("epoch")) & _same_cluster(F.col("d_cluster")))
        .groupBy("cluster", "epoch")
        .agg(F.max("outage_ms").alias("reconnect_outage_ms"))
    )
    return by_gap, by_reconnect


def _scenarios(events: DataFrame, fw: DataFrame) -> DataFrame:
    """(cluster, epoch, d_scenario): the scenario of the last ``drill_started`` before the
    fail-over, of its cluster or of none."""
    starts = events.where(F.col("event") == "drill_started").select(
        F.col("cluster").alias("d_cluster"), F.col("us").alias("d_us"), "scenario"
    )
    at = F.coalesce("failure_us", "bound_us")
    return (
        fw.select("cluster", "epoch", at.alias("at_us"))
        .join(starts, _same_cluster(F.col("d_cluster")) & (F.col("d_us") <= F.col("at_us")))
        .groupBy("cluster", "epoch")
        .agg(F.max_by("scenario", "d_us").alias("d_scenario"))
    )


def _session_timeouts(events: DataFrame) -> DataFrame:
    """(cluster, timeout): the largest ``session_timeout`` of the cluster's agents."""
    return (
        events.where((F.col("event") == "agent_started") & F.col("session_timeout").isNotNull())
        .groupBy("cluster")
        .agg(F.max("session_timeout").alias("timeout"))
    )


def _config_label(timeout: Column) -> Column:
    """``session-timeout 2s`` (``2.5s``...), ``unlabelled`` without agent logs."""
    number = F.regexp_replace(F.format_number(timeout, 3), r"\.?0+$", "")
    return F.when(
        timeout.isNotNull(), F.concat(F.lit("session-timeout "), number, F.lit("s"))
    ).otherwise(F.lit("unlabelled"))


def phase_durations(fo: DataFrame) -> DataFrame:
    """Fail-overs (kind ``failover``) in long form: cluster, epoch, scenario, config,
    phase, ms; null durations left out."""
    stack = ", ".join(f"'{phase}', {phase}_ms" for phase in PHASES)
    return (
        fo.where(F.col("kind") == "failover")
        .select(
            "cluster",
            "epoch",
            "scenario",
            "config",
            F.expr(f"stack({len(PHASES)}, {stack}) as (phase, ms)"),
        )
        .where(F.col("ms").isNotNull())
    )


def percentiles(phases: DataFrame) -> DataFrame:
    """By scenario, config and phase: failovers, p50, p90, p99 (exact, linear
    interpolation between closest ranks), max and mean, in ms."""
    order = F.create_map(*[x for i, ph in enumerate(PHASES) for x in (F.lit(ph), F.lit(i))])
    q = F.percentile(F.col("ms"), [0.5, 0.9, 0.99])
    return (
        phases.groupBy("scenario", "config", "phase")
        .agg(
            F.count(F.lit(1)).alias("failovers"),
            q.alias("q"),
            F.max("ms").alias("max_ms"),
            F.avg("ms").alias("mean_ms"),
        )
        .select(
            "scenario",
            "config",
            "phase",
            "failovers",
            F.col("q")[0].alias("p50_ms"),
            F.col("q")[1].alias("p90_ms"),
            F.col("q")[2].alias("p99_ms"),
            "max_ms",
            "mean_ms",
        )
        .orderBy("scenario", "config", order[F.col("phase")])
    )


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
        .withColumn("ms", (F.col("o_end") - F.col("at_us")) / _MS)
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


@dataclass(frozen=True)
class Tables:
    """The report's tables (lazy DataFrames)."""

    failovers: DataFrame
    phases: DataFrame
    percentiles: DataFrame
    anomalies: DataFrame
    primary_stints: DataFrame


def analyse(
    events: DataFrame, labels: Labels | None = None, checkpoint: Checkpoint = _identity
) -> Tables:
    """The whole pipeline on normalised events (see the module's docstring);
    ``checkpoint`` cuts the lineage between steps (see :data:`Checkpoint`)."""
    intervals = checkpoint(state_intervals(events))
    promoted = checkpoint(promotions(events))
    fo = checkpoint(failovers(events, promoted, labels, checkpoint))
    phases = phase_durations(fo)
    stints = checkpoint(primary_stints(intervals))
    return Tables(
        failovers=fo,
        phases=phases,
        percentiles=percentiles(phases),
        anomalies=anomalies(events, intervals, promoted, stints),
        primary_stints=stints,
    )
