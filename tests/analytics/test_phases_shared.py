"""One definition of the fail-over phases (issue 17, item 5): the Spark job's per-fail-over
phase columns are :func:`common.failover_phases.durations` (what the web console's
timeline computes) over the same instants, on the generated logs of ``conftest.py`` and on
rows with instants missing; the job's phase names and event lists are the shared module's."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import types as T

from analytics import advice, failover, generate, job, percentiles, states, tuning
from common import failover_phases
from common.failover_phases import INSTANTS, PHASES, durations

pytestmark = pytest.mark.timeout(300)

NAMES = [p.name for p in PHASES]


def ms(instants: dict[str, Any]) -> dict[str, float | None]:
    """:func:`durations` over microsecond instants, in milliseconds."""
    return {k: None if v is None else v / 1000 for k, v in durations(instants).items()}


def test_every_generated_failover_has_the_shared_phases(
    generated: tuple[generate.Params, job.Result],
) -> None:
    _params, result = generated
    rows = [r for r in result.tables["failovers"] if r["kind"] == "failover"]
    assert len(rows) == 120
    for row in rows:
        instants = {name: row[f"{name}_us"] for name in INSTANTS}
        assert None not in instants.values(), row
        expected = ms(instants)
        assert {n: row[f"{n}_ms"] for n in NAMES} == pytest.approx(expected), row


def test_an_initial_election_has_the_shared_nulls(
    generated: tuple[generate.Params, job.Result],
) -> None:
    """No failure, nothing detected: the job's detection and election are null, and so
    are ``durations()``'s (it used to give an election of 0 here)."""
    _params, result = generated
    rows = [r for r in result.tables["failovers"] if r["kind"] == "initial"]
    assert rows
    for row in rows:
        instants = {name: row[f"{name}_us"] for name in INSTANTS}
        assert instants["failure"] is None and instants["won"] is not None, row
        expected = ms(instants)
        assert expected["detection"] is None and expected["election"] is None, row
        assert {n: row[f"{n}_ms"] for n in NAMES} == pytest.approx(expected), row


def test_missing_instants_give_the_same_nulls_and_fallbacks(spark: SparkSession) -> None:
    """A fail-over (its ``failure`` known) with each instant but ``failure`` missing in turn,
    none of the optional ones, and the usual row: the columns that
    :func:`analytics.failover.phase_columns` computes are ``durations()``'s, ``promotion``'s
    fallback to ``promoted`` included."""
    full: dict[str, int | None] = {
        "failure": 1_000_000, "resigned": 1_300_000, "won": 1_420_000,
        "promoted": 1_500_000, "recovering": 1_480_000, "active": 1_580_000,
    }  # fmt: skip
    cases: list[dict[str, int | None]] = [
        full,
        {**full, "resigned": None, "won": None, "promoted": None},
    ]
    cases += [{**full, name: None} for name in full if name != "failure"]
    rows: list[dict[str, int | None]] = []
    for case in cases:
        known = [t for t in (case["resigned"], case["won"]) if t is not None]
        # the job's detected: the earlier of resigned and won, for a fail-over
        rows.append({**case, "detected": min(known) if known else None})
    schema = T.StructType([T.StructField(f"{n}_us", T.LongType()) for n in INSTANTS])
    df = spark.createDataFrame([[r[n] for n in INSTANTS] for r in rows], schema)
    got = df.select(*failover.phase_columns()).collect()
    for case, out in zip(rows, got, strict=True):
        assert out.asDict() == {f"{n}_ms": v for n, v in ms(case).items()}, case


def test_phase_names_and_events_are_the_shared_ones() -> None:
    assert (*NAMES, failover_phases.CLIENT_OUTAGE) == percentiles.PHASES
    assert tuning.TUNING_PHASES == percentiles.PHASES
    assert tuple(NAMES[:-1]) == advice.PHASES and set(advice.SETTING) == set(advice.PHASES)
    assert failover.RESIGN_EVENTS is failover_phases.RESIGN_EVENTS
    assert states.BROKER_END_EVENTS is failover_phases.BROKER_FAILURE_EVENTS
    assert set(failover_phases.BROKER_FAILURE_EVENTS) <= set(failover.FAILURE_EVENTS)
