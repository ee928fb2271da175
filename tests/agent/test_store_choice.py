"""The choice after the in-sync set (issue 25, item 3), sans I/O: every agent decides over
the same records; a store the last committed record does not name is never promoted, and
the store chosen holds every confirmed message, whatever the other brokers' states."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ha_agent.membership import Member
from ha_agent.promotion import (
    BrokerView,
    ClusterView,
    InSyncMember,
    InSyncRecord,
    PrimaryRecord,
    Step,
    decide,
)
from ha_agent.store_choice import choose_store

NODES = ("n1", "n2", "n3", "n4")
STATES = ("joining", "catch-up", "ready", "down")


def member(node: str, state: str, broker_id: str, epoch: int, position: int) -> Member:
    return Member(
        node=node,
        broker_url=f"127.0.0.1:{NODES.index(node) + 5000}",
        ha_state=state,
        epoch=epoch,
        store_status="clean",
        replication_position=position,
        broker_id="" if state == "down" else broker_id,
        store_id="" if state == "down" else f"s-{node}",
    )


node_st = st.tuples(
    st.sampled_from(STATES),
    st.booleans(),  # the same broker instance as the record names (else restarted)
    st.integers(2, 3),  # epoch
    st.integers(0, 5),  # position
    st.frozensets(st.integers(1, 8)),  # the messages its store holds beyond the confirmed
)


@given(
    nodes=st.dictionaries(st.sampled_from(NODES), node_st, min_size=1),
    primary=st.sampled_from(NODES),
    in_set=st.frozensets(st.sampled_from(NODES)),
    confirmed=st.frozensets(st.integers(1, 8)),
)
def test_only_a_named_store_is_promoted_and_it_holds_every_confirmed_message(
    nodes: dict[str, tuple[str, bool, int, int, frozenset[int]]],
    primary: str,
    in_set: frozenset[str],
    confirmed: frozenset[int],
) -> None:
    in_set = in_set - {primary}
    record = InSyncRecord(
        3,
        tuple(InSyncMember(f"b-{n}", n, "", f"s-{n}") for n in sorted(in_set)),
        primary_store_id=f"s-{primary}",
        primary_node=primary,
    )
    named = {primary, *in_set}
    members: dict[str, Member] = {}
    holds: dict[str, frozenset[int]] = {}
    for node, (state, same, epoch, position, extra) in nodes.items():
        # an instance the record names is one that never restarted: never joining
        same = same and node in in_set and state in ("ready", "catch-up")
        broker_id = f"b-{node}" if same else f"new-{node}"
        members[node] = member(node, state, broker_id, epoch, position)
        # a named store holds every confirmed message (each confirm waited for it)
        holds[node] = extra | confirmed if node in named else extra
    contenders = []
    for node, m in members.items():
        broker = (
            None
            if m.ha_state == "down"
            else BrokerView(
                m.ha_state,
                m.epoch,
                m.replication_position,
                "clean",
                broker_id=m.broker_id,
                store_id=m.store_id,
            )
        )
        view = ClusterView(node, broker, members, in_sync=record, cluster_size=len(NODES))
        steps = decide(view).steps
        if steps == (Step.CONTEND,):
            contenders.append(node)
        if Step.RESTART_BROKER in steps:  # only a named store stuck in catch-up
            assert node in named and m.ha_state == "catch-up"
    for node in contenders:
        assert node in named, f"{node}'s store is not named by the record"
        assert confirmed <= holds[node]
    live_in_set = [n for n, m in members.items() if m.broker_id in record.broker_ids]
    if not live_in_set:
        # by the named stores: one choice, the same in every agent's eyes
        assert len(contenders) <= 1
        choice = choose_store(members, record, len(NODES))
        assert contenders == ([] if choice.chosen is None else [choice.chosen])
        if choice.chosen is None and not choice.reason.endswith("waiting for it"):
            assert choice.needed and "needed" in choice.needed


def test_with_a_primary_recorded_the_ready_backup_out_of_the_set_waits() -> None:
    record = InSyncRecord(3, (), primary_store_id="s-n1", primary_node="n1")
    members = {"n2": member("n2", "ready", "new-n2", 3, 5)}
    broker = BrokerView("ready", 3, 5, "clean", broker_id="new-n2", store_id="s-n2")
    view = ClusterView(
        "n2", broker, members, primary=PrimaryRecord("n1", 3), in_sync=record, cluster_size=2
    )
    decision = decide(view)
    assert decision.steps == ()
    assert decision.eligibility == (
        "a ready backup out of the in-sync set (epoch 3), which is empty: waiting for the"
        " primary to add it"
    )


def test_a_member_serving_without_a_record_is_waited_for() -> None:
    record = InSyncRecord(3, (), primary_store_id="s-n1", primary_node="n1")
    members = {
        "n1": member("n1", "joining", "new-n1", 3, 5),
        "n2": member("n2", "active", "new-n2", 4, 5),
    }
    choice = choose_store(members, record)
    assert choice.chosen is None
    assert choice.reason == "n2 serves as primary without a primary record: waiting for it"


def test_no_safe_choice_names_the_broker_needed() -> None:
    record = InSyncRecord(
        5, (InSyncMember("b-n2", "n2", "", "s-n2"),), primary_store_id="s-n1", primary_node="n1"
    )
    members = {
        "n2": member("n2", "catch-up", "new-n2", 5, 3),
        "n3": member("n3", "ready", "new-n3", 5, 9),
    }
    choice = choose_store(members, record)
    assert choice.chosen is None
    assert choice.needed == (
        "one of n1 (the primary's store), n2 is needed: only the stores the in-sync record of"
        " epoch 5 names hold every confirmed message (n2 is catch-up; n1 (the primary's"
        " store): not back); a broker in catch-up is promotable once restarted (it joins with"
        " its store)"
    )


def test_a_named_store_stuck_in_catch_up_is_restarted_to_join_only_when_nothing_else_can_be() -> (
    None
):
    """Its primary died while it caught up (a restarted member of the set): in catch-up it
    is never promoted, and it stays there without a primary. Its agent restarts it when no
    other named store can be promoted and nobody serves; restarted, it joins and is chosen."""
    record = InSyncRecord(
        5, (InSyncMember("b-n2", "n2", "", "s-n2"),), primary_store_id="s-n1", primary_node="n1"
    )
    stuck = member("n2", "catch-up", "new-n2", 5, 3)
    broker = BrokerView("catch-up", 5, 3, "clean", broker_id="new-n2", store_id="s-n2")

    def decided(**others: Member) -> tuple[tuple[Step, ...], str]:
        members = {"n2": stuck, **others}
        decision = decide(ClusterView("n2", broker, members, in_sync=record, cluster_size=3))
        return decision.steps, decision.eligibility

    steps, why = decided(n3=member("n3", "ready", "new-n3", 5, 9))  # n3: not named
    assert steps == (Step.RESTART_BROKER,)
    assert why.endswith("in catch-up it cannot be: restarted, it joins with its store")
    assert decided(n1=member("n1", "joining", "new-n1", 5, 1))[0] == ()  # n1 can be chosen
    assert decided(n3=member("n3", "active", "new-n3", 6, 9))[0] == ()  # someone serves
    primary = ClusterView(
        "n2", broker, {"n2": stuck}, primary=PrimaryRecord("n3", 6), in_sync=record
    )
    assert decide(primary).steps == ()  # it catches up with a primary
    outside = BrokerView("catch-up", 5, 3, "clean", broker_id="new-n4", store_id="s-n4")
    members = {"n4": member("n4", "catch-up", "new-n4", 5, 3)}
    assert decide(ClusterView("n4", outside, members, in_sync=record)).steps == ()
