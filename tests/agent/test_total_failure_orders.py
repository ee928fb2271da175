"""A total failure's choice does not depend on the order the nodes come back in (issue 12,
items 3 and 7), on the agent's pure rules (ha_agent.promotion), without ZooKeeper or brokers.

Three nodes whose every broker and agent died: the primary's store and its in-sync backup's
are named by the last in-sync record; the third node (stale) had fallen out of the set, with
any epoch up to the set's and any position (it may look the most advanced by position).
Every broker restarts joining, with a new broker id. The nodes come back in each of the 6
orders; as each one arrives, every agent already there decides on the members it sees so
far, which may lag behind the arrivals (ZooKeeper watches fire late). Whatever the order and
the lags: nobody contends before every store the set names is back (the stale node need
not be: issue 25, item 3), never two agents at once, and
once every agent sees all three, exactly one contends, the same node for every order: the
most advanced of the set's stores (epoch, position, clean before dirty), never the stale
node.

What this does not show: the shells (ZooKeeper, the election, the brokers' recovery and
catch-up). tests/agent/test_total_failure_cycles.py runs orders end to end.
"""

from __future__ import annotations

from itertools import permutations

from hypothesis import given
from hypothesis import strategies as st

from ha_agent.membership import Member
from ha_agent.promotion import (
    BrokerView,
    ClusterView,
    InSyncMember,
    InSyncRecord,
    Step,
    decide,
    rank,
)

ROLES = ("primary", "backup", "stale")
ORDERS = list(permutations(ROLES))
EPOCH = 4  # the in-sync set's epoch
STATUSES = ["clean", "dirty"]


@st.composite
def failures(draw: st.DrawFn) -> tuple[dict[str, Member], InSyncRecord]:
    """The three members after a total failure (joining, new broker ids) and the last
    in-sync record, with the roles on random node names."""
    names = draw(st.permutations(["n1", "n2", "n3"]))
    stale_epoch = draw(st.integers(1, EPOCH))
    members = {}
    for role, name in zip(ROLES, names, strict=True):
        members[role] = Member(
            name,
            f"{name}:5672",
            "joining",
            stale_epoch if role == "stale" else EPOCH,
            draw(st.sampled_from(STATUSES)),
            draw(st.integers(0, 1000)),
            broker_id=f"new-{name}",  # every broker restarted: ids the set never saw
            store_id=f"store-{name}",
        )
    record = InSyncRecord(
        EPOCH,
        (InSyncMember("old-backup-id", members["backup"].node, "", members["backup"].store_id),),
        primary_store_id=members["primary"].store_id,
    )
    return members, record


def contends(member: Member, seen: dict[str, Member], record: InSyncRecord) -> bool:
    view = ClusterView(
        node=member.node,
        broker=BrokerView(
            "joining",
            epoch=member.epoch,
            replication_position=member.replication_position,
            store_status=member.store_status,
            broker_id=member.broker_id,
            store_id=member.store_id,
        ),
        members={m.node: m for m in seen.values()},
        cluster_size=3,
        in_sync=record,
    )
    return Step.CONTEND in decide(view).steps


@given(failures(), st.lists(st.integers(0, 2), min_size=9, max_size=9))
def test_every_order_of_return_promotes_the_same_store_of_the_set(
    failure: tuple[dict[str, Member], InSyncRecord], lags: list[int]
) -> None:
    members, record = failure
    expected = max((members["primary"], members["backup"]), key=rank)
    winners = set()
    for order in ORDERS:
        arrived: list[str] = []
        lag = iter(lags)
        for role in order:
            arrived.append(role)
            contenders = []
            for k, present in enumerate(arrived):
                # Each agent there sees itself and what arrived before it, and maybe more.
                seen_upto = min(len(arrived), k + 1 + next(lag, 0))
                seen = {r: members[r] for r in arrived[:seen_upto]}
                if contends(members[present], seen, record):
                    contenders.append(present)
            assert len(contenders) <= 1, (order, arrived, contenders)
            if "primary" not in arrived or "backup" not in arrived:
                assert not contenders, (order, arrived, contenders)
        # Every agent sees every member at last: exactly one contends.
        final = [r for r in ROLES if contends(members[r], members, record)]
        assert len(final) == 1, (order, final)
        (winner,) = final
        assert winner != "stale"
        assert members[winner] == expected
        winners.add(winner)
    assert len(winners) == 1


@given(failures())
def test_the_stale_store_never_wins_even_when_it_looks_the_most_advanced(
    failure: tuple[dict[str, Member], InSyncRecord],
) -> None:
    members, record = failure
    stale = members["stale"]
    ahead = Member(
        stale.node,
        stale.broker_url,
        "joining",
        EPOCH,
        "clean",
        10_000,
        broker_id=stale.broker_id,
        store_id=stale.store_id,
    )
    members = {**members, "stale": ahead}
    for order in ORDERS:
        seen: dict[str, Member] = {}
        for role in order:
            seen[role] = members[role]
        assert not contends(ahead, seen, record)
        assert sum(contends(members[r], seen, record) for r in ROLES) == 1
