"""Fail-over reconstruction: promotions, and each fail-over's phases.

:Status: Beta

Input: normalised events (:func:`analytics.parse.normalise`). Pure DataFrame-to-DataFrame
functions; the job may cut the lineage between steps (:data:`Checkpoint`).

1. :func:`promotions`: one row per (cluster, epoch): the broker's recovering and active, the
   agent's ``election_won`` and ``agent_promoted``.
2. :func:`failovers`: each promotion that had a primary before it: the old primary's
   failure, its resignation, the phases in milliseconds, the client outage, the scenario and
   the configuration (:class:`Labels` from the command line win over the logs'). Exact
   definitions in ``docs/analytics.md``.

The instants (``<instant>_us``), the phases and their arithmetic, the resignation events
and the broker's failure events are :mod:`common.failover_phases`' (one definition, shared
with the web console's fail-over timeline); the agent's failure events are this module's.

Clocks were checked against causality and corrected before (:mod:`analytics.clocks`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from analytics import faults
from analytics.parse import US_PER_MS, micros
from common.failover_phases import BROKER_FAILURE_EVENTS, PHASES, RESIGN_EVENTS, Phase

__all__ = [
    "FAILURE_EVENTS", "RESIGN_EVENTS", "Checkpoint", "Labels", "failovers", "identity",
    "phase_columns", "promotions",
]  # fmt: skip

#: Agent events that say the old primary's broker failed (with a null ``ha_state`` for
#: ``broker_state``) or was fenced by its own agent, and broker events that say the broker
#: stopped serving.
FAILURE_EVENTS = (
    "broker_process_exited", "broker_killed", "broker_state", "zookeeper_session_fence",
    "agent_fenced", *BROKER_FAILURE_EVENTS,
)  # fmt: skip


def _ms(end: str, start: str) -> Column:
    return (F.col(end) - F.col(start)) / US_PER_MS


def _phase_ms(phase: Phase) -> Column:
    """``<phase>_ms``: :class:`~common.failover_phases.Phase` over the ``<instant>_us``
    columns, as :func:`common.failover_phases.durations` computes it over one row."""
    end = F.col(f"{phase.end}_us")
    if phase.fallback is not None:
        end = F.coalesce(end, F.col(f"{phase.fallback}_us"))
    return ((end - F.col(f"{phase.start}_us")) / US_PER_MS).alias(f"{phase.name}_ms")


def phase_columns() -> list[Column]:
    """The ``<phase>_ms`` columns of :data:`common.failover_phases.PHASES`, in order."""
    return [_phase_ms(phase) for phase in PHASES]


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


def identity(df: DataFrame) -> DataFrame:
    """The :data:`Checkpoint` that cuts nothing (the default, for tests)."""
    return df


#: Cuts a DataFrame's lineage (the job passes ``DataFrame.localCheckpoint``): the
#: fail-over steps join small tables derived from each other, and without a cut the plan
#: repeats every earlier step in every later join.
Checkpoint = Callable[[DataFrame], DataFrame]


def failovers(
    events: DataFrame,
    promoted: DataFrame,
    labels: Labels | None = None,
    checkpoint: Checkpoint = identity,
) -> DataFrame:
    """One row per promotion, with the previous primary and the phases.

    ``kind`` is ``failover`` when an earlier promotion of the cluster is in the logs
    (``old_node`` is its node), else ``initial`` (first election). On ``old_node``, after
    its promotion and at or before this ``election_won`` (or recovering, without agent
    logs): ``failure_us`` is its first failure event (agent ``broker_process_exited``,
    ``broker_killed``, ``broker_state`` with a null ``ha_state``, ``zookeeper_session_fence``,
    ``agent_fenced``; broker ``broker_stopped``, ``ha_fenced``; ``failure_reason`` its
    ``reason``), else its last event of any kind (``failure_by`` ``last_seen``: a frozen
    node). ``resigned_us``: its agent's first ``agent_fenced`` or ``election_withdraw`` at
    or after the failure, if not after ``won_us`` (``recovering_us``, else
    ``promoted_us``, without the new primary's agent's election). ``detected_us``: the earlier of
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
        promoted.withColumns(
            {
                "prev_node": F.lag("node").over(by_cluster),
                "prev_us": F.lag(F.coalesce("recovering_us", "promoted_us")).over(by_cluster),
                "prev_epoch": F.lag("epoch").over(by_cluster),
                "bound_us": F.coalesce("won_us", "recovering_us", "promoted_us"),
                "w_end": F.coalesce("active_us", "recovering_us", "promoted_us"),
            }
        )
    )

    # failure: on the old node, in (prev_us, bound_us]
    failure_marks = events.where(
        F.col("event").isin(*FAILURE_EVENTS)
        & ((F.col("event") != "broker_state") | F.col("ha_state").isNull())
        & ((F.col("source") == "broker") | (F.col("event") != "broker_stopped"))
    ).select(
        "cluster", F.col("node").alias("prev_node"), F.col("us").alias("f_us"), "event", "reason"
    )
    failure_marks = faults.check_sent(events, failure_marks)
    in_window = (F.col("f_us") > F.col("prev_us")) & (F.col("f_us") <= F.col("bound_us"))
    window = p.select("cluster", "epoch", "prev_node", "prev_epoch", "prev_us", "bound_us")
    failure = (
        window.join(failure_marks, ["cluster", "prev_node"])
        .where(in_window)
        .groupBy(*keys)
        .agg(
            F.min("f_us").alias("fail_us"),
            F.min_by("event", "f_us").alias("fail_by"),
            F.min_by("reason", "f_us").alias("fail_reason"),
        )
    )
    seen = events.select("cluster", F.col("node").alias("prev_node"), F.col("us").alias("f_us"))
    last_seen = (
        window.join(seen, ["cluster", "prev_node"])
        .where(in_window)
        .groupBy(*keys)
        .agg(F.max("f_us").alias("seen_us"))
    )
    # the earliest evidence: the old primary's own failure event or the backups' link-down
    own_first = F.col("fail_us").isNotNull() & (
        F.col("link_us").isNull() | (F.col("fail_us") <= F.col("link_us"))
    )
    evidence_us = F.least("fail_us", "link_us")
    fw = checkpoint(
        p.join(failure, keys, "left")
        .join(last_seen, keys, "left")
        .join(faults.recorded(events, window), keys, "left")
        .join(faults.link_evidence(events, window), keys, "left")
        .withColumns(
            {
                "failure_us": F.when(
                    F.col("prev_node").isNotNull(),
                    F.coalesce("rec_us", evidence_us, "seen_us"),
                ),
                "failure_by": F.when(F.col("prev_node").isNull(), F.lit(None).cast("string"))
                .when(F.col("rec_us").isNotNull(), F.col("rec_by"))
                .when(own_first, F.col("fail_by"))
                .when(F.col("link_us").isNotNull(), F.lit("ha_link_down"))
                .when(F.col("seen_us").isNotNull(), F.lit("last_seen")),
                "failure_source": F.when(F.col("prev_node").isNull(), F.lit(None).cast("string"))
                .when(F.col("rec_us").isNotNull(), F.lit("drill"))
                .when(own_first, F.lit("old primary"))
                .when(F.col("link_us").isNotNull(), F.lit("backups"))
                .when(F.col("seen_us").isNotNull(), F.lit("old primary's last line")),
                # the old primary's own first failure event, whatever the failure was timed by
                "own_failure_by": F.col("fail_by"),
                "failure_reason": F.when(F.col("fail_us").isNotNull(), F.col("fail_reason")),
            }
        )
        .drop("fail_us", "fail_by", "fail_reason", "seen_us", "rec_us", "rec_by", "link_us")
    )

    resign_marks = events.where(
        (F.col("source") == "agent") & F.col("event").isin(*RESIGN_EVENTS)
    ).select("cluster", F.col("node").alias("prev_node"), F.col("us").alias("r_us"))
    resigned = (
        fw.select("cluster", "epoch", "prev_node", "failure_us", "bound_us")
        .join(resign_marks, ["cluster", "prev_node"])
        # at or before the new primary's election (its promotion, without its agent's
        # log): a later resignation is another fail-over's, never this one's detection
        .where((F.col("r_us") >= F.col("failure_us")) & (F.col("r_us") <= F.col("bound_us")))
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
        "failure_source",
        "own_failure_by",
        "failure_reason",
        "failure_us",
        "resigned_us",
        "detected_us",
        "won_us",
        "promoted_us",
        "recovering_us",
        "active_us",
        *phase_columns(),
        _ms("promoted_us", "won_us").alias("agent_promote_ms"),
        F.coalesce("gap_outage_ms", "reconnect_outage_ms").alias("client_outage_ms"),
    )


def _same_cluster(drill_cluster: Column) -> Column:
    """A drill event without a cluster matches every cluster."""
    return (drill_cluster == F.lit("")) | (drill_cluster == F.col("cluster"))


def _client_outage(events: DataFrame, fw: DataFrame) -> tuple[DataFrame, DataFrame]:
    """(cluster, epoch, gap_outage_ms) and (cluster, epoch, reconnect_outage_ms). Times in
    the drill's fields are corrected by its clock's offset (``clock_offset_us``, when the
    job found one: :mod:`analytics.clocks`)."""
    has_offset = "clock_offset_us" in events.columns
    offset = F.col("clock_offset_us") if has_offset else F.lit(0)
    gaps = events.where(F.col("event") == "confirm_gap").select(
        F.col("cluster").alias("d_cluster"),
        "gap_ms",
        F.coalesce(
            micros(F.col("last_confirm_ts")) + offset,
            F.col("us") - (F.col("gap_ms") * US_PER_MS).cast("long"),
        ).alias("g_start"),
        F.coalesce(micros(F.col("first_confirm_ts")) + offset, F.col("us")).alias("g_end"),
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
        .withColumn("d_scenario", _without_cycle(F.col("d_scenario")))
    )


def _without_cycle(scenario: Column) -> Column:
    """The nemesis drill labels its clients ``<nemesis>-<cycle>`` (``kill-3``): a scenario
    is the nemesis, never one cycle (a group a cycle is one sample)."""
    kinds = "|".join(k.replace("-", "\\-") for k in faults.KIND_EVENTS)
    return F.regexp_replace(scenario, f"^({kinds})-[0-9]+$", "$1")


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
