"""Issue 10, item 4: the agent acts only on a broker view at least as fresh as the cluster
view it combines it with, and the watchdog counts a restarted broker's silence only once it
has answered. Pure rules (ha_agent.promotion.stale_view and decide,
ha_agent.watchdog.BrokerWatch), no ZooKeeper, no broker."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ha_agent.promotion import BrokerView, ClusterView, PrimaryRecord, Step, decide, stale_view
from ha_agent.watchdog import BrokerWatch

LEADERSHIPS = ["idle", "contending", "leading", "resigning"]
STATES = ["joining", "catch-up", "ready", "recovering", "active"]


def view(state: str | None, **kw: object) -> ClusterView:
    broker = None if state is None else BrokerView(state, epoch=1)
    return ClusterView(node="n1", broker=broker, **kw)  # type: ignore[arg-type]


# The view of the defect: the broker read active before the cut (t=10), ZooKeeper
# reconnected after the healed partition (t=30) and names qc primary.
HEALED = view("active", primary=PrimaryRecord("qc", 2), broker_read_at=10.0, connected_at=30.0)


@pytest.mark.parametrize(
    ("read_at", "connected_at", "reset_at", "stale"),
    [
        (None, 30.0, 20.0, False),  # unknown read time: no constraint (older callers)
        (10.0, None, None, False),
        (31.0, 30.0, None, False),  # read after the reconnection
        (30.0, 30.0, 30.0, False),  # at the same instant: not before
        (10.0, 30.0, None, True),  # read before the reconnection: a partition may lie between
        (10.0, None, 20.0, True),  # read before the broker was killed or exited
        (25.0, 20.0, 26.0, True),
        (27.0, 20.0, 26.0, False),
    ],
)
def test_a_broker_view_read_before_a_reconnection_or_a_kill_is_stale(
    read_at: float | None, connected_at: float | None, reset_at: float | None, stale: bool
) -> None:
    v = view("ready", broker_read_at=read_at, connected_at=connected_at, broker_reset_at=reset_at)
    assert bool(stale_view(v)) is stale
    assert (decide(v).steps == (Step.RECHECK,)) is stale


def test_a_stale_primary_view_is_checked_again_not_fenced_when_zookeeper_names_another() -> None:
    decision = decide(HEALED)
    assert decision.steps == (Step.RECHECK,)
    assert "before the ZooKeeper connection" in decision.actions[0].reason
    # Read again, fresh: the broker came back a ready backup, which is not fenced; still
    # primary (the session fence did not reach it), it is.
    again = view("ready", primary=PrimaryRecord("qc", 2), broker_read_at=31.0, connected_at=30.0)
    assert Step.FENCE not in decide(again).steps
    fresh = view("active", primary=PrimaryRecord("qc", 2), broker_read_at=31.0, connected_at=30.0)
    assert decide(fresh).steps == (Step.FENCE,)


@given(
    st.sampled_from([None, *STATES]),
    st.sampled_from(LEADERSHIPS),
    st.booleans(),
    st.booleans(),
    st.floats(0, 100),
    st.floats(0, 100),
    st.floats(0, 100),
    st.floats(0, 100),
)
def test_no_action_but_a_recheck_on_a_stale_view_and_a_fresh_view_never_rechecks(
    state: str | None,
    leadership: str,
    session_ok: bool,
    promoted: bool,
    read_at: float,
    connected_at: float,
    reset_at: float,
    silent: float,
) -> None:
    v = view(
        state,
        leadership=leadership,
        session_ok=session_ok,
        promoted=promoted,
        primary=PrimaryRecord("qc", 2),
        broker_silent_for=silent,
        watchdog_timeout=1.0,
        broker_read_at=read_at,
        connected_at=connected_at,
        broker_reset_at=reset_at,
    )
    steps = decide(v).steps
    if read_at < connected_at or read_at < reset_at:
        assert steps == (Step.RECHECK,)  # no fence, no kill, no promotion on a stale view
    else:
        assert Step.RECHECK not in steps


def test_cluster_records_read_before_a_reconnection_decide_nothing_until_read_again() -> None:
    """Issue 26: ZooKeeper back after an outage, the agent's reads failed meanwhile, so its
    records are those from before (no primary record then gone, a set since changed): it
    neither contends nor promotes nor fences on them; read again over the new connection,
    it decides."""
    before = view(
        "ready", broker_read_at=31.0, connected_at=30.0, cluster_read_at=12.0, leadership="leading"
    )
    decision = decide(before)
    assert decision.steps == ()
    assert "cluster was read 18.000 s before the ZooKeeper connection" in decision.eligibility
    assert decide(replace(before, cluster_read_at=31.0)).steps == (Step.PROMOTE, Step.TAKE_VIP)
    # never read yet (the agent starts at -inf): stale once connected; unknown: no constraint
    assert decide(replace(before, cluster_read_at=float("-inf"))).steps == ()
    assert decide(replace(before, cluster_read_at=None)).steps == (Step.PROMOTE, Step.TAKE_VIP)
    # the session and the broker's own answer still decide alone: a leader fences
    assert decide(replace(before, session_ok=False, broker=BrokerView("active"))).steps == (
        Step.FENCE,
    )
    assert decide(replace(before, broker=None)).steps == (Step.FENCE,)


@given(
    st.sampled_from([None, *STATES]),
    st.sampled_from(LEADERSHIPS),
    st.booleans(),
    st.booleans(),
    st.floats(0, 100),
    st.floats(0, 100),
)
def test_a_stale_cluster_view_never_contends_promotes_or_fences_a_live_broker(
    state: str | None,
    leadership: str,
    session_ok: bool,
    promoted: bool,
    cluster_read_at: float,
    connected_at: float,
) -> None:
    v = view(
        state,
        leadership=leadership,
        session_ok=session_ok,
        promoted=promoted,
        primary=PrimaryRecord("qc", 2),
        broker_read_at=100.0,
        connected_at=connected_at,
        cluster_read_at=cluster_read_at,
    )
    steps = decide(v).steps
    if cluster_read_at < connected_at and session_ok and state is not None:
        assert steps == ()
    else:
        assert Step.RECHECK not in steps


# --- the watchdog's record (BrokerWatch) ------------------------------------------------


def test_a_killed_broker_is_silent_for_nothing_until_its_successor_answers() -> None:
    watch = BrokerWatch()
    assert watch.silent_for(5.0) == 0.0  # never answered: a broker still starting
    assert watch.answered(1.0, 1.1)
    assert watch.silent_for(19.3) == pytest.approx(18.2)  # the defect's "silent for 18.2 s"
    watch.reset(19.3)  # the fence killed it
    assert watch.silent_for(19.35) == 0.0  # the restarted broker, 50 ms old, is not hung
    assert watch.silent_for(60.0) == 0.0  # nor later, as long as it never answered
    assert watch.answered(20.0, 20.1)
    assert watch.silent_for(25.1) == pytest.approx(5.0)  # once it answered, silence counts


def test_an_answer_to_a_check_sent_before_the_kill_does_not_count() -> None:
    watch = BrokerWatch()
    watch.reset(10.0)
    assert not watch.answered(9.9, 10.2)  # maybe the killed broker's answer
    assert watch.silent_for(30.0) == 0.0
    watch.reset(5.0)  # an older reset changes nothing
    assert watch.reset_at == 10.0


@given(st.lists(st.tuples(st.sampled_from(["answer", "reset"]), st.floats(0, 10)), max_size=20))
def test_silence_never_counts_from_before_the_last_reset(events: list[tuple[str, float]]) -> None:
    watch, now = BrokerWatch(), 0.0
    for kind, step in events:
        now += step
        if kind == "reset":
            watch.reset(now)
        else:
            watch.answered(now, now)
        if watch.reset_at is not None:
            assert watch.silent_for(now + 100.0) <= 100.0 + now - watch.reset_at
