"""The SUSPENDED/LOST rule: pure, with a fake clock; then against real ZooKeeper failures."""

from __future__ import annotations

import math
import threading
import time
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kazoo.protocol.states import KazooState

from common.polling import poll_until
from ha_agent.epoch_counter import next_epoch
from ha_agent.fencing import Fence, GuardState, SessionGuard, SessionWatcher
from ha_agent.primary_claim import PrimaryClaim
from ha_agent.takeover import OldPrimaryGone
from tests.agent.conftest import SESSION_TIMEOUT
from tests.zookeeper import ZooKeeperEnsemble

CONNECTED, SUSPENDED, LOST = KazooState.CONNECTED, KazooState.SUSPENDED, KazooState.LOST

# --- the pure rule, T = 3 s, margin = 0.3 s: the lease is last contact + 2.7 s -------------


def guard() -> SessionGuard:
    return SessionGuard(session_timeout=3.0)


def state_of(g: SessionGuard) -> GuardState:
    return g.state  # (a call, so that mypy does not narrow the state between steps)


def test_suspended_until_the_lease_runs_out_fences_once() -> None:
    g = guard()
    g.contact(10.0)
    assert g.deadline == pytest.approx(12.7)
    assert g.on_state(SUSPENDED, 11.0) is None
    assert state_of(g) is GuardState.SUSPENDED
    assert g.on_state(SUSPENDED, 11.5) is None  # SUSPENDED again changes nothing
    assert g.deadline == pytest.approx(12.7)
    assert g.poll(12.69) is None
    assert g.poll(12.7) == Fence("suspended_too_long", 12.7, 11.0, 10.0)
    assert state_of(g) is GuardState.FENCED and g.deadline is None
    assert g.poll(100.0) is None  # once
    assert g.on_state(LOST, 101.0) is None  # already fenced
    assert g.on_state(CONNECTED, 102.0) is None  # a session again: re-armed, lease from now
    assert state_of(g) is GuardState.CONNECTED and g.deadline == pytest.approx(104.7)
    g.on_state(SUSPENDED, 103.0)
    assert g.poll(104.7) == Fence("suspended_too_long", 104.7, 103.0, 102.0)


def test_connected_again_in_time_cancels_the_fence() -> None:
    g = guard()
    g.contact(10.0)
    g.on_state(SUSPENDED, 11.0)  # e.g. a ZooKeeper server died: the socket closed at once
    assert g.on_state(CONNECTED, 12.3) is None  # another server took the session over
    assert state_of(g) is GuardState.CONNECTED and g.suspended_at is None
    assert g.poll(12.8) is None
    assert g.deadline == pytest.approx(15.0)


def test_a_server_that_stops_answering_fences_though_kazoo_says_connected() -> None:
    g = guard()
    g.contact(10.0)
    g.contact(9.0)  # an older answer arriving late moves nothing back
    assert g.poll(12.7) == Fence("zookeeper_silent", 12.7, None, 10.0)
    g.contact(12.5)  # sent before the fence: proves nothing about now
    assert state_of(g) is GuardState.FENCED
    g.contact(12.8)  # sent after the fence and answered: the session lives, re-armed
    assert state_of(g) is GuardState.CONNECTED and g.deadline == pytest.approx(15.5)


def test_lost_fences_at_once() -> None:
    g = guard()
    g.contact(4.0)
    assert g.on_state(LOST, 5.0) == Fence("session_lost", 5.0, None, 4.0)
    assert g.on_state(LOST, 5.1) is None
    g.on_state(CONNECTED, 6.0)
    g.on_state(SUSPENDED, 7.0)
    assert g.on_state(LOST, 7.1) == Fence("session_lost", 7.1, 7.0, 6.0)


def test_suspended_before_any_contact_fences_at_once() -> None:
    g = guard()
    assert g.deadline is None and g.poll(1e9) is None
    assert g.on_state(SUSPENDED, 1.0) == Fence("no_contact", 1.0, 1.0, None)


def test_bad_settings_and_states() -> None:
    with pytest.raises(ValueError, match="session_timeout"):
        SessionGuard(0)
    with pytest.raises(ValueError, match="half"):
        SessionGuard(3.0, margin=1.5)
    with pytest.raises(ValueError, match="unknown session state"):
        guard().on_state("CONNECTING", 1.0)


events = st.lists(
    st.tuples(
        st.sampled_from([CONNECTED, SUSPENDED, LOST, "contact", "poll"]),
        st.floats(min_value=0.0, max_value=2.0),
    ),
    max_size=40,
)


@given(events)
def test_the_lease_never_outlives_the_session(steps: list[tuple[str, float]]) -> None:
    """The deadline is never later than the earliest possible expiry minus the margin; a
    poll at the deadline fences; a fenced guard fences no more until re-armed; LOST fences
    an armed guard at once."""
    g, now = guard(), 0.0
    heard = -math.inf  # the latest time the server is known to have heard us
    for kind, dt in steps:
        now += dt
        armed = state_of(g) is not GuardState.FENCED
        fence: Fence | None = None
        if kind == "contact":
            sent = now - dt / 2
            heard = max(heard, sent)
            g.contact(sent)
        elif kind == "poll":
            due = g.deadline is not None and now >= g.deadline
            fence = g.poll(now)
            assert (fence is not None) == due
        else:
            if kind == CONNECTED:
                heard = max(heard, now)
            fence = g.on_state(kind, now)
            if kind == LOST:
                assert (fence is not None) == armed
        if fence is not None:
            assert armed, "a second fence without a re-arm"
            assert state_of(g) is GuardState.FENCED
        if g.deadline is not None:
            assert g.deadline <= heard + g.session_timeout - g.margin + 1e-9
            assert g.poll(g.deadline - 1e-6) is None


# --- against real ZooKeeper ----------------------------------------------------------------


class Fences:
    def __init__(self) -> None:
        self.seen: list[tuple[Fence, float]] = []
        self.event = threading.Event()

    def __call__(self, fence: Fence) -> None:
        self.seen.append((fence, time.monotonic()))
        self.event.set()


def test_a_paused_zookeeper_fences_before_the_session_can_expire(
    own_zookeeper: Any, make_client: Any
) -> None:
    client = make_client(own_zookeeper.hosts, timeout=SESSION_TIMEOUT)
    fences = Fences()
    watcher = SessionWatcher(client, SessionGuard(SESSION_TIMEOUT), fences).start()
    try:
        poll_until(lambda: watcher.guard.last_contact is not None, 5, "a heartbeat answered")
        paused_at = time.monotonic()
        own_zookeeper.pause()  # SIGSTOP (or docker pause): silence, no connection reset
        try:
            assert fences.event.wait(SESSION_TIMEOUT * 3), "no fence"
        finally:
            own_zookeeper.resume()
        fence, fenced_at = fences.seen[0]
        assert fence.last_contact is not None
        took, since_contact = fenced_at - paused_at, fenced_at - fence.last_contact
        suspended = None if fence.suspended_at is None else fence.suspended_at - paused_at
        print(
            f"\npaused ZooKeeper: kazoo SUSPENDED after {suspended} s, fence ({fence.reason}) "
            f"after {took:.2f} s, {since_contact:.2f} s after the last contact "
            f"(session timeout {SESSION_TIMEOUT} s)"
        )
        assert fence.reason in ("suspended_too_long", "zookeeper_silent")
        # before ZooKeeper could expire the session: it heard us at the last contact
        assert since_contact < SESSION_TIMEOUT
        assert took < SESSION_TIMEOUT
        # after the resume the client comes back (with its old session or, once ZooKeeper
        # expired it, a new one); the guard re-arms and fences no more
        poll_until(lambda: watcher.guard.state is GuardState.CONNECTED, 10, "guard connected again")
        assert len(fences.seen) == 1
    finally:
        watcher.stop()


def test_an_expired_session_fences_at_once(make_client: Any) -> None:
    client = make_client()
    fences = Fences()
    watcher = SessionWatcher(client, SessionGuard(SESSION_TIMEOUT), fences).start()
    try:
        poll_until(lambda: watcher.guard.last_contact is not None, 5, "a heartbeat answered")
        # the kazoo test harness's way to expire a session: open it elsewhere and close it
        make_client(client_id=client.client_id).stop()
        assert fences.event.wait(5)
        fence, _ = fences.seen[0]
        assert fence.reason == "session_lost"
        poll_until(lambda: client.connected, 10, "a new session")
    finally:
        watcher.stop()


def test_killing_the_zookeeper_leader_fences_nobody(
    ensemble: ZooKeeperEnsemble, make_client: Any, cluster: str
) -> None:
    """With a 5 s session the ensemble re-elects and the client reconnects before the guard's
    deadline: no fence, the election's leader stays leader, writes resume."""
    print(f"3-server ensemble serving after {ensemble.started_in:.2f} s")
    timeout = 5.0  # a lease of at least 2.5 s left at the disconnect
    leader_client = make_client(ensemble.hosts, timeout=timeout)
    other_client = make_client(ensemble.hosts, timeout=timeout)
    session = leader_client.client_id[0]
    fences = Fences()
    watcher = SessionWatcher(leader_client, SessionGuard(timeout), fences).start()
    led = threading.Event()
    rule = OldPrimaryGone()

    def context() -> tuple[None, dict[str, Any]]:
        return None, {}

    a = PrimaryClaim(leader_client, cluster, "a", rule, context, led.set)
    b = PrimaryClaim(other_client, cluster, "b", rule, context, lambda: pytest.fail("b led"))
    try:
        a.contend()
        assert led.wait(5)
        b.contend()
        poll_until(lambda: a.contenders() == ["a", "b"], 5, "b contending")
        assert next_epoch(leader_client, cluster) == 1
        poll_until(lambda: watcher.guard.last_contact is not None, 5, "a heartbeat answered")

        states: list[str] = []

        def record(state: str) -> bool:
            states.append(state)
            return False

        leader_client.add_listener(record)
        zk_leader = ensemble.leader()
        killed_at = time.monotonic()
        ensemble.kill(zk_leader)  # SIGKILL by PID
        assert next_epoch(leader_client, cluster) == 2  # retried until a quorum serves again
        resumed = time.monotonic() - killed_at
        poll_until(lambda: watcher.guard.state is GuardState.CONNECTED, 10, "guard connected")
        print(
            f"ZooKeeper leader {zk_leader.myid} killed: writes resumed after {resumed:.2f} s, "
            f"client states {states}"
        )
        assert SUSPENDED in states  # the client did lose its connection
        assert LOST not in states and fences.seen == []
        assert leader_client.client_id[0] == session
        assert a.leading and a.contenders() == ["a", "b"]
    finally:
        watcher.stop()
        b.cancel()
        a.cancel()
