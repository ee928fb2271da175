"""The race the promotion model (:mod:`tests.agent.test_promotion_model`) has to find by
chance, spelled out step by step on the same model: a takeover by a lapsed grant, then the
old primary granted again before the new one is promoted."""

from __future__ import annotations

from tests.agent.test_promotion_model import NODES, PromotionModel


def test_a_takeover_by_a_lapsed_grant_waits_for_a_grant_renewed_after_it() -> None:
    """The race hypothesis has to find by chance, spelled out: the primary cut off, a
    backup's agent takes over by its lapsed grant, then the cut heals and both backups
    grant the old primary again before the new one is promoted. The new primary must
    wait for its own renewed grant (without that wait, both serve)."""
    model = PromotionModel()
    model.start(None)
    for _ in range(6):
        model.every_agent_takes_a_turn(list(NODES), True)
    (first,) = model.serving()  # promoted joining, with an empty lease set: a node loss
    model.crash_node(first.node)
    model.expire_session(first.node)
    for _ in range(6):
        model.every_agent_takes_a_turn(list(NODES), True)
    (old,) = model.serving()
    assert old.lease_set, "the second primary needs its members' grants"
    model.publish(set())
    assert model.confirmed
    model.primary_cut_off()
    counted = [n for n in NODES if model.brokers[n].broker_id in old.lease_set]
    for other in set(NODES) - set(counted) - {old.node}:
        model.claim(other)  # in the set ZooKeeper holds, but never counted by the primary
        assert model.agents[other].taken is None
    candidate = counted[0]
    model.claim(candidate)
    assert model.agents[candidate].taken is not None, "no takeover by the lapsed grant"
    model.lease_requests(set(NODES))  # the cut heals: the old primary is granted again
    assert model.serving() == [old]
    model.promote(candidate)
    model.lease_requests(set(NODES))
    model.never_two_primaries()
    assert model.serving() == [old]  # the new primary waits for its own grant
    model.grants_lapse(candidate)
    assert [b.node for b in model.serving()] == [candidate]
    model.never_two_primaries()
