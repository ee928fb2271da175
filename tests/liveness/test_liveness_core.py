"""The liveness core (broker/liveness.py) without sockets or loops: the progress answer,
the lease offers, the loop-lag histogram (hypothesis: p50 <= p99 <= max, max exact)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from broker.liveness import (
    LAG_BOUNDS,
    Durations,
    LeaseOffers,
    LoopProgress,
    RoleNote,
    ThreadTimes,
    serving_on_grants,
    summarise,
)


def test_the_answer_says_how_long_ago_the_loop_last_made_progress() -> None:
    progress = LoopProgress(started_at=10.0, pid=4242, broker_id="b-1")
    progress.progressed(10.5, RoleNote("active", epoch=7))
    answer = progress.answer(now=11.25)
    assert answer == {
        "alive": True,
        "progress": 1,
        "last_progress_ms": 750.0,
        "ha_state": "active",
        "epoch": 7,
        "fenced": False,
        "serving_on_grants": False,
        "pid": 4242,
        "broker_id": "b-1",
    }
    progress.progressed(11.3)  # a turn without a role keeps the role
    assert progress.answer(11.3)["ha_state"] == "active"
    assert progress.answer(11.3)["progress"] == 2
    # a primary that fenced itself still says "active" while it stops: it says fenced too
    progress.progressed(11.4, RoleNote("active", epoch=7, fenced=True))
    assert progress.answer(11.4)["fenced"] is True


def test_the_answer_carries_the_loop_threads_clocks_once_measured() -> None:
    progress = LoopProgress(started_at=0.0, pid=1)
    progress.progressed(1.0)  # no CPU time noted: the clocks are not told
    assert "loop_cpu_ms" not in progress.answer(1.5, ThreadTimes(0.3, 0.2))
    progress.progressed(2.0, cpu=0.25)
    answer = progress.answer(4.2, ThreadTimes(cpu=0.4, wait=1.9))
    assert answer["last_progress_ms"] == 2200.0
    assert answer["loop_clock_ms"] == 4200.0  # the broker's clock: the agent's spans
    assert answer["loop_cpu_ms"] == 400.0 and answer["loop_wait_ms"] == 1900.0
    assert answer["loop_cpu_since_progress_ms"] == 150.0
    assert progress.answer(4.2, ThreadTimes(cpu=0.4))["loop_wait_ms"] is None
    assert "loop_cpu_ms" not in progress.answer(4.2)  # no clocks read


def test_a_stalled_loop_answers_a_growing_silence() -> None:
    progress = LoopProgress(started_at=0.0, pid=1)
    progress.progressed(1.0)
    assert [progress.answer(t)["last_progress_ms"] for t in (1.0, 2.0, 5.0)] == [
        0.0,
        1000.0,
        4000.0,
    ]


def test_a_lease_is_offered_only_to_a_primary_and_the_latest_offer_wins() -> None:
    offers = LeaseOffers()
    assert offers.offer(3.0, 1.0, RoleNote("ready")) == (
        "a lease is for a primary; this broker is ready"
    )
    assert offers.offer(3.0, 1.0, RoleNote("active", fenced=True)) == "this broker is fenced"
    assert offers.take() is None
    assert offers.offer(3.0, 1.0, RoleNote("recovering")) is None
    assert offers.offer(2.5, 1.2, RoleNote("active")) is None
    assert offers.take() == (2.5, 1.2)  # with the time it was received, not when applied
    assert offers.take() is None


def test_loop_lag_windows_and_totals() -> None:
    lag = Durations()
    for seconds in (0.0002, 0.0002, 0.003, 0.150):
        lag.record(seconds)
    window = lag.window()
    assert window.count == 4 and window.max == 0.150
    assert window.p50 == 0.00025  # the bucket's upper bound
    assert window.p99 == 0.150  # the top bucket is bounded by the max seen
    assert lag.last == window
    assert lag.window().count == 0  # a new window
    assert sum(lag.total) == 4 and lag.total_max == 0.150
    assert window.as_ms() == {"samples": 4, "p50_ms": 0.25, "p99_ms": 150.0, "max_ms": 150.0}


@given(st.lists(st.floats(min_value=0.0, max_value=30.0), min_size=1, max_size=200))
def test_quantiles_are_ordered_and_the_max_is_exact(delays: list[float]) -> None:
    lag = Durations()
    for d in delays:
        lag.record(d)
    summary = lag.window()
    assert summary.count == len(delays)
    assert summary.max == max(delays)
    assert summary.p50 <= summary.p99 <= summary.max
    # p99 is never below the delay at the 99th rank's bucket lower edge
    ranked = sorted(delays)[max(0, int(0.99 * len(delays)) - 1)]
    lower = max([b for b in LAG_BOUNDS if b < ranked], default=0.0)
    assert summary.p99 >= lower


def test_an_empty_histogram_summarises_to_zeros() -> None:
    assert summarise([0] * (len(LAG_BOUNDS) + 1), 0.0).count == 0


def test_serving_on_grants_is_read_off_the_published_window() -> None:
    """The session fence's question, answered off the loop: a primary, not fenced, inside
    the window its loop last published (issue 25: a busy loop did not answer in time)."""
    window = (10.0, 12.0)
    assert serving_on_grants(RoleNote("active", 3, grants_window=window), 11.0)
    assert serving_on_grants(RoleNote("recovering", 3, grants_window=window), 10.0)
    assert not serving_on_grants(RoleNote("active", 3, grants_window=window), 9.9)  # waits
    assert not serving_on_grants(RoleNote("active", 3, grants_window=window), 12.0)  # lapsed
    assert not serving_on_grants(RoleNote("active", 3), 11.0)  # no member lease in force
    assert not serving_on_grants(RoleNote("active", 3, True, grants_window=window), 11.0)
    assert not serving_on_grants(RoleNote("ready", 3, grants_window=window), 11.0)
    progress = LoopProgress(started_at=0.0, pid=1)
    progress.progressed(10.5, RoleNote("active", 3, grants_window=window))
    assert progress.answer(11.9)["serving_on_grants"] is True
    assert progress.answer(12.5)["serving_on_grants"] is False  # the loop silent since
