"""Fail-over phase durations and their percentiles.

:Status: Beta

Input: :func:`analytics.failover.failovers`. Pure DataFrame-to-DataFrame functions:
:func:`phase_durations` puts each fail-over's phases (:data:`PHASES`) in long form, and
:func:`percentiles` gives p50, p90, p99, max and mean by scenario, configuration and phase
(or by other columns: the job also groups by configuration and kind of failure).
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from common import failover_phases

#: The phases of :data:`common.failover_phases.PHASES`, then the clients' outage.
PHASES = (*(p.name for p in failover_phases.PHASES), failover_phases.CLIENT_OUTAGE)


def phase_durations(fo: DataFrame) -> DataFrame:
    """Fail-overs (kind ``failover``) in long form: cluster, epoch, scenario, config,
    failure_kind, phase, ms; null durations and withheld fail-overs (``withheld``:
    missing or contradictory evidence, :mod:`analytics.tuning`) left out."""
    stack = ", ".join(f"'{phase}', {phase}_ms" for phase in PHASES)
    kept = F.col("kind") == "failover"
    if "withheld" in fo.columns:
        kept = kept & F.col("withheld").isNull()
    return (
        fo.where(kept)
        .select(
            "cluster",
            "epoch",
            "scenario",
            "config",
            "failure_kind",
            F.expr(f"stack({len(PHASES)}, {stack}) as (phase, ms)"),
        )
        .where(F.col("ms").isNotNull())
    )


#: A group with fewer samples has no percentiles: its samples are shown as points.
MIN_SAMPLES = 5


def percentiles(phases: DataFrame, by: Sequence[str] = ("scenario", "config")) -> DataFrame:
    """By ``by`` (scenario and config) and phase: failovers, p50, p90, p99 (exact, linear
    interpolation between closest ranks), max and mean, in ms; a group of fewer than
    :data:`MIN_SAMPLES` fail-overs has no percentiles nor mean, its samples instead
    (``samples_ms``, sorted, as text: ``47, 130, 2988``)."""
    order = F.create_map(*[x for i, ph in enumerate(PHASES) for x in (F.lit(ph), F.lit(i))])
    q = F.percentile(F.col("ms"), [0.5, 0.9, 0.99])
    enough = F.col("failovers") >= MIN_SAMPLES
    return (
        phases.groupBy(*by, "phase")
        .agg(
            F.count(F.lit(1)).alias("failovers"),
            q.alias("q"),
            F.max("ms").alias("max_ms"),
            F.avg("ms").alias("mean_ms"),
            F.array_sort(F.collect_list("ms")).alias("all_ms"),
        )
        .select(
            *by,
            "phase",
            "failovers",
            F.when(enough, F.col("q")[0]).alias("p50_ms"),
            F.when(enough, F.col("q")[1]).alias("p90_ms"),
            F.when(enough, F.col("q")[2]).alias("p99_ms"),
            "max_ms",
            F.when(enough, F.col("mean_ms")).alias("mean_ms"),
            F.when(
                ~enough,
                F.array_join(
                    F.transform("all_ms", lambda x: F.round(x, 0).cast("long").cast("string")), ", "
                ),
            ).alias("samples_ms"),
        )
        .orderBy(*by, order[F.col("phase")])
    )
