"""broker.collector.FreezePolicy: no full collection walks much more than the budget.

A model heap stands in for CPython's collector: a middle collection walks what it holds
and moves part of it to the old generation (what survives); a full collection walks the
old generation (less what died) and a freeze empties it; the policy sees each collection's
CPU and the freeze it asks for is done before the next collection (the loop's tick runs
between two of them: each runs in a step of its own or within one allocation). The rule:
every full collection takes less than the budget plus the longest middle collection.
"""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from broker.collector import FREEZE_AFTER, FreezePolicy

#: (generation, CPU of what it walks in us, share that survives in %, share of the old
#: generation that died since in %)
Event = tuple[int, int, int, int]

events = st.lists(
    st.tuples(
        st.integers(0, 2),
        st.integers(0, 40_000),
        st.integers(0, 100),
        st.integers(0, 100),
    ),
    max_size=200,
)


@given(events)
@example([(1, 24_999, 100, 0), (2, 0, 0, 0)])  # just under the budget: no freeze, walked
@example([(1, 25_000, 100, 0), (2, 0, 0, 0)])  # at the budget: frozen first
@example([(1, 8_333, 100, 0)] * 3 + [(2, 0, 0, 0)])  # a sum that rounds under it
@example([(2, 40_000, 100, 0), (1, 40_000, 100, 0), (2, 0, 0, 0)])  # long ones in a row
@example([(1, 0, 0, 0)] * 3)
def test_no_full_collection_walks_more_than_the_budget_and_one_middle_collection(
    history: list[Event],
) -> None:
    policy = FreezePolicy(FREEZE_AFTER)
    budget = round(FREEZE_AFTER * 1_000_000)
    old = 0  # us of CPU a full collection would spend on the old generation, not frozen
    longest_middle = 0
    for generation, walked, survives, died in history:
        old = old * (100 - died) // 100
        if generation == 2:
            took = old + walked  # the old generation and the young ones with it
            # 1 us: the policy adds seconds as floats, which may round a sum just under
            assert old < budget + longest_middle + 1
            old = took * survives // 100
        elif generation == 1:
            took = walked
            longest_middle = max(longest_middle, walked)
            old += walked * survives // 100
        else:
            took = walked
        if policy.collected(generation, took / 1_000_000):
            old = 0  # gc.freeze(), at the next turn of the tick
            policy.frozen()


def test_steady_work_is_not_frozen() -> None:
    """Middle collections of a few in-flight messages and the full collections they lead
    to never ask for a freeze: each full collection starts the sum again."""
    policy = FreezePolicy(FREEZE_AFTER)
    for _ in range(1000):
        for _ in range(10):
            assert not policy.collected(1, 0.001)
        assert not policy.collected(2, 0.004)
