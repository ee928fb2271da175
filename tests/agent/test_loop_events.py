"""The agent loop's events (ha_agent.loop_events) without a loop: which claim's end ends a
promotion."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ha_agent.loop_events import TermEnded


def test_an_older_claims_end_told_after_a_newer_claim_promoted_ends_nothing() -> None:
    """Issue 26, seen in a loaded run: a backup's claim (number 1) ended with its session at
    ZooKeeper's return; the loop saw no claim, claimed again (2), won and promoted before
    claim 1's thread told its end. Taken for the end of claim 2, it made the agent forget
    its promotion, promote its own primary again at the next epoch and delete its record
    on the way. Only the end of the claim it promoted under ends a promotion."""
    promoted_under = 2
    assert not TermEnded("session_lost", 1).ends(promoted_under)
    assert TermEnded("session_lost", 2).ends(promoted_under)
    assert TermEnded("cancelled", 2).ends(promoted_under)
    # nothing promoted (or not known under which claim): any end is an end
    assert TermEnded("session_lost", 1).ends(None)


@given(
    st.integers(1, 50),
    st.lists(st.tuples(st.sampled_from(["session_lost", "cancelled"]), st.integers(1, 50))),
)
def test_a_promotion_is_forgotten_exactly_when_its_own_claim_ends(
    promoted_under: int, ends: list[tuple[str, int]]
) -> None:
    """Any order of claim ends (each told once, in any order relative to the promotion):
    the promotion survives every end but its own claim's."""
    remembered = True
    for reason, number in ends:
        if TermEnded(reason, number).ends(promoted_under):
            remembered = False
    assert remembered == (promoted_under not in {n for _, n in ends})
