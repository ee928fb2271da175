"""The fail-over timeline (pure): what a new primary and a backup see, in the shared phases;
and the phase definitions shared with the analytics job."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.management.console.timeline import KEEP, Sample, Timeline
from common.failover_phases import (
    BROKER_FAILURE_EVENTS,
    INSTANTS,
    PHASES,
    RESIGN_EVENTS,
    durations,
)

OLD, NEW, OTHER = "127.0.0.1:5001", "127.0.0.1:5002", "127.0.0.1:5003"


def backup(at: float, primary: str | None, up: bool, epoch: int = 1, state: str = "ready"):
    return Sample(at=at, state=state, epoch=epoch, primary=primary, link_up=up)


def test_a_new_primary_sees_failure_recovering_and_active() -> None:
    timeline = Timeline(own_url=NEW)
    assert timeline.observe(backup(10.0, None, False, 0, "joining")) is None
    assert timeline.observe(backup(11.0, OLD, True)) is None
    assert timeline.observe(backup(20.0, OLD, False)) is None  # the link went down
    assert timeline.observe(backup(20.1, OLD, False)) is None
    recovering = Sample(20.4, "recovering", 2, NEW, False, recovering_at=20.35)
    assert timeline.observe(recovering) is None
    done = timeline.observe(Sample(20.9, "active", 2, NEW, False))
    assert done is not None
    view = done.view()
    assert view["old_primary"] == OLD and view["new_primary"] == NEW
    assert view["seen_by"] == "new primary" and not view["initial"]
    assert view["phases_ms"] == {
        "detection": None,
        "election": None,
        "promotion": None,
        "recovering": pytest.approx(550.0),
        "failover": pytest.approx(900.0),
    }
    assert view["until_promoted_ms"] == pytest.approx(350.0)
    assert timeline.observe(Sample(21.0, "active", 2, NEW, False)) is None  # once only
    assert len(timeline.view()) == 1


def test_a_backup_sees_the_failure_and_its_link_to_the_new_primary() -> None:
    timeline = Timeline(own_url=OTHER)
    timeline.observe(backup(1.0, OLD, True))
    timeline.observe(backup(5.0, OLD, False))
    timeline.observe(backup(5.1, None, False, state="joining"))
    seen = timeline.observe(backup(6.0, NEW, True, epoch=2, state="catch-up"))
    assert seen is not None
    view = seen.view()
    assert (view["old_primary"], view["new_primary"], view["epoch"]) == (OLD, NEW, 2)
    assert view["seen_by"] == "backup"
    assert view["until_promoted_ms"] == pytest.approx(1000.0)
    assert view["phases_ms"]["failover"] is None  # the new primary's active is not seen here


def test_the_first_primary_is_an_initial_election() -> None:
    timeline = Timeline(own_url=OLD)
    timeline.observe(backup(1.0, None, False, 0, "joining"))
    done = timeline.observe(Sample(2.0, "active", 1, OLD, False, recovering_at=1.9))
    assert done is not None and done.view()["initial"]
    assert done.view()["phases_ms"]["failover"] is None  # no failure before a first primary


def test_a_link_that_blips_to_the_same_primary_is_no_failover() -> None:
    timeline = Timeline()
    timeline.observe(backup(1.0, OLD, True))
    timeline.observe(backup(2.0, OLD, False))
    assert timeline.observe(backup(3.0, OLD, True)) is None
    assert timeline.view() == []


@given(st.lists(st.integers(min_value=1, max_value=3), min_size=1, max_size=60))
def test_at_most_keep_failovers_newest_first(primaries: list[int]) -> None:
    timeline = Timeline()
    at, epoch = 0.0, 1
    for n in primaries:
        at += 1
        epoch += 1
        timeline.observe(backup(at, f"h:{n}", True, epoch))
        timeline.observe(backup(at + 0.5, f"h:{n}", False, epoch))
    epochs = [f["epoch"] for f in timeline.view()]
    assert len(epochs) <= KEEP
    assert epochs == sorted(epochs, reverse=True)


def test_durations_follow_the_analytics_definitions() -> None:
    instants = {"failure": 0.0, "resigned": 0.3, "won": 0.5, "recovering": 0.6, "active": 1.0}
    assert durations(instants) == pytest.approx(
        {"detection": 0.3, "election": 0.2, "promotion": 0.1, "recovering": 0.4, "failover": 1.0}
    )
    # without recovering, promotion is promoted - won; without the agents, only the broker's
    assert durations({"won": 1.0, "promoted": 1.5})["promotion"] == 0.5
    assert durations({"failure": 0.0})["detection"] is None
    assert [p.name for p in PHASES] == [
        "detection",
        "election",
        "promotion",
        "recovering",
        "failover",
    ]
    assert {p.start for p in PHASES} | {p.end for p in PHASES} <= set(INSTANTS)


def test_the_event_names_are_the_analytics_jobs() -> None:
    pytest.importorskip("pyspark")
    from analytics.failover import FAILURE_EVENTS
    from analytics.failover import RESIGN_EVENTS as ANALYTICS_RESIGN
    from analytics.states import BROKER_END_EVENTS

    assert RESIGN_EVENTS == ANALYTICS_RESIGN
    assert set(BROKER_FAILURE_EVENTS) == set(BROKER_END_EVENTS)
    assert set(BROKER_FAILURE_EVENTS) <= set(FAILURE_EVENTS)
