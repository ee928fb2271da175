"""The in-sync set (issue 10): the pure rules (isr_update, releasable, promotion_in_sync, who
may contend) and the record's conditional writes against the real ZooKeeper."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kazoo.exceptions import BadVersionError, NodeExistsError

from ha_agent.broker_check import broker_view
from ha_agent.epoch_counter import next_epoch
from ha_agent.in_sync import (
    InSyncEpochError,
    InSyncRecordError,
    VersionedInSync,
    decode_in_sync,
    encode_in_sync,
    read_in_sync,
    write_in_sync,
)
from ha_agent.in_sync_keeper import InSyncKeeper, PromotionRequest
from ha_agent.membership import Member
from ha_agent.promotion import (
    BrokerInSync,
    BrokerView,
    ClusterView,
    Decision,
    InSyncMember,
    InSyncRecord,
    PrimaryRecord,
    Step,
    decide,
    eligibility,
    isr_update,
    promotion_in_sync,
    releasable,
)
from ha_agent.takeover import OldPrimaryGone
from ha_agent.zk_layout import ClusterLayout


def isr(epoch: int, *ids: str) -> InSyncRecord:
    return InSyncRecord(epoch, tuple(InSyncMember(i, f"node-{i}", f"{i}:5672") for i in ids))


def sync(wanted: set[str] = frozenset(), pending: set[str] = frozenset()) -> BrokerInSync:  # type: ignore[assignment]
    return BrokerInSync(frozenset(wanted), frozenset(pending))


# -- isr_update and releasable: table ------------------------------------------------------


@pytest.mark.parametrize(
    ("record", "wanted", "pending", "update", "released"),
    [
        # nothing recorded yet: write what the broker counts (even nothing)
        (None, set(), set(), (), ()),
        (None, {"b"}, set(), ("b",), ()),
        # no change
        (isr(1, "a", "b"), {"a", "b"}, set(), None, ()),
        # a backup became ready while guarded: added
        (isr(1, "a"), {"a", "b"}, set(), ("a", "b"), ()),
        # a backup went away while in sync: removed, released once that is committed
        (isr(1, "a", "b"), {"a"}, {"b"}, ("a",), ("b",)),
        (isr(1, "a"), {"a"}, {"b"}, None, ("b",)),
        # pending in both lists: removed all the same
        (isr(1, "a", "b"), {"a", "b"}, {"b"}, ("a",), ("b",)),
        # a member the broker no longer counts (restarted, released): dropped
        (isr(1, "a", "z"), {"a"}, set(), ("a",), ()),
        # pending, never recorded: nothing to write, releasable at once
        (isr(1), set(), {"c"}, None, ("c",)),
    ],
)
def test_isr_update_and_releasable(record, wanted, pending, update, released) -> None:
    """``released``: what the broker may release once the update is committed."""
    broker = sync(wanted, pending)
    assert isr_update(record, broker) == update
    committed = record if update is None else isr(1, *update)
    assert releasable(committed, broker) == released
    if record is not None and update is not None:  # before the write: only what it shows
        assert set(releasable(record, broker)) == pending - record.broker_ids


def test_nothing_is_releasable_without_a_committed_record() -> None:
    assert releasable(None, sync({"a"}, {"b"})) == ()


IDS = st.sampled_from(["a", "b", "c", "d", "e"])
id_sets = st.frozensets(IDS)


@given(st.one_of(st.none(), id_sets), id_sets, id_sets)
def test_isr_update_properties(recorded, wanted, pending) -> None:
    """Never a pending-removal backup in the new set, never one the broker does not count;
    applying the update once leaves nothing more to do; every pending one not in the
    committed set is releasable, and only those."""
    record = None if recorded is None else isr(3, *sorted(recorded))
    broker = BrokerInSync(wanted, pending)
    update = isr_update(record, broker)
    if update is None:
        assert record is not None  # no record: there is always something to write
        members = record.broker_ids
    else:
        members = frozenset(update)
    assert not members & pending
    assert members <= wanted
    assert update is None or list(update) == sorted(update)
    committed = isr(3, *sorted(members))
    assert isr_update(committed, broker) is None
    assert set(releasable(committed, broker)) == set(pending)
    if record is not None:
        assert set(releasable(record, broker)) == pending - record.broker_ids


@given(st.lists(st.tuples(id_sets, id_sets), min_size=1, max_size=8))
def test_a_released_backup_was_out_of_every_later_committed_set(steps) -> None:
    """Run the primary's agent over a sequence of broker states: whatever it lets the broker
    release is absent from the set it committed, and the set it commits is always a subset
    of what the broker counted then (so a backup enters only while guarded)."""
    record: InSyncRecord | None = None
    for wanted, pending in steps:
        broker = BrokerInSync(wanted, pending)
        update = isr_update(record, broker)
        if update is not None:
            record = isr(1, *update)
            assert record.broker_ids <= wanted
        assert record is not None
        for released in releasable(record, broker):
            assert released not in record.broker_ids


# -- promotion_in_sync --------------------------------------------------------------------


def test_a_promotion_takes_the_old_members_less_itself() -> None:
    ready = BrokerView("ready", broker_id="a")
    assert [m.broker_id for m in promotion_in_sync(isr(1, "a", "b", "c"), ready)] == ["b", "c"]
    assert promotion_in_sync(None, ready) == ()
    # total failure: every old id belongs to a broker that restarted since
    assert promotion_in_sync(isr(4, "a", "b"), BrokerView("joining", broker_id="x")) == ()


def test_a_promotion_leaves_out_the_members_known_gone() -> None:
    """Issue 26, item 3: a member whose node's agent record is gone, or names another
    broker (it restarted), is left out at the promotion itself; a member whose record is
    there (its agent lives) is kept, and so is one whose node the set does not name."""
    ready = BrokerView("ready", broker_id="a")
    old = InSyncRecord(
        1,
        (
            InSyncMember("a", "node-a"),
            InSyncMember("b", "node-b"),  # its record gone: its agent's session ended
            InSyncMember("c", "node-c"),  # restarted: its record names broker c2
            InSyncMember("d", "node-d"),  # alive
            InSyncMember("e", ""),  # no node named: not known gone
        ),
    )
    members = {
        "node-a": member("node-a", "ready", "a"),
        "node-c": member("node-c", "joining", "c2"),
        "node-d": member("node-d", "ready", "d"),
    }
    kept = promotion_in_sync(old, ready, members)
    assert [m.broker_id for m in kept] == ["d", "e"]
    assert [m.broker_id for m in promotion_in_sync(old, ready)] == ["b", "c", "d", "e"]


# -- eligibility ----------------------------------------------------------------------------


def member(node: str, state: str, broker_id: str = "", epoch: int = 1, position: int = 0):
    return Member(node, f"{node}:5672", state, epoch, "clean", position, broker_id)


def view(state: str, broker_id: str = "", **kw: Any) -> ClusterView:
    broker = BrokerView(state, epoch=kw.pop("epoch", 1), broker_id=broker_id)
    return ClusterView(node="n1", broker=broker, **kw)


def test_a_ready_backup_in_the_set_contends() -> None:
    members = {"n1": member("n1", "ready", "a"), "n2": member("n2", "ready", "b")}
    decision = decide(view("ready", "a", members=members, in_sync=isr(2, "a", "b")))
    assert decision.steps == (Step.CONTEND,)
    assert decision.eligibility == "a ready backup in the in-sync set (epoch 2)"


def test_a_ready_backup_out_of_the_set_never_contends_and_says_why() -> None:
    members = {"n1": member("n1", "ready", "a"), "n2": member("n2", "ready", "b")}
    decision = decide(view("ready", "a", members=members, in_sync=isr(2, "b")))
    assert decision.steps == ()
    assert decision.eligibility == "a ready backup out of the in-sync set (epoch 2): n2 in it"
    # it contended before it fell out: it withdraws; it won: it resigns
    out = view("ready", "a", members=members, in_sync=isr(2, "b"), leadership="contending")
    assert decide(out).steps == (Step.WITHDRAW,)
    won = view("ready", "a", members=members, in_sync=isr(2, "b"), leadership="leading")
    assert decide(won).steps == (Step.WITHDRAW,)


def test_a_ready_backup_out_of_a_set_whose_members_are_gone_waits() -> None:
    members = {"n1": member("n1", "ready", "a"), "n3": member("n3", "joining", "new")}
    decision = decide(view("ready", "a", members=members, in_sync=isr(5, "b"), cluster_size=2))
    assert decision.steps == ()
    assert decision.eligibility == (
        "a ready backup out of the in-sync set (epoch 5: node-b), whose members are all "
        "gone: waiting for one of them to return"
    )
    empty = decide(view("ready", "a", members=members, in_sync=isr(5), cluster_size=2))
    assert empty.steps == ()
    assert "which is empty: waiting for the primary to add it" in empty.eligibility


def test_without_a_recorded_set_a_ready_backup_contends_as_before() -> None:
    decision = decide(view("ready", "a"))
    assert decision.steps == (Step.CONTEND,)
    assert decision.eligibility == "a ready backup (no in-sync set recorded)"


def test_an_unreadable_set_lets_nobody_contend() -> None:
    decision = decide(view("ready", "a", in_sync_error="not JSON"))
    assert decision.steps == ()
    assert decision.eligibility == "the in-sync set cannot be read: not JSON"


def test_joining_members_wait_while_a_member_of_the_set_lives() -> None:
    members = {"n1": member("n1", "joining", "x"), "n2": member("n2", "catch-up", "b")}
    decision = decide(view("joining", "x", members=members, in_sync=isr(3, "b"), cluster_size=2))
    assert decision.steps == ()
    assert decision.eligibility == "n2 in the in-sync set (epoch 3)"


def test_total_failure_falls_back_to_the_most_advanced_joining_member() -> None:
    # every broker restarted: new ids, none in the set, none ready
    members = {
        "n1": member("n1", "joining", "x", epoch=3, position=10),
        "n2": member("n2", "joining", "y", epoch=3, position=5),
    }
    record = isr(3, "a", "b")
    best = decide(view("joining", "x", members=members, in_sync=record, cluster_size=2))
    assert best.steps == (Step.CONTEND,)
    assert "most advanced of 2 joining members" in best.eligibility
    other = ClusterView(
        node="n2",
        broker=BrokerView("joining", 3, broker_id="y"),
        members=members,
        in_sync=record,
        cluster_size=2,
    )
    assert decide(other).steps == ()


def stored(node: str, store: str, epoch: int = 3, position: int = 0) -> Member:
    return Member(node, f"{node}:5672", "joining", epoch, "dirty", position, "", store)


def test_total_failure_chooses_among_the_stores_of_the_set() -> None:
    """Issue 12: after a total failure only the primary's store and its in-sync backups'
    hold every confirmed message; a store outside the set is never promoted, however far
    it seems to be (its position may count messages the set's stores had acknowledged)."""
    record = InSyncRecord(3, (InSyncMember("b", "n2", "", "s2"),), primary_store_id="s1")
    members = {
        "n1": stored("n1", "s1", position=10),
        "n2": stored("n2", "s2", position=10),
        "n3": stored("n3", "s3", position=99),  # out of the set: never
    }

    def decided(node: str, present: dict[str, Member]) -> Decision:
        broker = BrokerView("joining", 3, store_id=present[node].store_id)
        cluster = ClusterView(node, broker, present, in_sync=record, cluster_size=len(present))
        return decide(cluster)

    outside = decided("n3", members)
    assert outside.steps == ()
    assert "its store is not one of the stores the in-sync record of epoch 3 names" in (
        outside.eligibility
    )
    best = decided("n1", members)  # n1 and n2 tie; the name decides
    assert best.steps == (Step.CONTEND,)
    assert "the most advanced of the stores the in-sync record of epoch 3 names" in (
        best.eligibility
    )
    assert decided("n2", members).steps == ()
    # only a store outside the set is back: wait for one of the set's
    alone = {"n3": members["n3"]}
    waiting = decided("n3", alone)
    assert waiting.steps == ()
    assert waiting.eligibility == (
        "its store is not one of the stores the in-sync record of epoch 3 names: no safe"
        " choice: one of the primary's store s1, n2 is needed: only the stores the in-sync"
        " record of epoch 3 names hold every confirmed message (the primary's store s1, n2:"
        " not back)"
    )


@given(
    st.dictionaries(
        st.sampled_from(["n1", "n2", "n3", "n4"]),
        st.tuples(st.sampled_from(["s1", "s2", "s3", "s4"]), st.integers(0, 4), st.integers(0, 9)),
        min_size=1,
    ),
    st.frozensets(st.sampled_from(["s1", "s2", "s3", "s4"]), min_size=1),
)
def test_a_total_failure_promotes_only_a_store_of_the_set(nodes, in_set) -> None:
    """Whatever the members' epochs and positions: a joining broker contends after a total
    failure only if its store is in the recorded set (epoch 3) or at a newer epoch (a
    designated primary's, promoted without ZooKeeper), and at most one contends; a store at
    a newer epoch is preferred to every store of the set."""
    primary, *backups = sorted(in_set)
    record = InSyncRecord(3, tuple(InSyncMember(f"b-{s}", "", "", s) for s in backups), primary)
    members = {n: stored(n, s, e, p) for n, (s, e, p) in nodes.items()}
    contending = []
    for node, (store, epoch, _position) in nodes.items():
        broker = BrokerView("joining", epoch, store_id=store)
        cluster = ClusterView(node, broker, members, in_sync=record, cluster_size=len(members))
        if Step.CONTEND in decide(cluster).steps:
            assert store in in_set or epoch > 3
            contending.append(node)
    assert len(contending) <= 1
    if any(s in in_set or e > 3 for s, e, _p in nodes.values()):
        assert len(contending) == 1
    if any(e > 3 for _s, e, _p in nodes.values()):
        assert nodes[contending[0]][1] == 4


def test_after_a_designated_primary_its_newer_store_is_chosen_over_the_sets() -> None:
    """--designated-primary promoted n2 (out of the set) at epoch 4 without ZooKeeper, which
    still records the set of epoch 3 (n1 primary alone). After a total failure n2's store
    holds what it confirmed as primary: it wins over n1's, which the set names."""
    record = InSyncRecord(3, (), primary_store_id="s1")
    members = {"n1": stored("n1", "s1", 3, 50), "n2": stored("n2", "s2", 4, 10)}

    def decided(node: str) -> Decision:
        broker = BrokerView("joining", members[node].epoch, store_id=members[node].store_id)
        return decide(ClusterView(node, broker, members, in_sync=record, cluster_size=2))

    assert decided("n2").steps == (Step.CONTEND,)
    assert decided("n1").steps == ()
    assert "n2 is the most advanced of the stores" in decided("n1").eligibility


def test_a_primary_behind_the_sets_epoch_is_fenced() -> None:
    decision = decide(view("active", "p", epoch=4, in_sync=isr(5, "a"), leadership="leading"))
    assert decision.steps == (Step.FENCE,)
    assert "in-sync set is at epoch 5, newer than the broker's 4" in decision.eligibility
    assert decide(view("active", "p", epoch=5, in_sync=isr(5, "a"))).steps == (Step.CONTEND,)


STATES = ["joining", "catch-up", "ready", "active", "down"]
nodes_st = st.dictionaries(
    st.sampled_from(["n1", "n2", "n3", "n4"]),
    st.tuples(st.sampled_from(STATES), st.sampled_from(["a", "b", "c", "d", "x", "y"])),
    min_size=1,
)


@given(nodes_st, st.frozensets(st.sampled_from(["a", "b", "c", "d"])), st.integers(1, 4))
def test_only_set_members_contend_unless_every_broker_restarted(nodes, recorded, size) -> None:
    """With a recorded set, a non-primary broker contends only if it is a ready member of
    the set, or every live broker is joining and none is in the set (total failure)."""
    members = {n: member(n, state, bid) for n, (state, bid) in nodes.items() if state != "down"}
    record = isr(2, *sorted(recorded))
    for name, (state, bid) in nodes.items():
        if state in ("down", "active"):
            continue
        v = ClusterView(
            node=name,
            broker=BrokerView(state, 1, broker_id=bid),
            members=members,
            in_sync=record,
            cluster_size=size,
        )
        eligible, why = eligibility(v)
        if not eligible:
            continue
        if state == "ready":
            assert bid in recorded, why
        else:
            assert state == "joining"
            assert all(m.ha_state == "joining" for m in members.values())
            assert not any(m.broker_id in recorded for m in members.values())


@given(nodes_st, st.frozensets(st.sampled_from(["a", "b", "c", "d"])))
def test_a_ready_backup_out_of_the_set_never_contends(nodes, recorded) -> None:
    members = {n: member(n, s, b) for n, (s, b) in nodes.items() if s != "down"}
    for leadership in ("idle", "contending", "leading"):
        v = ClusterView(
            node="n9",
            broker=BrokerView("ready", 1, broker_id="z"),
            members=members,
            in_sync=isr(2, *sorted(recorded)),
            leadership=leadership,
            primary=None if leadership == "idle" else PrimaryRecord("n2", 2),
        )
        steps = decide(v).steps
        assert Step.CONTEND not in steps and Step.PROMOTE not in steps


# -- the broker's in_sync in its view ------------------------------------------------------


def test_broker_view_reads_the_primarys_in_sync_and_broker_id() -> None:
    ha = {
        "epoch": 2,
        "broker_id": "p",
        "in_sync": {"wanted": ["a", "b"], "pending_removal": ["b", 7], "committed": None},
        "backups": [{"id": "a", "url": "h:1"}, {"id": "b", "url": "h:2"}, "junk"],
    }
    seen = broker_view({"ha_state": "active"}, ha)
    assert seen.broker_id == "p"
    assert seen.in_sync == BrokerInSync(
        frozenset({"a", "b"}),
        frozenset({"b"}),
        (("a", "h:1"), ("b", "h:2")),
        committed=(0, frozenset()),  # told no set since its promotion
    )
    ha["in_sync"] = {"committed": {"epoch": 2, "members": ["a"]}}
    assert broker_view({"ha_state": "active"}, ha).in_sync == BrokerInSync(
        urls=(("a", "h:1"), ("b", "h:2")), committed=(2, frozenset({"a"}))
    )
    backup = broker_view({"ha_state": "ready"}, {"broker_id": "a", "in_sync": None})
    assert (backup.broker_id, backup.in_sync) == ("a", None)


# -- the record's format ------------------------------------------------------------------


def test_the_record_round_trips_as_compact_sorted_json() -> None:
    record = InSyncRecord(7, (InSyncMember("b", "n2", "h:2"), InSyncMember("a", "n3", "h:3")))
    data = encode_in_sync(record)
    assert data == (
        b'{"epoch":7,"members":[{"broker_id":"a","node":"n3","store_id":"","url":"h:3"},'
        b'{"broker_id":"b","node":"n2","store_id":"","url":"h:2"}],"primary_store_id":"",'
        b'"version":1}'
    )
    assert decode_in_sync(data).broker_ids == {"a", "b"}
    # a record written before stores had ids reads with none
    assert decode_in_sync(b'{"version":1,"epoch":0,"members":[]}') == InSyncRecord(0)
    stored = InSyncRecord(7, (InSyncMember("b", "n2", "h:2", "s2"),), "s1")
    assert decode_in_sync(encode_in_sync(stored)) == stored
    assert stored.store_ids == {"s1", "s2"} and InSyncRecord(7, record.members).store_ids == set()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "not JSON"),
        (b"[]", "not a JSON object"),
        (b'{"version":3,"epoch":1,"members":[]}', "in ZooKeeper format 3; this agent reads"),
        (b'{"version":1,"epoch":-1,"members":[]}', "epoch must be"),
        (b'{"version":1,"epoch":1,"members":{}}', "members must be a list"),
        (b'{"version":1,"epoch":1,"members":[{"node":"n2"}]}', "needs a broker_id"),
    ],
)
def test_a_bad_record_is_refused_naming_why(data: bytes, message: str) -> None:
    with pytest.raises(InSyncRecordError, match=message):
        decode_in_sync(data)


# -- conditional writes against the real ZooKeeper ------------------------------------------


def test_create_once_then_writes_conditional_on_the_version_read(zk: Any, cluster: str) -> None:
    assert read_in_sync(zk, cluster) is None
    first = write_in_sync(zk, cluster, isr(1), None)
    assert read_in_sync(zk, cluster) == first == VersionedInSync(isr(1), 0)
    with pytest.raises(NodeExistsError):  # another agent read it absent too: refused
        write_in_sync(zk, cluster, isr(1, "x"), None)
    second = write_in_sync(zk, cluster, isr(1, "a"), first)
    assert second.version == 1
    with pytest.raises(BadVersionError):  # written since it was read: refused
        write_in_sync(zk, cluster, isr(1, "b"), first)
    assert read_in_sync(zk, cluster) == VersionedInSync(isr(1, "a"), 1)


def test_a_stale_epoch_never_writes_over_a_newer_primarys_set(zk: Any, cluster: str) -> None:
    old = write_in_sync(zk, cluster, isr(1, "a", "b"), None)
    taken = write_in_sync(zk, cluster, isr(2, "b"), old)  # a promotion at epoch 2
    with pytest.raises(InSyncEpochError, match="epoch 2, newer than 1"):
        write_in_sync(zk, cluster, isr(1, "b"), taken)  # the old primary's agent, re-read
    with pytest.raises(BadVersionError):  # or not re-read: the version refuses it
        write_in_sync(zk, cluster, isr(1, "a"), old)
    assert read_in_sync(zk, cluster) == taken


def test_two_promotions_from_one_read_only_one_commits(zk: Any, make_client, cluster) -> None:
    other = make_client()
    write_in_sync(zk, cluster, isr(1, "a", "b"), None)
    read_a, read_b = read_in_sync(zk, cluster), read_in_sync(other, cluster)
    write_in_sync(zk, cluster, isr(2, "b"), read_a)
    with pytest.raises(BadVersionError):
        write_in_sync(other, cluster, isr(3, "a"), read_b)


def test_an_unparseable_record_is_an_error_naming_the_znode(zk: Any, cluster: str) -> None:
    path = ClusterLayout(cluster).in_sync
    zk.create(path, b"nonsense", makepath=True)
    with pytest.raises(InSyncRecordError, match=f"{path}: not JSON"):
        read_in_sync(zk, cluster)


def test_a_promotion_takes_an_epoch_above_every_members(zk: Any, cluster: str) -> None:
    """A backup promoted by hand (`qpid-ha --cluster-manager promote`) takes its broker's
    next epoch, 4, which ZooKeeper's counter (at 3) never issued; once it was stopped, the
    agents' next promotion took 4 again: two primaries' eras, numbered from 4 << 40 both,
    would share message ids. The epoch taken is above every member record's too."""
    for _ in range(3):
        next_epoch(zk, cluster)
    write_in_sync(zk, cluster, isr(3, "b"), None)
    members = {
        "n1": member("n1", "active", "a", epoch=3),
        "n2": member("n2", "ready", "b", epoch=3),
        "n3": member("n3", "ready", "c", epoch=4),  # the hand-promoted one, restarted
    }
    broker = BrokerView("ready", epoch=3, broker_id="b")
    cluster_view = ClusterView(node="n2", broker=broker, members=members)
    keeper = InSyncKeeper(zk, cluster, broker_check=None)  # type: ignore[arg-type]
    taken = keeper.take(broker, cluster_view, PromotionRequest(OldPrimaryGone(), locked=True))
    assert taken is not None and taken.epoch == 5
