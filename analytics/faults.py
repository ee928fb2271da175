"""Ground truth of a fail-over's failure: the fault the drill injected, else the earliest
evidence of it from any node.

:Status: Beta

Input: normalised events (:func:`analytics.parse.normalise`) and each promotion's window
on its old primary (``cluster``, ``epoch``, ``prev_node``, ``prev_us``, ``bound_us``: after
the old primary's promotion, at or before the new primary's election). Pure
DataFrame-to-DataFrame functions (:mod:`analytics.failover` uses them):

- :func:`recorded`: the nemesis drill's own record of the fault it injected in the window
  (:data:`FAULT_RECORDS`: the signal or the cut, with its exact time, noted by
  ``qpid-ha drill --nemesis``): ``rec_us``, ``rec_by``. A record names its ``target``, the
  old primary's node; a record of the drill's cluster (or of none) counts.
- :func:`link_evidence`: the backups' view: the last backup to see its replication link
  go down in the window (each backup's last ``ha_link_down`` there, the latest of them):
  ``link_us``. A backup whose link was cut on purpose earlier (the stale backup) saw it
  earlier: the latest is the one the primary's failure cut.

Without a record, the failure is the earlier of the old primary's own first failure event
and ``link_us`` (:mod:`analytics.failover`), so a node that logs nothing (killed, frozen,
cut off) is still timed by what the others saw.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from common import failover_phases

__all__ = ["FAULT_RECORDS", "KIND_EVENTS", "link_evidence", "record_kind", "recorded"]

#: The drill's fault records and their kinds: :data:`common.failover_phases.FAULT_RECORDS`.
FAULT_RECORDS = failover_phases.FAULT_RECORDS

#: Every kind of failure the report tells apart (``failure_kind``): the nemesis drill's
#: faults, an operator's stop, and what the logs say without a drill.
KIND_EVENTS = (*FAULT_RECORDS.values(), "stale-backup", "zk-loss", "operator-stop")


def record_kind(event: Column) -> Column:
    """The kind of failure of a fault record's event name (null for other events)."""
    out = F.lit(None).cast("string")
    for name, kind in FAULT_RECORDS.items():
        out = F.when(event == name, F.lit(kind)).otherwise(out)
    return out


def _same_cluster(other: Column) -> Column:
    return (other == F.lit("")) | (other == F.col("cluster"))


def recorded(events: DataFrame, window: DataFrame) -> DataFrame:
    """(cluster, epoch, rec_us, rec_by): the drill's last fault record aimed at the old
    primary's node in its window (``prev_us``, ``bound_us``]."""
    records = events.where(
        (F.col("source") == "drill") & F.col("event").isin(*FAULT_RECORDS)
    ).select(
        F.col("cluster").alias("r_cluster"),
        F.col("target").alias("r_target"),
        F.col("us").alias("r_us"),
        F.col("event").alias("r_event"),
    )
    return (
        window.where(F.col("prev_node").isNotNull())
        .join(
            records,
            _same_cluster(F.col("r_cluster"))
            & (F.col("r_target") == F.col("prev_node"))
            & (F.col("r_us") > F.col("prev_us"))
            & (F.col("r_us") <= F.col("bound_us")),
        )
        .groupBy("cluster", "epoch")
        .agg(F.max("r_us").alias("rec_us"), F.max_by("r_event", "r_us").alias("rec_by"))
    )


def link_evidence(events: DataFrame, window: DataFrame) -> DataFrame:
    """(cluster, epoch, link_us): the latest of the backups' last ``ha_link_down`` of a
    link to the old primary in its window (backups: the cluster's other nodes; the old
    primary's address: the one the backups linked to at its epoch, ``ha_link_up`` with
    ``primary_epoch`` ``prev_epoch``). A link to an earlier primary that times out just
    after this promotion is that fail-over's evidence, never this one's."""
    addresses = (
        events.where((F.col("event") == "ha_link_up") & F.col("primary").isNotNull())
        .select("cluster", F.col("primary_epoch").alias("prev_epoch"), "primary")
        .distinct()
    )
    downs = events.where((F.col("source") == "broker") & (F.col("event") == "ha_link_down")).select(
        "cluster", "primary", F.col("node").alias("l_node"), F.col("us").alias("l_us")
    )
    per_backup = (
        window.where(F.col("prev_node").isNotNull())
        .join(addresses, ["cluster", "prev_epoch"])
        .join(downs, ["cluster", "primary"])
        .where(
            (F.col("l_node") != F.col("prev_node"))
            & (F.col("l_us") > F.col("prev_us"))
            & (F.col("l_us") <= F.col("bound_us"))
        )
        .groupBy("cluster", "epoch", "l_node")
        .agg(F.max("l_us").alias("last_us"))
    )
    return per_backup.groupBy("cluster", "epoch").agg(F.max("last_us").alias("link_us"))


#: The agent's check of its broker times out after ``min(CHECK_TIMEOUT_MAX_S,
#: CHECK_TIMEOUT_PER_INTERVAL x --check-interval)`` (``ha_agent/agent.py``): a check that
#: timed out was sent that long before the agent logged it.
CHECK_TIMEOUT_MAX_S = 2.0
CHECK_TIMEOUT_PER_INTERVAL = 4.0


def check_sent(events: DataFrame, marks: DataFrame) -> DataFrame:
    """``marks`` (cluster, prev_node, f_us, event, reason) with an agent's failed check
    that timed out (``broker_state`` whose reason says ``timed out``) moved back to when
    the check was sent: the broker stopped answering by then. Needs the node's agent's
    ``check_interval`` (``agent_started``); unchanged without it."""
    intervals = (
        events.where((F.col("event") == "agent_started") & F.col("check_interval").isNotNull())
        .groupBy("cluster", F.col("node").alias("prev_node"))
        .agg(F.max("check_interval").alias("ci"))
    )
    timed_out = (F.col("event") == "broker_state") & F.coalesce(
        F.col("reason").contains("timed out"), F.lit(False)
    )
    wait_us = (
        F.least(F.lit(CHECK_TIMEOUT_MAX_S), F.col("ci") * CHECK_TIMEOUT_PER_INTERVAL) * 1e6
    ).cast("long")
    return (
        marks.join(F.broadcast(intervals), ["cluster", "prev_node"], "left")
        .withColumn(
            "f_us",
            F.when(timed_out & F.col("ci").isNotNull(), F.col("f_us") - wait_us).otherwise(
                F.col("f_us")
            ),
        )
        .drop("ci")
    )


#: The longest ``--session-timeout`` an agent takes (``ha_agent/settings.py``): a loss of
#: ZooKeeper longer than this is one no timeout rides out.
MAX_SESSION_TIMEOUT_S = 60.0


#: How far before a fail-over's failure the drill's pause of ZooKeeper is looked for.
ZK_LOOKBACK_US = 120_000_000


def zookeeper_gaps(events: DataFrame, fo: DataFrame) -> DataFrame:
    """(cluster, epoch, zk_lost, zk_gap_s): for a fail-over, how long the drill held
    ZooKeeper's ensemble away (the last ``zk_ensemble_paused`` at or before its failure,
    within :data:`ZK_LOOKBACK_US`, to the next ``zk_ensemble_resumed``; null when it never
    came back in the logs)."""
    marks = events.where(
        (F.col("source") == "drill")
        & F.col("event").isin("zk_ensemble_paused", "zk_ensemble_resumed")
    ).select(F.col("cluster").alias("z_cluster"), F.col("us").alias("z_us"), "event")
    paused = marks.where(F.col("event") == "zk_ensemble_paused").select(
        "z_cluster", F.col("z_us").alias("p_us")
    )
    resumed = marks.where(F.col("event") == "zk_ensemble_resumed").select(
        F.col("z_cluster").alias("r_cluster"), F.col("z_us").alias("r_us")
    )
    last_pause = (
        fo.where(F.col("failure_us").isNotNull())
        .select("cluster", "epoch", "failure_us")
        .join(
            paused,
            _same_cluster(F.col("z_cluster"))
            & (F.col("p_us") <= F.col("failure_us"))
            & (F.col("p_us") > F.col("failure_us") - ZK_LOOKBACK_US),
        )
        .groupBy("cluster", "epoch", "z_cluster")
        .agg(F.max("p_us").alias("p_us"))
    )
    return (
        last_pause.join(
            resumed,
            (F.col("r_cluster") == F.col("z_cluster")) & (F.col("r_us") > F.col("p_us")),
            "left",
        )
        .groupBy("cluster", "epoch", "p_us")
        .agg(F.min("r_us").alias("r_us"))
        .select(
            "cluster",
            "epoch",
            F.lit(True).alias("zk_lost"),
            ((F.col("r_us") - F.col("p_us")) / 1e6).alias("zk_gap_s"),
        )
    )


def avoidable(spurious: Column, zk_lost: Column, gap_s: Column) -> Column:
    """For a spurious fail-over: ``longer timeout`` when ZooKeeper came back within the
    longest session timeout an agent takes (a session timeout over the gap rides it
    out), ``no timeout`` when it was away longer or never came back in the logs; null when
    the logs do not say how long (no drill record) and for other fail-overs."""
    return (
        F.when(~F.coalesce(spurious, F.lit(False)) | zk_lost.isNull(), F.lit(None).cast("string"))
        .when(gap_s.isNull() | (gap_s >= MAX_SESSION_TIMEOUT_S), F.lit("no timeout"))
        .otherwise(F.lit("longer timeout"))
    )
