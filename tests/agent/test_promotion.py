"""The agent's promotion rules (ha_agent.promotion), without ZooKeeper or brokers."""

from __future__ import annotations

import socket
import subprocess
import sys
import urllib.error
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.management.client import ManagementError
from ha_agent.broker_check import BrokerCheck, broker_view, liveness_view, timed_out
from ha_agent.membership import Member
from ha_agent.promotion import (
    BrokerView,
    ClusterView,
    InSyncMember,
    InSyncRecord,
    PrimaryRecord,
    Step,
    decide,
    most_advanced,
    rank,
)
from ha_agent.supervisor import restart_delay
from ha_agent.vip import parse_vip

STATES = ["joining", "catch-up", "ready", "recovering", "active", "down"]


def member(node: str, state: str = "joining", epoch: int = 0, position: int = 0, store="unknown"):
    return Member(node, f"{node}:5672", state, epoch, store, position)


def view(state: str | None, **kw) -> ClusterView:
    broker = None if state is None else BrokerView(state, epoch=kw.pop("epoch", 1))
    return ClusterView(node="n1", broker=broker, **kw)


def test_a_ready_backup_contends_and_promotes_when_it_wins() -> None:
    assert decide(view("ready")).steps == (Step.CONTEND,)
    assert decide(view("ready", leadership="contending")).steps == ()
    assert decide(view("ready", leadership="leading")).steps == (Step.PROMOTE, Step.TAKE_VIP)


def test_a_backup_in_catch_up_never_contends_and_resigns_if_it_won() -> None:
    assert decide(view("catch-up")).steps == ()
    assert decide(view("catch-up", leadership="contending")).steps == (Step.WITHDRAW,)
    decision = decide(view("catch-up", leadership="leading"))
    assert decision.steps == (Step.WITHDRAW,)
    assert "still catching up" in decision.actions[0].reason


def test_a_leader_whose_broker_stops_answering_fences() -> None:
    decision = decide(view(None, leadership="leading", promoted=True))
    assert decision.steps == (Step.FENCE,)
    assert decide(view(None, leadership="contending")).steps == (Step.WITHDRAW,)


def test_the_watchdog_kills_a_broker_silent_too_long() -> None:
    quiet = view(None, broker_silent_for=3.0, watchdog_timeout=5.0)
    assert decide(quiet).steps == ()
    silent = view(None, broker_silent_for=5.0, watchdog_timeout=5.0)
    assert decide(silent).steps == (Step.KILL_BROKER,)
    assert decide(view(None, broker_silent_for=99.0, watchdog_timeout=0)).steps == ()


def test_a_session_in_doubt_fences_a_primary_and_withdraws_a_contender() -> None:
    assert decide(view("active", leadership="leading", session_ok=False)).steps == (Step.FENCE,)
    assert decide(view("ready", leadership="contending", session_ok=False)).steps == (
        Step.WITHDRAW,
    )
    assert decide(view("ready", session_ok=False)).steps == ()


def test_a_primary_on_its_members_grants_is_not_fenced_for_zookeepers_loss_alone() -> None:
    """Issue 26, item 2: its lease ends with the agent's; it serves on every member's
    grant and fences itself at the first lapse. A broker that is not on grants is fenced."""
    on_grants = ClusterView(
        node="n1",
        broker=BrokerView("active", epoch=1, on_grants=True),
        leadership="leading",
        session_ok=False,
    )
    assert decide(on_grants).steps == ()
    assert "members' grants" in decide(on_grants).eligibility
    assert decide(view("active", leadership="leading", session_ok=False)).steps == (Step.FENCE,)


def test_broker_view_reads_whether_the_primary_may_serve_on_grants() -> None:
    lease = {"enabled": True, "members": {"b2": 0.5}, "fenced": False}
    status = {"ha_state": "active", "pid": 42}
    assert broker_view(status, {"epoch": 3, "member_lease": lease}).on_grants
    for odd in ({**lease, "enabled": False}, {**lease, "members": {}}, {**lease, "fenced": True}):
        assert not broker_view(status, {"epoch": 3, "member_lease": odd}).on_grants, odd
    assert not broker_view(status, {"epoch": 3}).on_grants  # a broker that does not say
    backup = broker_view({"ha_state": "ready"}, {"epoch": 3, "member_lease": lease})
    assert not backup.on_grants


def test_a_broker_that_fenced_itself_is_no_primary_whatever_its_state_says() -> None:
    """Issue 26: a primary that fenced itself (a member's grant lapsed during a ZooKeeper
    outage) still answers "active" while it stops. Its agent, its session lost at the
    resume (idle, no primary record), contended on that answer, won and took an epoch with
    an empty set naming the fenced store: a minute of churn. It never contends now; a
    leader that promoted it fences it and resigns; a contender withdraws."""
    in_sync = InSyncRecord(1, (InSyncMember("b2", "n2"), InSyncMember("b3", "n3")))
    fenced = BrokerView("active", epoch=1, fenced=True)
    assert not fenced.is_primary and fenced.state_named == "fenced"
    after_the_resume = ClusterView(node="n1", broker=fenced, in_sync=in_sync)
    decision = decide(after_the_resume)
    assert decision.steps == ()
    assert "fenced itself" in decision.eligibility
    contending = replace(after_the_resume, leadership="contending")
    assert decide(contending).steps == (Step.WITHDRAW,)
    won = replace(after_the_resume, leadership="leading")
    assert decide(won).steps == (Step.WITHDRAW,)  # never PROMOTE
    promoted = replace(won, promoted=True, primary=PrimaryRecord("n1", 1))
    decision = decide(promoted)
    assert decision.steps == (Step.FENCE,)
    assert "fenced" in decision.actions[0].reason
    # the session in doubt: no longer on grants, so a leader fences it, an idle agent waits
    assert decide(replace(promoted, session_ok=False)).steps == (Step.FENCE,)
    assert decide(replace(after_the_resume, session_ok=False)).steps == ()
    # a backup's agent beside it still contends (the set's member, no primary record)
    backup = ClusterView(node="n2", broker=BrokerView("ready", broker_id="b2"), in_sync=in_sync)
    assert decide(backup).steps == (Step.CONTEND,)


def test_broker_view_and_liveness_read_whether_the_broker_fenced_itself() -> None:
    lease = {"enabled": True, "members": {"b2": 0.5}, "fenced": True}
    fenced = broker_view({"ha_state": "active", "pid": 42}, {"epoch": 3, "member_lease": lease})
    assert fenced.fenced and not fenced.is_primary and not fenced.on_grants
    serving = broker_view({"ha_state": "active"}, {"member_lease": {**lease, "fenced": False}})
    assert not serving.fenced and serving.is_primary
    assert broker_view({"ha_state": "active"}, {"epoch": 3}).is_primary  # does not say
    answer = {"alive": True, "last_progress_ms": 5, "ha_state": "active", "pid": 7}
    live = liveness_view({**answer, "fenced": True})
    assert live is not None and not live.is_primary
    old = liveness_view(answer)  # a broker that does not say
    assert old is not None and old.is_primary


def test_a_primary_broker_fenced_when_zookeeper_names_another_primary() -> None:
    other = PrimaryRecord("n2", 5)
    decision = decide(view("active", primary=other))
    assert decision.steps == (Step.FENCE,)
    assert "n2" in decision.actions[0].reason
    # its own record, or none: it contends to keep (or take back) its leadership
    assert decide(view("active", primary=PrimaryRecord("n1", 5))).steps == (Step.CONTEND,)
    assert decide(view("active")).steps == (Step.CONTEND,)
    # just promoted at epoch 2, the record still names the old primary at epoch 1: this
    # agent's record write has not been read back yet; fencing here killed the new primary
    stale = PrimaryRecord("n3", 1)
    just_promoted = view("recovering", epoch=2, primary=stale, leadership="leading")
    assert Step.FENCE not in decide(just_promoted).steps
    # the same epoch or newer on another node: fenced
    for epoch in (2, 3):
        newer = view("active", epoch=2, primary=PrimaryRecord("n3", epoch), leadership="leading")
        assert decide(newer).steps == (Step.FENCE,)


def test_a_new_cluster_waits_for_its_members_then_only_the_most_advanced_contends() -> None:
    two = {"n1": member("n1"), "n2": member("n2")}
    waiting = decide(view("joining", members=two, cluster_size=3))
    assert waiting.steps == () and "waiting for 3 members, 2 present" in waiting.eligibility
    three = {**two, "n3": member("n3", epoch=2)}
    decision = decide(view("joining", members=three, cluster_size=3))
    assert decision.steps == () and "n3 is the most advanced" in decision.eligibility
    three["n1"] = member("n1", epoch=2, position=10)
    assert decide(view("joining", members=three, cluster_size=3)).steps == (Step.CONTEND,)


def test_a_joining_broker_never_contends_beside_a_primary_or_a_busy_member() -> None:
    members = {"n1": member("n1"), "n2": member("n2", "ready")}
    assert decide(view("joining", members=members, cluster_size=2)).steps == ()
    members = {"n1": member("n1"), "n2": member("n2")}
    recorded = view("joining", members=members, cluster_size=2, primary=PrimaryRecord("n2", 1))
    assert decide(recorded).steps == ()


def test_a_promoted_broker_that_restarted_as_a_backup_is_fenced() -> None:
    decision = decide(view("joining", leadership="leading", promoted=True))
    assert decision.steps == (Step.FENCE,)


members_st = st.dictionaries(
    st.sampled_from(["n1", "n2", "n3", "n4", "n5"]),
    st.tuples(
        st.sampled_from(STATES),
        st.integers(0, 5),
        st.integers(0, 100),
        st.sampled_from(["clean", "dirty", "empty", "unknown"]),
    ),
    min_size=1,
)


def build(records: dict[str, tuple[str, int, int, str]]) -> dict[str, Member]:
    return {n: member(n, s, e, p, store) for n, (s, e, p, store) in records.items()}


@given(members_st, st.integers(1, 5))
def test_at_most_one_joining_member_contends_in_a_new_cluster(records, size) -> None:
    """Every agent computes the same winner: never two contenders, never a laggard."""
    members = build(records)
    contenders = []
    for name, m in members.items():
        v = ClusterView(
            node=name,
            broker=BrokerView(m.ha_state, m.epoch) if m.ha_state != "down" else None,
            members=members,
            cluster_size=size,
        )
        if m.ha_state == "joining" and Step.CONTEND in decide(v).steps:
            contenders.append(m)
    assert len(contenders) <= 1
    if contenders:
        best = contenders[0]
        assert all(rank(best) >= rank(m) for m in members.values())
        assert best.epoch == max(m.epoch for m in members.values())


@given(members_st, st.integers(1, 5), st.frozensets(st.sampled_from(["n1", "n2", "n3"])))
def test_with_a_recorded_set_at_most_one_member_contends_after_total_failure(
    records, size, recorded
) -> None:
    """The in-sync set only narrows the new-cluster rule: never two joining contenders, and
    none while a live member's broker is in the set (ids here: the node names)."""
    members = {n: replace(m, broker_id=n) for n, m in build(records).items()}
    record = InSyncRecord(2, tuple(InSyncMember(i) for i in sorted(recorded)))
    contenders = []
    for name, m in members.items():
        v = ClusterView(
            node=name,
            broker=BrokerView(m.ha_state, m.epoch, broker_id=name),
            members=members,
            cluster_size=size,
            in_sync=record,
        )
        if m.ha_state == "joining" and Step.CONTEND in decide(v).steps:
            contenders.append(m)
    assert len(contenders) <= 1
    if contenders:
        assert not recorded & set(members)


@given(members_st)
def test_most_advanced_prefers_epoch_then_position_then_a_clean_store(records) -> None:
    members = build(records)
    best = most_advanced(members)
    assert best is not None
    for m in members.values():
        assert (m.epoch, m.replication_position) <= (best.epoch, best.replication_position)
        if (m.epoch, m.replication_position) == (best.epoch, best.replication_position):
            assert not (best.store_status == "dirty" and m.store_status == "clean")


@given(st.sampled_from(["idle", "contending", "leading"]), st.booleans())
def test_a_broker_in_catch_up_is_never_promoted(leadership, promoted) -> None:
    decision = decide(view("catch-up", leadership=leadership, promoted=promoted))
    assert Step.PROMOTE not in decision.steps and Step.CONTEND not in decision.steps


def test_broker_view_reads_state_epoch_position_and_pid() -> None:
    status = {"ha_state": "ready", "pid": 42}
    ha = {"epoch": 3, "url": "127.0.0.1:5672", "queues": [{"last_id": 5}, {"last_id": 7}]}
    assert broker_view(status, ha) == BrokerView(
        "ready",
        3,
        12,
        "unknown",
        42,
        "127.0.0.1:5672",
        link_up=False,  # no "primary": down
    )
    odd = broker_view({"ha_state": "joining", "pid": True}, {"epoch": -1, "queues": [1]})
    assert odd == BrokerView("joining")
    # a broker that sums its position (GET /api/ha?queues=summary) is read by that sum
    summed = broker_view(status, {"epoch": 3, "replication_position": 12})
    assert summed.replication_position == 12
    assert broker_view(status, {"replication_position": -4}).replication_position == 0


def test_restart_back_off_doubles_up_to_the_maximum() -> None:
    assert [restart_delay(n, 0.1, 1.0) for n in range(6)] == [0.0, 0.1, 0.2, 0.4, 0.8, 1.0]


def test_bad_virtual_ip_names_the_value() -> None:
    assert str(parse_vip("10.77.0.100/24")) == "10.77.0.100/24"
    for bad in ("10.77.0.100", "nonsense/24", "10.0.0.1/99"):
        with pytest.raises(ValueError, match="bad virtual IP"):
            parse_vip(bad)


AGENT = str(Path(sys.executable).with_name("qpid-ha-agent"))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cluster", "a/b"], "bad cluster name 'a/b'"),
        (["--node", ".."], "bad node name '..'"),
        (["--session-timeout", "0.1"], "--session-timeout must be 1 to 60 s"),
        (["--check-interval", "3"], "--check-interval must be positive"),
        (["--cluster-size", "0"], "--cluster-size must be at least 1"),
        (["--vip", "10.0.0.1", "--vip-interface", "eth0"], "bad virtual IP '10.0.0.1'"),
        (["--vip", "10.0.0.1/24"], "--vip and --vip-interface go together"),
        (["--broker", "a:b:c:d"], "broker"),
        (["--session-timeout", "soon"], "Invalid value for '--session-timeout'"),
    ],
)
def test_bad_agent_options_exit_2_with_a_message_naming_the_value(args, message) -> None:
    base = {"--zk": "127.0.0.1:1", "--cluster": "c", "--node": "n1", "--broker": "h:8672"}
    for name, value in zip(args[::2], args[1::2], strict=True):
        base[name] = value
    argv = [AGENT, *[part for item in base.items() for part in item]]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_a_leader_gives_a_slow_broker_the_broker_timeout_before_it_fences() -> None:
    """A check that timed out is a slow broker until --broker-timeout from its last answer;
    a refused one (gone), one never answered since a restart, or no timeout fence at once."""
    slow = dict(leadership="leading", promoted=True, broker_timed_out=True, broker_timeout=2.0)
    waiting = decide(view(None, broker_silent_for=0.5, **slow))
    assert waiting.steps == ()
    assert "slow: silent for 0.5 s of --broker-timeout 2 s" in waiting.eligibility
    assert decide(view(None, broker_silent_for=2.0, **slow)).steps == (Step.FENCE,)
    assert decide(view(None, broker_silent_for=0.0, **slow)).steps == (Step.FENCE,)
    refused = {**slow, "broker_timed_out": False}
    assert decide(view(None, broker_silent_for=0.5, **refused)).steps == (Step.FENCE,)
    no_patience = {**slow, "broker_timeout": 0.0}
    assert decide(view(None, broker_silent_for=0.5, **no_patience)).steps == (Step.FENCE,)
    # a contender still withdraws at once: it must not win with a broker that does not answer
    contending = {**slow, "leadership": "contending", "promoted": False}
    assert decide(view(None, broker_silent_for=0.5, **contending)).steps == (Step.WITHDRAW,)


@given(
    silent=st.floats(min_value=0, max_value=100, allow_nan=False),
    timeout=st.floats(min_value=0, max_value=60, allow_nan=False),
    timed_out=st.booleans(),
)
def test_a_slow_broker_is_fenced_no_later_than_the_broker_timeout(
    silent: float, timeout: float, timed_out: bool
) -> None:
    decision = decide(
        view(
            None,
            leadership="leading",
            promoted=True,
            broker_silent_for=silent,
            broker_timed_out=timed_out,
            broker_timeout=timeout,
        )
    )
    waits = Step.FENCE not in decision.steps
    assert waits == (timed_out and 0 < silent < timeout)


def test_timed_out_tells_a_slow_broker_from_a_gone_one() -> None:
    def failure(cause: BaseException) -> ManagementError:
        try:
            raise ManagementError("cannot reach broker") from cause
        except ManagementError as exc:
            return exc

    assert timed_out(failure(TimeoutError("timed out")))
    assert timed_out(failure(urllib.error.URLError(TimeoutError("timed out"))))
    assert not timed_out(failure(ConnectionRefusedError(111, "refused")))
    assert not timed_out(failure(urllib.error.URLError(ConnectionRefusedError(111, "refused"))))
    assert not timed_out(ManagementError("answered HTTP 500", status=500))
    # a real refused port: nothing listens there
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    check = BrokerCheck(f"127.0.0.1:{port}", timeout=1.0)
    assert check.check() is None and not check.last_timed_out
    # a real listener that never answers: the check times out
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        silent = BrokerCheck(f"127.0.0.1:{listener.getsockname()[1]}", timeout=0.3)
        assert silent.check() is None and silent.last_timed_out
