"""The choice that spreads several clusters' primaries over their nodes (ha_agent.spread):
it only ever orders candidates the rules already allow, and prefers the least loaded."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from ha_agent import primary_claim
from ha_agent.agent_status import AgentStatus, StatusPublisher
from ha_agent.cluster_records import BrokerView, InSyncMember, InSyncRecord, most_advanced, rank
from ha_agent.in_sync import VersionedInSync
from ha_agent.membership import Member
from ha_agent.node_loads import spread_hold
from ha_agent.primary_claim import Leadership, PrimaryClaim
from ha_agent.primary_record import delete_primary, write_primary
from ha_agent.promotion import ClusterView, PrimaryRecord, eligibility
from ha_agent.spread import (
    fresh_choice,
    least_loaded,
    node_loads,
    safe_candidates,
    yield_to,
)
from ha_agent.takeover import OldPrimaryGone
from ha_agent.zk_layout import ClusterLayout

NODES = ["n1", "n2", "n3", "n4"]
nodes = st.sampled_from(NODES)
loads_of = st.dictionaries(nodes, st.integers(0, 3))
STATES = ["ready", "joining", "catch-up", "down", "active"]


@st.composite
def member_sets(draw: st.DrawFn) -> dict[str, Member]:
    names = draw(st.lists(nodes, unique=True, max_size=4))
    return {
        n: Member(
            n,
            f"amqp://{n}",
            ha_state=draw(st.sampled_from(STATES)),
            epoch=draw(st.integers(0, 2)),
            store_status=draw(st.sampled_from(["empty", "clean", "dirty"])),
            replication_position=draw(st.integers(0, 2)),
            broker_id=draw(st.sampled_from(["", f"id-{n}", f"old-{n}"])),
        )
        for n in names
    }


def in_sync_of(ids: list[str]) -> InSyncRecord:
    return InSyncRecord(3, tuple(InSyncMember(i, i.split("-")[-1]) for i in ids))


records = st.one_of(
    st.none(), st.lists(st.sampled_from([f"id-{n}" for n in NODES]), unique=True).map(in_sync_of)
)


def test_node_loads_count_each_clusters_primary_node() -> None:
    assert node_loads({"a": "n1", "b": "n1", "c": "n2", "d": None}) == {"n1": 2, "n2": 1}


@given(st.lists(nodes), loads_of)
def test_least_loaded_is_the_minimum_among_the_candidates(
    cands: list[str], loads: dict[str, int]
) -> None:
    low = least_loaded(cands, loads)
    assert low <= set(cands)
    assert bool(low) == bool(cands)
    for node in cands:
        assert (node in low) == (loads.get(node, 0) == min(loads.get(c, 0) for c in cands))


@given(member_sets(), records)
@example({}, None)
def test_safe_candidates_are_what_eligibility_allows_a_ready_backup(
    members: dict[str, Member], record: InSyncRecord | None
) -> None:
    """Every node the spread may pick is one whose own agent's rules make eligible."""
    for node in safe_candidates(members, record):
        m = members[node]
        broker = BrokerView("ready", broker_id=m.broker_id)
        view = ClusterView(node=node, broker=broker, members=members, in_sync=record)
        assert eligibility(view)[0], (node, eligibility(view))


@given(nodes, st.frozensets(nodes), loads_of, st.frozensets(nodes))
@example("n1", frozenset({"n1", "n2"}), {"n1": 1}, frozenset({"n2"}))
@example("n1", frozenset({"n1", "n2"}), {"n1": 1}, frozenset())
@example("n1", frozenset({"n1", "n2"}), {"n1": 1, "n2": 1}, frozenset({"n2"}))
def test_yield_only_to_a_trying_safe_candidate_on_a_less_loaded_node(
    node: str, cands: frozenset[str], loads: dict[str, int], claiming: frozenset[str]
) -> None:
    first = yield_to(node, cands, loads, claiming)
    if first is None:
        # it tries: it is not a candidate (the rules decide), or on a least loaded node,
        # or no less loaded candidate is trying (nobody waits for an idle one)
        low = least_loaded(cands, loads)
        assert node not in cands or node in low or not (low & claiming)
        return
    assert first in cands and first in claiming and first != node
    assert loads.get(first, 0) < loads.get(node, 0)
    assert loads.get(first, 0) == min(loads.get(c, 0) for c in cands)
    # the one it lets go first never lets anyone go first (with the same loads): no stall
    assert yield_to(first, cands, loads, claiming | {node}) is None


@given(member_sets(), loads_of)
@example({}, {})
def test_fresh_choice_is_among_the_most_advanced_and_the_least_loaded_of_them(
    members: dict[str, Member], loads: dict[str, int]
) -> None:
    choice = fresh_choice(members, loads)
    best = most_advanced(members)
    if best is None:
        assert choice is None
        return
    assert choice is not None
    # never a less advanced member than the rule's (same epoch, position, store status)
    assert rank(choice)[:3] == rank(best)[:3]
    tied = [m for m in members.values() if rank(m)[:3] == rank(best)[:3]]
    assert loads.get(choice.node, 0) == min(loads.get(m.node, 0) for m in tied)
    assert fresh_choice(members, {}) == best  # no loads read: the rule as before


def test_fresh_choice_spreads_new_clusters_over_three_nodes() -> None:
    members = {n: Member(n, f"amqp://{n}", ha_state="joining") for n in ["n1", "n2", "n3"]}
    loads: dict[str, int] = {}
    chosen = []
    for _cluster in range(3):
        choice = fresh_choice(members, loads)
        assert choice is not None
        chosen.append(choice.node)
        loads[choice.node] = loads.get(choice.node, 0) + 1
    assert chosen == ["n1", "n2", "n3"]


def _two_ready_b_contending(
    zk: Any, cluster: str, a: str, b: str
) -> tuple[InSyncRecord, dict[str, Member], StatusPublisher]:
    """Nodes ``a`` and ``b``, ready backups of the in-sync set (epoch 3; broker ids
    ``id-a`` and ``id-b``), and ``b``'s agent status published as contending."""
    in_sync = InSyncRecord(3, (InSyncMember("id-a", a), InSyncMember("id-b", b)))
    members = {
        n: Member(n, f"amqp://{n}", ha_state="ready", epoch=3, broker_id=f"id-{n[-1]}")
        for n in (a, b)
    }
    b_status = StatusPublisher(zk, cluster, b)
    b_status.publish(AgentStatus(b, claim="contending"))
    return in_sync, members, b_status


def test_a_claim_on_a_busier_node_lets_a_trying_one_go_first(
    zk: Any, cluster: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Against a real ZooKeeper: two ready backups of the in-sync set, n-a running another
    cluster's primary: n-a's claim (the rule allows: no primary) does not lead while n-b's
    agent says it is contending, and leads at once when n-b stops trying (its status
    record's watch wakes it), never waiting for an idle n-b."""
    monkeypatch.setattr(primary_claim, "RECHECK", 60.0)  # only a watch wakes it in time
    other = f"{cluster}-other"
    write_primary(zk, other, PrimaryRecord("n-a", 1, "amqp://a"))
    in_sync, members, b_status = _two_ready_b_contending(zk, cluster, "n-a", "n-b")
    led = threading.Event()
    claim = PrimaryClaim(
        zk,
        cluster,
        "n-a",
        OldPrimaryGone(),
        lambda: (VersionedInSync(in_sync, 0, 2), members),
        led.set,
    )
    try:
        # under kazoo's lock (a cluster in ZooKeeper format 1) it never lets anyone go
        # first: the one it would wait for waits for its lock
        claim.contend(lock=True)
        assert led.wait(20)
        assert claim.cancel()
        led.clear()
        claim.contend(lock=False)
        assert not led.wait(1.5)  # n-b goes first while it tries
        assert claim.state is Leadership.CONTENDING
        b_status.publish(AgentStatus("n-b", claim="idle"))
        assert led.wait(20)  # woken by the watch on n-b's record, not the recheck
    finally:
        claim.cancel()
        delete_primary(zk, other)


class _ReadLog:
    """The real client, with the paths it was asked to list or read recorded."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.paths: list[str] = []

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.client, name)
        if name not in ("get", "get_async", "get_children", "exists"):
            return method

        def recorded(path: str, *args: Any, **kwargs: Any) -> Any:
            self.paths.append(path)
            return method(path, *args, **kwargs)

        return recorded


def test_a_claim_on_a_least_loaded_node_reads_no_agent_status(zk: Any, cluster: str) -> None:
    """Against a real ZooKeeper: the spread's look on the takeover's path reads the other
    clusters' primaries first; a candidate on a node running no fewer primaries than any
    other candidate's tries at once, without reading the agents' status records (another
    candidate contending changes nothing), and the one on a busier node reads them."""
    in_sync, members, _ = _two_ready_b_contending(zk, cluster, "solo-a", "solo-b")
    reads = _ReadLog(zk)
    assert spread_hold(reads, cluster, "solo-a", in_sync, members) is None
    agents = ClusterLayout(cluster).agents
    assert reads.paths and not [p for p in reads.paths if p.startswith(agents)]
    other = f"{cluster}-other"
    write_primary(zk, other, PrimaryRecord("solo-a", 1, "amqp://a"))
    try:
        assert spread_hold(reads, cluster, "solo-a", in_sync, members) == "solo-b"
        assert [p for p in reads.paths if p.startswith(agents)]
    finally:
        delete_primary(zk, other)
