"""What an operator tunes by: each fail-over's kind of failure, whether it was spurious,
its evidence, the configured timeouts and ``ha-backup-timeout``; a table per configuration.

:Status: Beta

Input: :func:`analytics.failover.failovers` and the normalised events. Pure
DataFrame-to-DataFrame functions. Exact definitions in ``docs/analytics.md``:

- :func:`annotate` adds to each fail-over ``failure_kind`` (the nemesis drill's label, else
  one read from the failure event), ``spurious`` (the old primary's broker showed no failure
  of its own before it was fenced), ``evidence`` (``complete``, or what is missing),
  ``session_timeout_s``, ``link_heartbeat_s`` and ``ha_backup_timeout_s`` (as configured,
  when the logs say), ``detection_per_timeout``, ``detection_per_heartbeat``,
  ``backups_dropped`` and ``backup_timeout_fired``.
- :func:`tuning` gives one row per configuration: fail-overs, spurious ones, incomplete
  ones, the configured timeouts, the median and p90 of each phase and of the client
  outage, detection's median against the session timeout and the link heartbeat, and the
  ``ha-backup-timeout`` hits.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from analytics import faults
from analytics.parse import US_PER_MS
from analytics.percentiles import PHASES
from common import failover_phases

#: A broker that did not answer its agent: a failure of its own, not a spurious fence.
NO_ANSWER = "does not answer"
#: The broker's reason for giving a backup up when ``ha-backup-timeout`` runs out.
BACKUP_TIMEOUT_REASON = "ha-backup-timeout"
#: Evidence codes, in the order ``evidence`` lists them.
EVIDENCE = (
    "no_failure",  # no event of the old primary's before the promotion
    "failure_inferred",  # the old primary's last event stands for its failure (silent node)
    "no_agent_logs",  # no election_won / agent_promoted: detection and election unknown
    "no_recovering",  # no broker line of the promotion
    "not_active",  # the new primary never logged active
    "bad_lines",  # a file holding the old or new primary's events has unusable lines
    "clock_unresolved",  # the old or new primary's clock could not be placed (analytics.clocks)
    "agent_log_missing",  # the old or new primary's agent's log is not among the inputs
    "inconsistent",  # a phase negative or longer than the fail-over: two fail-overs mixed
)
#: Evidence that withholds a fail-over from the percentiles (``withheld``): its failure is
#: missing or a guess, or its instants cannot be trusted together. The others only lack a
#: phase, which then adds nothing to the percentiles.
WITHHOLD = ("no_failure", "failure_inferred", "bad_lines", "clock_unresolved", "inconsistent")
#: A phase shorter than this (ms), or longer than the fail-over by more than its opposite, is
#: a contradiction, not noise (analytics.clocks' tolerance).
NEGATIVE_MS = -100.0


def _spurious(failure_by: Column, reason: Column) -> Column:
    """The old primary's first failure event is a fence, not a failure of its broker."""
    no_answer = F.coalesce(reason, F.lit("")).contains(NO_ANSWER)
    return (
        failure_by.isin("zookeeper_session_fence", "ha_fenced")
        | ((failure_by == "agent_fenced") & ~no_answer)
        | (
            (failure_by == "broker_killed")
            & F.coalesce(reason, F.lit("")).startswith("fenced:")
            & ~no_answer
        )
    )


def _kind_from_logs(failure_by: Column, reason: Column) -> Column:
    """A kind of failure read from the old primary's failure event."""
    text = F.coalesce(reason, F.lit(""))
    return (
        F.when(failure_by == "broker_process_exited", F.lit("process_exit"))
        .when(failure_by == "broker_state", F.lit("unresponsive"))
        .when((failure_by == "broker_killed") & text.startswith("watchdog"), F.lit("unresponsive"))
        .when(failure_by == "zookeeper_session_fence", F.lit("zookeeper_fence"))
        .when(text.contains("ZooKeeper"), F.lit("zookeeper_fence"))
        .when(failure_by.isin("agent_fenced", "broker_killed", "ha_fenced"), F.lit("fenced"))
        .when(failure_by == "broker_stopped", F.lit("operator-stop"))
        .when(failure_by == "last_seen", F.lit("silent_node"))
        .otherwise(F.coalesce(failure_by, F.lit("unknown")))
    )


def _same_cluster(other: Column) -> Column:
    return (other == F.lit("")) | (other == F.col("cluster"))


#: The nemesis drill's marks of a cycle's start and end and of its final stops.
CYCLE_MARKS = ("nemesis_cycle_started", "nemesis_cycle_checked", "nemesis_teardown_started")


def _nemeses(events: DataFrame, fo: DataFrame) -> DataFrame:
    """(cluster, epoch, nemesis, teardown): the nemesis of the last ``nemesis_cycle_started``
    at or before the failure (or the election, without one), of the cluster or of none;
    ``teardown`` when the last of the drill's marks before it ends a cycle
    (``nemesis_cycle_checked``) or starts the drill's final stops
    (``nemesis_teardown_started``): no fault was on, the drill was stopping its cluster."""
    marks = events.where(F.col("event").isin(*CYCLE_MARKS)).select(
        F.col("cluster").alias("n_cluster"),
        F.col("us").alias("n_us"),
        F.when(F.col("event") == "nemesis_cycle_started", F.col("nemesis")).alias("n_nemesis"),
        F.col("event").alias("n_event"),
        # at one time a cycle's check comes after its start
        F.when(F.col("event") == "nemesis_cycle_started", 0).otherwise(1).alias("n_order"),
    )
    # a guessed failure (the old primary's last line) may lie in an earlier cycle: the
    # cycle is then the election's
    guessed = F.col("failure_by") == "last_seen"
    at = F.when(guessed, F.coalesce("won_us", "recovering_us", "failure_us")).otherwise(
        F.coalesce("failure_us", "won_us", "recovering_us")
    )
    last = F.max_by(F.struct("n_event", "n_nemesis"), F.struct("n_us", "n_order"))
    return (
        fo.where(F.col("kind") == "failover")
        .select("cluster", "epoch", at.alias("at_us"))
        .join(marks, _same_cluster(F.col("n_cluster")) & (F.col("n_us") <= F.col("at_us")))
        .groupBy("cluster", "epoch")
        .agg(
            last.alias("last"),
            F.max_by("n_nemesis", F.when(F.col("n_nemesis").isNotNull(), F.col("n_us"))).alias(
                "nemesis"
            ),
        )
        .select(
            "cluster",
            "epoch",
            "nemesis",
            (F.col("last.n_event") != "nemesis_cycle_started").alias("teardown"),
        )
    )


def _settings(events: DataFrame) -> DataFrame:
    """(cluster, session_timeout_s, link_heartbeat_s, ha_backup_timeout_s): the agents'
    largest session timeout (``agent_started``), else the nemesis drill's; the brokers'
    largest link heartbeat and ``ha-backup-timeout`` (``ha_started``), else the nemesis
    drill's heartbeat (``nemesis_cluster_started``; brokers before issue 17 logged none)."""
    timeouts = (
        events.where((F.col("event") == "agent_started") & F.col("session_timeout").isNotNull())
        .groupBy("cluster")
        .agg(
            F.max("session_timeout").alias("session_timeout_s"),
            F.max("broker_timeout").alias("broker_timeout_s"),
            F.max("check_interval").alias("check_interval_s"),
        )
    )
    brokers = (
        events.where((F.col("source") == "broker") & (F.col("event") == "ha_started"))
        .groupBy("cluster")
        .agg(
            F.max("link_heartbeat_interval").alias("b_heartbeat"),
            F.max("ha_backup_timeout").alias("ha_backup_timeout_s"),
        )
    )
    nemesis = (
        events.where(
            (F.col("event") == "nemesis_cluster_started")
            & F.col("link_heartbeat_interval").isNotNull()
        )
        .groupBy("cluster")
        .agg(
            F.max("link_heartbeat_interval").alias("n_heartbeat"),
            F.max("session_timeout").alias("n_timeout"),
        )
    )
    return (
        timeouts.join(brokers, "cluster", "full")
        .join(nemesis, "cluster", "full")
        .select(
            "cluster",
            F.coalesce("session_timeout_s", "n_timeout").alias("session_timeout_s"),
            "broker_timeout_s",
            "check_interval_s",
            F.coalesce("b_heartbeat", "n_heartbeat").alias("link_heartbeat_s"),
            "ha_backup_timeout_s",
        )
    )


def _backup_timeouts(events: DataFrame, fo: DataFrame) -> DataFrame:
    """(cluster, epoch, backups_dropped, backup_timeout_hits): on the new primary between
    recovering and active, the backups its ``ha_state_changed`` to active lists as
    ``dropped``, and its ``ha_backup_removal_pending`` naming ``ha-backup-timeout``."""
    window = fo.where(F.col("recovering_us").isNotNull()).select(
        "cluster",
        "epoch",
        "node",
        "recovering_us",
        F.coalesce("active_us", F.lit(2**62)).alias("end_us"),
    )
    marks = events.where(
        (
            (F.col("event") == "ha_state_changed")
            & (F.col("new") == "active")
            & F.col("dropped").isNotNull()
        )
        | (
            (F.col("event") == "ha_backup_removal_pending")
            & F.coalesce(F.col("reason"), F.lit("")).contains(BACKUP_TIMEOUT_REASON)
        )
    ).select(
        "cluster",
        "node",
        F.col("us").alias("m_us"),
        F.when(F.col("event") == "ha_state_changed", F.size("dropped"))
        .otherwise(0)
        .alias("dropped_n"),
        F.when(F.col("event") == "ha_backup_removal_pending", 1).otherwise(0).alias("hit"),
    )
    return (
        window.join(marks, ["cluster", "node"])
        .where((F.col("m_us") >= F.col("recovering_us")) & (F.col("m_us") <= F.col("end_us")))
        .groupBy("cluster", "epoch")
        .agg(
            F.sum("dropped_n").alias("backups_dropped"),
            F.sum("hit").alias("backup_timeout_hits"),
        )
    )


def _involves(
    nodes: Sequence[tuple[str, str]], roles: Sequence[str] = ("node", "old_node")
) -> Column:
    """The fail-over's old or new primary (``roles``: its columns) is one of these
    (cluster, node)."""
    out = F.lit(False)
    for cluster, node in nodes:
        here = F.col("cluster") == cluster
        for role in roles:
            out = out | (here & (F.col(role) == node))
    return F.coalesce(out, F.lit(False))


def _evidence(
    suspect: Sequence[str],
    unclocked: Sequence[tuple[str, str]] = (),
    agentless: Sequence[tuple[str, str]] = (),
) -> Column:
    bad = F.lit(False)
    if suspect:
        bad = F.col("node").isin(*suspect) | F.coalesce(
            F.col("old_node").isin(*suspect), F.lit(False)
        )
    negative = F.lit(False)
    for phase in (p.name for p in failover_phases.PHASES):
        negative = negative | F.coalesce(F.col(f"{phase}_ms") < NEGATIVE_MS, F.lit(False))
        # a part longer than the whole: a resignation or an election of another fail-over
        longer = F.col(f"{phase}_ms") > F.col("failover_ms") - NEGATIVE_MS
        negative = negative | F.coalesce(longer, F.lit(False))
    checks = {
        "no_failure": F.col("failure_us").isNull(),
        "failure_inferred": F.col("failure_by") == "last_seen",
        "no_agent_logs": F.col("won_us").isNull() & F.col("promoted_us").isNull(),
        "no_recovering": F.col("recovering_us").isNull(),
        "not_active": F.col("active_us").isNull(),
        "bad_lines": bad,
        "clock_unresolved": _involves(unclocked),
        "agent_log_missing": _involves(agentless),
        "inconsistent": negative,
    }
    codes = F.concat_ws(
        ", ", *[F.when(F.coalesce(checks[c], F.lit(False)), F.lit(c)) for c in EVIDENCE]
    )
    return (
        F.when(F.col("kind") == "teardown", F.lit("teardown"))
        .when(F.col("kind") != "failover", F.lit("initial"))
        .when(codes == "", F.lit("complete"))
        .otherwise(codes)
    )


def _withheld(evidence: Column) -> Column:
    """The evidence codes of :data:`WITHHOLD` in ``evidence`` (null: none)."""
    codes = F.concat_ws(", ", *[F.when(evidence.contains(c), F.lit(c)) for c in WITHHOLD])
    return F.when(codes != "", codes)


def annotate(
    events: DataFrame,
    fo: DataFrame,
    suspect: Sequence[str] = (),
    unclocked: Sequence[tuple[str, str]] = (),
    agentless: Sequence[tuple[str, str]] = (),
) -> DataFrame:
    """``fo`` with ``failure_kind``, ``spurious``, ``evidence``, ``session_timeout_s``,
    ``link_heartbeat_s``, ``ha_backup_timeout_s``, ``detection_per_timeout``,
    ``detection_per_heartbeat``, ``backups_dropped``,
    ``backup_timeout_fired`` (see the module's docstring); ``suspect``: nodes whose files
    have unusable lines; ``unclocked``: (cluster, node) whose clock could not be placed;
    ``agentless``: (cluster, node) whose agent's log is missing
    (:func:`analytics.missing_logs.agentless`). Phases of a fail-over with ``bad_lines`` or
    ``clock_unresolved`` are left null: the lines that remain would give phases that never
    happened (a lost resignation makes the detection end at the election). Without the old
    primary's agent's log its resignation is unknown: detection and election are null and
    ``spurious`` is unknown (null), unless the drill recorded the fault."""
    is_failover = F.col("kind") == "failover"
    bad = F.col("evidence").contains("bad_lines") | F.col("evidence").contains("clock_unr")
    # the old primary's agent's log missing: no resignation to split detection from election
    unsplit = _involves(agentless, ("old_node",))
    # a few withColumns, each of columns that do not read one another: every call has the
    # analyser walk the whole plan of the joins below again (most of a test job's time)
    joined = (
        fo.join(_nemeses(events, fo), ["cluster", "epoch"], "left")
        .join(_settings(events), "cluster", "left")
        .join(_backup_timeouts(events, fo), ["cluster", "epoch"], "left")
        .join(faults.zookeeper_gaps(events, fo), ["cluster", "epoch"], "left")
        .withColumn(
            "kind",
            F.when(F.coalesce("teardown", F.lit(False)), F.lit("teardown")).otherwise(
                F.col("kind")
            ),
        )
    )
    spurious = F.when(
        is_failover & ((F.col("failure_source") == "drill") | ~unsplit),
        # a fault the drill injected at the primary is a failure of its own
        (F.coalesce(F.col("failure_source"), F.lit("")) != "drill")
        & F.coalesce(_spurious(F.col("own_failure_by"), F.col("failure_reason")), F.lit(False)),
    )
    judged = joined.withColumns(
        {
            "failure_kind": F.when(
                is_failover,
                F.coalesce(
                    "nemesis",
                    faults.record_kind(F.col("failure_by")),
                    _kind_from_logs(
                        F.coalesce("own_failure_by", "failure_by"), F.col("failure_reason")
                    ),
                ),
            ),
            "spurious": spurious,
            "spurious_avoidable": faults.avoidable(spurious, F.col("zk_lost"), F.col("zk_gap_s")),
            "evidence": _evidence(suspect, unclocked, agentless),
        }
    )
    # phases of untrusted evidence null; detection and election also without the old
    # primary's agent's log
    kept: dict[str, Column] = {"withheld": _withheld(F.col("evidence"))}
    for phase in (p.name for p in failover_phases.PHASES):
        keep = ~bad & ~unsplit if phase in ("detection", "election") else ~bad
        kept[f"{phase}_ms"] = F.when(keep, F.col(f"{phase}_ms"))
    recovered = F.col("recovering_us").isNotNull()
    dropped = F.coalesce("backups_dropped", F.lit(0))
    return (
        judged.withColumns(kept)
        .withColumns(
            {
                "detection_per_timeout": F.col("detection_ms")
                / (F.col("session_timeout_s") * US_PER_MS),
                "detection_per_heartbeat": F.col("detection_ms")
                / (F.col("link_heartbeat_s") * US_PER_MS),
                "backups_dropped": F.when(recovered, dropped),
                "backup_timeout_fired": F.when(
                    is_failover & recovered,
                    (F.coalesce("backup_timeout_hits", F.lit(0)) > 0) | (dropped > 0),
                ),
            }
        )
        .drop("nemesis", "teardown", "zk_lost", "backup_timeout_hits")
    )


#: The phases and the client outage (:data:`analytics.percentiles.PHASES`).
TUNING_PHASES = PHASES
#: The settings the logs give, as ``<name>_s`` columns (seconds).
SETTINGS = ("session_timeout", "broker_timeout", "check_interval", "link_heartbeat",
            "ha_backup_timeout")  # fmt: skip


def tuning(fo: DataFrame, by: Sequence[str] = ("config",)) -> DataFrame:
    """One row per configuration (or per ``by``: the job also groups by configuration and
    kind of failure) over its fail-overs: ``failovers``, ``spurious`` (and of them
    ``spurious_longer_timeout``, ``spurious_no_timeout``: see
    :func:`analytics.faults.avoidable`), ``incomplete`` (evidence not complete),
    ``withheld`` (left out of the percentiles), the settings (``session_timeout_s``,
    ``broker_timeout_s``, ``check_interval_s``, ``link_heartbeat_s``,
    ``ha_backup_timeout_s``), ``p50_<phase>_ms`` and ``p90_<phase>_ms`` for each phase and
    the client outage (fail-overs not withheld), ``detection_p50_per_timeout``,
    ``detection_p50_per_heartbeat``, ``backup_timeout_fired``."""
    rows = fo.where(F.col("kind") == "failover")
    avoidable = F.coalesce(F.col("spurious_avoidable"), F.lit(""))
    aggs = [
        F.count(F.lit(1)).alias("failovers"),
        F.sum(F.col("spurious").cast("int")).alias("spurious"),
        F.sum((avoidable == "longer timeout").cast("int")).alias("spurious_longer_timeout"),
        F.sum((avoidable == "no timeout").cast("int")).alias("spurious_no_timeout"),
        F.sum((F.col("evidence") != "complete").cast("int")).alias("incomplete"),
        F.sum(F.col("withheld").isNotNull().cast("int")).alias("withheld"),
        *[F.max(f"{name}_s").alias(f"{name}_s") for name in SETTINGS],
        F.sum(F.coalesce(F.col("backup_timeout_fired"), F.lit(False)).cast("int")).alias(
            "backup_timeout_fired"
        ),
    ]
    for phase in TUNING_PHASES:
        q = F.percentile(F.when(F.col("withheld").isNull(), F.col(f"{phase}_ms")), [0.5, 0.9])
        aggs.append(q.alias(f"q_{phase}"))
    grouped = rows.groupBy(*by).agg(*aggs)
    cols: list[Column | str] = [
        *by, "failovers", "spurious", "spurious_longer_timeout", "spurious_no_timeout",
        "incomplete", "withheld", *[f"{name}_s" for name in SETTINGS],
    ]  # fmt: skip
    for phase in TUNING_PHASES:
        cols += [
            F.col(f"q_{phase}")[0].alias(f"p50_{phase}_ms"),
            F.col(f"q_{phase}")[1].alias(f"p90_{phase}_ms"),
        ]
    cols += [
        (F.col("q_detection")[0] / (F.col("session_timeout_s") * US_PER_MS)).alias(
            "detection_p50_per_timeout"
        ),
        (F.col("q_detection")[0] / (F.col("link_heartbeat_s") * US_PER_MS)).alias(
            "detection_p50_per_heartbeat"
        ),
        "backup_timeout_fired",
    ]
    return grouped.select(*cols).orderBy(*by)
