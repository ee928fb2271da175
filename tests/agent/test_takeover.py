"""The takeover rules (:mod:`ha_agent.takeover`): when a candidate may replace the old
primary's record. :class:`LapsedGrant` is the node-loss path of issue 26: the record is
still there, but the candidate's own grant, which the old primary counted, has lapsed."""

from __future__ import annotations

import socket

from ha_agent.broker_check import grant_view
from ha_agent.cluster_records import InSyncMember, InSyncRecord, PrimaryRecord
from ha_agent.listener_probe import accepts
from ha_agent.membership import Member
from ha_agent.takeover import (
    LINK_RECHECK,
    LISTENER_RECHECK,
    AnyOf,
    GrantView,
    LapsedGrant,
    OldPrimary,
    OldPrimaryGone,
    TakeoverView,
    default_rule,
)

OLD = OldPrimary(PrimaryRecord("n1", 7), version=0, owner=0x51)
SET = InSyncRecord(7, (InSyncMember("b2", "n2"), InSyncMember("b3", "n3")))


def members(replication: str = "1-3", zookeeper: str = "1-2") -> dict[str, Member]:
    return {
        n: Member(n, f"amqp://{n}", replication_formats=replication, zookeeper_formats=zookeeper)
        for n in ("n1", "n2", "n3")
    }


def rule(answer: GrantView | None) -> tuple[LapsedGrant, list[int]]:
    asked: list[int] = []

    def grant(epoch: int) -> GrantView | None:
        asked.append(epoch)
        return answer

    return LapsedGrant("n2", grant), asked


def test_a_lapsed_grant_the_old_primary_counted_replaces_its_record() -> None:
    lapsed, asked = rule(GrantView(True, 0.0, frozenset({7})))
    answer = lapsed.may_take_over(TakeoverView(OLD, SET, members()))
    assert answer.allowed and answer.replace == OLD
    assert asked == [8]  # every grant to an epoch before the next one


def test_a_primary_whose_link_is_still_up_is_slow_not_dead() -> None:
    answer = rule(GrantView(True, 0.0, frozenset({7}), linked=7))[0].may_take_over(
        TakeoverView(OLD, SET, members())
    )
    assert not answer.allowed and "slow, not dead" in answer.reason
    relinked = rule(GrantView(True, 0.0, frozenset({7}), linked=8))[0]  # another primary's
    assert relinked.may_take_over(TakeoverView(OLD, SET, members())).allowed


def test_a_linked_candidate_asks_again_at_its_grants_lapse_then_often() -> None:
    """Issue 26, item 5: a candidate whose link is up is asked again when its grant
    lapses (no sooner can it take over), and from then on every LINK_RECHECK: the primary
    stopped asking, and a cut-off primary's link is found down within a probe
    (broker.ha.link_reach). Before, it looked once a second (RECHECK)."""
    fresh = rule(GrantView(False, 0.61, frozenset({7}), linked=7))[0]
    answer = fresh.may_take_over(TakeoverView(OLD, SET, members()))
    assert not answer.allowed and answer.retry_in == 0.61
    silent = rule(GrantView(True, 0.0, frozenset({7}), linked=7))[0]
    answer = silent.may_take_over(TakeoverView(OLD, SET, members()))
    assert not answer.allowed and answer.retry_in == LINK_RECHECK


def test_a_lost_link_is_told_once_so_that_its_hint_goes_out_at_once() -> None:
    """Its own link down and its grant lapsed: the agent is told (it publishes this node's
    link hint now, which the other members wait for), once per primary and epoch; not
    while the link is up or the grant runs."""
    told: list[tuple[str, int]] = []
    answers = iter(
        [
            GrantView(True, 0.0, frozenset({7}), linked=7),  # linked: slow, not dead
            GrantView(False, 0.3, frozenset({7})),  # down, the grant still runs
            GrantView(True, 0.0, frozenset({7})),  # down and lapsed: told
            GrantView(True, 0.0, frozenset({7})),  # the same again: not told twice
        ]
    )
    lapsed = LapsedGrant(
        "n2", lambda _e: next(answers), lambda _p, _e: frozenset(), lambda p, e: told.append((p, e))
    )
    for expected in ([], [], [("n1", 7)], [("n1", 7)]):
        assert not lapsed.may_take_over(TakeoverView(OLD, SET, members())).allowed
        assert told == expected


def test_an_unexpired_grant_says_when_to_ask_again() -> None:
    answer = rule(GrantView(False, 0.42, frozenset({7})))[0].may_take_over(
        TakeoverView(OLD, SET, members())
    )
    assert not answer.allowed and answer.retry_in == 0.42


def test_refused_without_proof_the_old_primary_counted_this_broker() -> None:
    # never granted (the set just committed), or no longer counted (left its set), or a
    # broker that does not answer: nothing shows the old primary stopped serving
    for grants in (GrantView(True, 0.0), GrantView(True, 0.0, frozenset({6})), None):
        answer = rule(grants)[0].may_take_over(TakeoverView(OLD, SET, members()))
        assert not answer.allowed and answer.replace is None


def test_refused_unless_every_member_speaks_the_lease_and_multi_op_formats() -> None:
    lapsed, asked = rule(GrantView(True, 0.0, frozenset({7})))
    for older in (members(replication="1-2"), members(zookeeper="1-1")):
        assert not lapsed.may_take_over(TakeoverView(OLD, SET, older)).allowed
    assert asked == []  # not even asked


def test_refused_for_its_own_record_another_epochs_set_or_no_record() -> None:
    lapsed = rule(GrantView(True, 0.0, frozenset({7})))[0]
    own = OldPrimary(PrimaryRecord("n2", 7), 0, 1)
    for view in (
        TakeoverView(own, SET, members()),
        TakeoverView(OLD, InSyncRecord(8, SET.members), members()),
        TakeoverView(OLD, None, members()),
        TakeoverView(OldPrimary(None, 0, 1), SET, members()),
        TakeoverView(None, SET, members()),
    ):
        assert not lapsed.may_take_over(view).allowed


def test_any_of_takes_the_first_yes_and_the_soonest_retry() -> None:
    combined = default_rule("n2", lambda _e: GrantView(False, 0.3, frozenset({7})))
    refused = combined.may_take_over(TakeoverView(OLD, SET, members()))
    assert not refused.allowed and refused.retry_in == 0.3
    assert "waiting for it to go" in refused.reason and "lapses in 0.300 s" in refused.reason
    gone = AnyOf(OldPrimaryGone(), rule(None)[0]).may_take_over(TakeoverView(None, SET))
    assert gone.allowed and gone.replace is None


def test_the_broker_answer_is_read_strictly() -> None:
    answer = {
        "epoch": 7,
        "lapsed": True,
        "remaining_ms": 0.0,
        "grants": [{"epoch": 6, "needed": False}, {"epoch": 7, "needed": True}],
        "formats": "1-3",
        "linked_epoch": 7,
    }
    assert grant_view(answer) == GrantView(True, 0.0, frozenset({7}), "1-3", 7)
    bad: list[object] = [{}, {"lapsed": 1, "remaining_ms": 0}, {"lapsed": True, "remaining_ms": -1}]
    for answer_ in [*bad, []]:
        assert grant_view(answer_) is None


def test_a_candidate_linked_to_the_sets_primary_waits_for_its_record_to_come_back() -> None:
    """Issue 26, item 2: the record gone while this broker's link to the primary of the
    set's epoch is up (every session expired in a ZooKeeper outage, that primary served on
    grants): wait ``grace`` from the first look, for its agent to take the record back."""
    now = [100.0]
    answer = GrantView(False, 0.5, frozenset({7}), linked=7)
    gone = OldPrimaryGone(lambda _epoch: answer, grace=2.0, clock=lambda: now[0])
    first = gone.may_take_over(TakeoverView(None, SET, members()))
    assert not first.allowed and first.retry_in == 2.0 and "link" in first.reason
    now[0] = 101.5
    assert gone.may_take_over(TakeoverView(None, SET, members())).retry_in == 0.5
    now[0] = 102.0
    assert gone.may_take_over(TakeoverView(None, SET, members())).allowed
    assert not gone.may_take_over(TakeoverView(OLD, SET, members())).allowed  # back
    assert gone.may_take_over(TakeoverView(None, SET, members())).retry_in == 2.0  # afresh
    unlinked = OldPrimaryGone(lambda _epoch: GrantView(True, 0.0), grace=2.0)
    assert unlinked.may_take_over(TakeoverView(None, SET, members())).allowed  # node lost
    assert OldPrimaryGone().may_take_over(TakeoverView(None, SET, members())).allowed
    silent = OldPrimaryGone(lambda _epoch: None, grace=2.0)  # its broker does not answer
    assert silent.may_take_over(TakeoverView(None, SET, members())).allowed


def test_a_cut_of_this_brokers_link_alone_is_not_the_primarys_loss() -> None:
    """n2's grant lapsed and its link is down, but n3 (the set's other member, its agent
    there) published no hint against n1: only n2's link is cut, the primary's removal of
    n2 decides. With n3's hint, or n3's agent gone too, n2 takes over."""
    lapsed = GrantView(True, 0.0, frozenset({7}))
    asked: list[tuple[str, int]] = []

    def hinted(*nodes: str) -> LapsedGrant:
        def link_down(primary: str, epoch: int) -> frozenset[str]:
            asked.append((primary, epoch))
            return frozenset(nodes)

        return LapsedGrant("n2", lambda _e: lapsed, link_down)

    cut = hinted().may_take_over(TakeoverView(OLD, SET, members()))
    assert not cut.allowed and cut.replace is None
    assert "n3 published no link hint against n1 (epoch 7)" in cut.reason
    assert cut.retry_in is not None and cut.retry_in <= 0.2
    assert asked == [("n1", 7)]
    assert not hinted("n1", "n2").may_take_over(TakeoverView(OLD, SET, members())).allowed
    both = hinted("n3").may_take_over(TakeoverView(OLD, SET, members()))
    assert both.allowed and both.replace == OLD
    n3_gone = {n: m for n, m in members().items() if n != "n3"}
    assert hinted().may_take_over(TakeoverView(OLD, SET, n3_gone)).allowed
    alone = InSyncRecord(7, (InSyncMember("b2", "n2"),))  # no other member: the grant decides
    assert hinted().may_take_over(TakeoverView(OLD, alone, members())).allowed
    unnamed = InSyncRecord(7, (InSyncMember("b2", "n2"), InSyncMember("b3")))
    assert hinted().may_take_over(TakeoverView(OLD, unnamed, members())).allowed


def test_a_lapsed_grant_waits_while_the_old_primarys_broker_still_listens() -> None:
    """Issue 25 (slow is not dead): a starved primary, or a starved backup whose link the
    primary closed, keeps its listener; its record is not replaced on a lapsed grant while
    a connect to the record's address is accepted. Refused or unanswered: taken over."""
    old = OldPrimary(PrimaryRecord("n1", 7, "10.0.0.1:5672"), version=0, owner=0x51)
    lapsed = GrantView(True, 0.0, frozenset({7}))
    probed: list[str] = []

    def listener(there: bool) -> LapsedGrant:
        def accepts(url: str) -> bool:
            probed.append(url)
            return there

        return LapsedGrant("n2", lambda _e: lapsed, lambda _p, _e: frozenset({"n3"}), None, accepts)

    slow = listener(True).may_take_over(TakeoverView(old, SET, members()))
    assert not slow.allowed and slow.replace is None and slow.retry_in == LISTENER_RECHECK
    assert "n1's broker still accepts connections at 10.0.0.1:5672" in slow.reason
    gone = listener(False).may_take_over(TakeoverView(old, SET, members()))
    assert gone.allowed and gone.replace == old
    assert probed == ["10.0.0.1:5672", "10.0.0.1:5672"]
    # asked last, once everything else allows: no probe for a grant that still runs
    running = LapsedGrant(
        "n2", lambda _e: GrantView(False, 0.4, frozenset({7})), None, None, lambda _u: True
    )
    assert running.may_take_over(TakeoverView(old, SET, members())).retry_in == 0.4
    assert probed == ["10.0.0.1:5672", "10.0.0.1:5672"]
    # a record without an address (an older agent's): the grant and the hints decide
    assert listener(True).may_take_over(TakeoverView(OLD, SET, members())).allowed


def test_the_listener_probe_tells_a_listener_from_none() -> None:
    """A real socket: a listener accepts; a closed port refuses; a bad URL is no."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        port = server.getsockname()[1]
        assert accepts(f"127.0.0.1:{port}")
        assert accepts(f"amqp:tcp:127.0.0.1:{port},tcp:127.0.0.1:1")  # its first address
    assert not accepts(f"127.0.0.1:{port}")  # closed: refused at once
    assert not accepts("no such url ::")
