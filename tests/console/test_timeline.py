"""The fail-over timeline (pure): what a new primary and a backup see, in the shared phases;
and the phase definitions shared with the analytics job."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.management.console.timeline import KEEP, Timeline
from common.failover_phases import (
    BROKER_FAILURE_EVENTS,
    INSTANTS,
    PHASES,
    RESIGN_EVENTS,
    client_outage,
    durations,
)

OLD, NEW, OTHER = "127.0.0.1:5001", "127.0.0.1:5002", "127.0.0.1:5003"


def changed(new: str) -> tuple[str, dict[str, object]]:
    return "ha_state_changed", {"old": "x", "new": new, "reason": "test"}


def up(primary: str) -> tuple[str, dict[str, object]]:
    return "ha_link_up", {"primary": primary, "primary_epoch": 1}


DOWN: tuple[str, dict[str, object]] = (
    "ha_link_down",
    {"primary": OLD, "reason": "connection lost"},
)


def feed(timeline: Timeline, own: str, *events: tuple[float, int, tuple[str, dict[str, object]]]):
    done = []
    for at, epoch, (event, fields) in events:
        found = timeline.observe(at, event, dict(fields), epoch, own)
        if found is not None:
            done.append(found)
    return done


def test_a_new_primary_sees_failure_recovering_and_active() -> None:
    timeline = Timeline()
    done = feed(
        timeline,
        NEW,
        (10.0, 0, changed("joining")),
        (11.0, 1, up(OLD)),
        (11.5, 1, changed("ready")),
        (20.0, 1, DOWN),
        (20.35, 2, changed("recovering")),
        (20.9, 2, changed("active")),
        (21.0, 2, changed("active")),
    )
    assert len(done) == 1
    view = done[0].view()
    assert view["old_primary"] == OLD and view["new_primary"] == NEW and view["epoch"] == 2
    assert view["seen_by"] == "new primary" and not view["initial"]
    assert view["phases_ms"] == {
        "detection": None,
        "election": None,
        "promotion": None,
        "recovering": pytest.approx(550.0),
        "failover": pytest.approx(900.0),
    }
    assert view["until_promoted_ms"] == pytest.approx(350.0)
    assert len(timeline.view()) == 1


def client(event: str) -> tuple[str, dict[str, object]]:
    return f"ha_first_client_{event}", {"connection": "127.0.0.1:40000 -> 127.0.0.1:5002"}


def test_the_client_outage_ends_at_the_new_primarys_first_client_confirm() -> None:
    """A client connects during recovering, its first confirm goes out after active: the
    outage is failure to that confirm (failure to the connection until then)."""
    timeline = Timeline()
    (done,) = feed(
        timeline,
        NEW,
        (11.0, 1, up(OLD)),
        (20.0, 1, DOWN),
        (20.35, 2, changed("recovering")),
        (20.5, 2, client("connection")),
        (20.9, 2, changed("active")),
    )
    view = done.view()
    assert view["client_outage_ms"] == pytest.approx(500.0)
    assert view["client_outage_until"] == "client_connected"
    feed(timeline, NEW, (21.2, 2, client("confirm")), (21.9, 2, client("confirm")))
    view = timeline.view()[0]
    assert view["client_outage_ms"] == pytest.approx(1200.0)
    assert view["client_outage_until"] == "client_confirmed"
    assert view["instants"]["client_connected"] == 20.5


def test_a_client_event_of_another_epoch_or_on_a_backup_changes_nothing() -> None:
    timeline = Timeline()
    feed(timeline, NEW, (1.0, 1, up(OLD)), (2.0, 1, DOWN), (2.5, 2, changed("recovering")))
    feed(timeline, NEW, (3.0, 3, client("confirm")))  # a later epoch's: not this fail-over's
    assert timeline.view()[0]["client_outage_ms"] is None
    other = Timeline()
    feed(
        other,
        OTHER,
        (1.0, 1, up(OLD)),
        (2.0, 1, DOWN),
        (3.0, 2, up(NEW)),
        (4, 2, client("confirm")),
    )
    assert other.view()[0]["client_outage_ms"] is None  # a backup's clients are refused


def test_client_outage_prefers_the_confirm_and_needs_the_failure() -> None:
    assert client_outage({"failure": 1.0, "client_connected": 1.5}) == (0.5, "client_connected")
    both = {"failure": 1.0, "client_connected": 1.5, "client_confirmed": 2.0}
    assert client_outage(both) == (1.0, "client_confirmed")
    assert client_outage({"client_confirmed": 2.0}) == (None, None)  # an initial election
    assert client_outage({"failure": 1.0}) == (None, None)


def test_a_backup_sees_the_failure_and_its_link_to_the_new_primary() -> None:
    timeline = Timeline()
    (seen,) = feed(
        timeline, OTHER, (1.0, 1, up(OLD)), (5.0, 1, DOWN), (6.0, 2, up(NEW)), (7.0, 2, up(NEW))
    )
    view = seen.view()
    assert (view["old_primary"], view["new_primary"], view["epoch"]) == (OLD, NEW, 2)
    assert view["seen_by"] == "backup"
    assert view["until_promoted_ms"] == pytest.approx(1000.0)
    assert view["phases_ms"]["failover"] is None  # the new primary's active is not seen here


def test_the_first_primary_is_an_initial_election() -> None:
    timeline = Timeline()
    (done,) = feed(timeline, OLD, (1.9, 1, changed("recovering")), (2.0, 1, changed("active")))
    assert done.view()["initial"]
    assert done.view()["phases_ms"]["failover"] is None  # no failure before a first primary
    assert done.view()["phases_ms"]["recovering"] == pytest.approx(100.0)


def test_a_link_that_blips_to_the_same_primary_is_no_failover() -> None:
    timeline = Timeline()
    assert feed(timeline, OTHER, (1.0, 1, up(OLD)), (2.0, 1, DOWN), (3.0, 1, up(OLD))) == []
    assert timeline.view() == []


@given(st.lists(st.integers(min_value=1, max_value=3), min_size=1, max_size=60))
def test_at_most_keep_failovers_newest_first(primaries: list[int]) -> None:
    timeline = Timeline()
    at, epoch = 0.0, 1
    for n in primaries:
        at += 1
        epoch += 1
        feed(timeline, OTHER, (at, epoch, up(f"h:{n}")), (at + 0.5, epoch, DOWN))
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
