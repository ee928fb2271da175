"""Fail-over analytics as pure DataFrame-to-DataFrame transforms: the pipeline.

:Status: Beta

Inputs are the JSON log lines of brokers, agents and drill clients (``docs/log-schema.md``,
schema 1) as read by :func:`analytics.job.read_lines` (a ``value`` column); nothing in the
transforms reads or writes files, starts a session or collects rows: the job does that (the
"Ready" caller). Every function takes and returns DataFrames, so each one is tested on a
few hand-made rows against golden rows (``tests/analytics/test_transforms.py``).

The pipeline, one module a step (:func:`analyse` composes steps 2 to 6 on the events of 1):

1. :mod:`analytics.parse`: :func:`~analytics.parse.summarise` and
   :func:`~analytics.parse.relevant` keep and parse the lines the analysis uses;
   :func:`~analytics.parse.normalise`: drop lines that are not events, time as integer
   microseconds ``us``, ``source`` (broker, agent, drill), the cluster of broker events
   that log none from the agent of the same node.
2. :mod:`analytics.states`: :func:`~analytics.states.state_intervals`: each broker's HA
   state from one ``ha_state_changed`` to the next, ended by its stop, fence or death (its
   agent's ``broker_process_exited`` or ``broker_killed``) or by the end of its log;
   :func:`~analytics.states.primary_stints` merges recovering and active into one stint as
   primary.
3. :mod:`analytics.failover`: :func:`~analytics.failover.promotions`: one row per
   (cluster, epoch): the broker's recovering and active, the agent's ``election_won`` and
   ``agent_promoted``.
4. :func:`analytics.failover.failovers`: each promotion that had a primary before it: the
   old primary's failure, its resignation, the phases in milliseconds, the client outage,
   the scenario and the configuration. Exact definitions in ``docs/analytics.md``.
5. :mod:`analytics.tuning`: :func:`~analytics.tuning.annotate`: each fail-over's kind
   of failure, whether it was spurious, its evidence, the configured timeouts and
   ``ha-backup-timeout``; :func:`~analytics.tuning.tuning`: a row per configuration.
6. :mod:`analytics.percentiles`: :func:`~analytics.percentiles.phase_durations` (long
   form), :func:`~analytics.percentiles.percentiles` (p50, p90, p99, max by scenario,
   configuration and phase) and :mod:`analytics.anomalies` (two primaries at once, a
   promotion of a broker that was not ready while a ready one existed, confirmed messages
   lost).

Times are microseconds since the Unix epoch (``us``, exact integers); durations are
milliseconds (``*_ms``, doubles). Clocks are checked and corrected first
(:mod:`analytics.clocks`, in the job).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import DataFrame

from analytics.anomalies import anomalies
from analytics.failover import Checkpoint, Labels, failovers, identity, promotions
from analytics.percentiles import percentiles, phase_durations
from analytics.states import primary_stints, state_intervals
from analytics.tuning import annotate, tuning


@dataclass(frozen=True)
class Tables:
    """The report's tables (lazy DataFrames)."""

    failovers: DataFrame
    phases: DataFrame
    percentiles: DataFrame
    percentiles_by_kind: DataFrame
    tuning: DataFrame
    tuning_by_kind: DataFrame
    anomalies: DataFrame
    primary_stints: DataFrame


def analyse(
    events: DataFrame,
    labels: Labels | None = None,
    checkpoint: Checkpoint = identity,
    suspect: Sequence[str] = (),
    unclocked: Sequence[tuple[str, str]] = (),
    agentless: Sequence[tuple[str, str]] = (),
) -> Tables:
    """The whole pipeline on normalised events (see the module's docstring);
    ``checkpoint`` cuts the lineage between steps (see :data:`Checkpoint`); ``suspect``:
    nodes whose files have unusable lines (their fail-overs are marked incomplete);
    ``unclocked``: (cluster, node) whose clock could not be placed (their fail-overs keep
    no phases: :mod:`analytics.clocks`); ``agentless``: (cluster, node) whose agent's log
    is missing (:mod:`analytics.missing_logs`)."""
    intervals = checkpoint(state_intervals(events))
    promoted = checkpoint(promotions(events))
    fo = checkpoint(
        annotate(
            events,
            # one leaf, not its plan: annotate joins it with three tables made from it,
            # and every analysis of a plan walks it whole (DeduplicateRelations: half of
            # a small job's analysis)
            checkpoint(failovers(events, promoted, labels, checkpoint)),
            suspect,
            unclocked,
            agentless,
        )
    )
    phases = checkpoint(phase_durations(fo))
    stints = checkpoint(primary_stints(intervals))
    return Tables(
        failovers=fo,
        phases=phases,
        percentiles=percentiles(phases),
        percentiles_by_kind=percentiles(phases, ("config", "failure_kind")),
        tuning=tuning(fo),
        tuning_by_kind=tuning(fo, ("config", "failure_kind")),
        anomalies=anomalies(events, intervals, promoted, stints),
        primary_stints=stints,
    )
