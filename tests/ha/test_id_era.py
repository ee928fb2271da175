"""broker.ha.id_era: a new primary's era on every queue, the rule as its docstring says it
(the next id from ``epoch << ERA_SHIFT``, at least ``REPLICATION_ID_GAP`` past the last)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from broker.core.vhost import VirtualHost
from broker.ha.id_era import ERA_SHIFT, REPLICATION_ID_GAP, enter_era
from broker.ha.id_set import MAX_ID
from broker.ha.primary_start import entered_steps
from common.slices import run_steps


@given(
    st.lists(st.integers(0, 2**62), min_size=1, max_size=30),
    st.integers(0, 2**24),
    st.integers(1, 7),
)
def test_each_queue_goes_on_from_the_era_or_a_gap_past_its_last_id(
    lasts: list[int], epoch: int, size: int
) -> None:
    vhost = VirtualHost()
    queues = [vhost.declare_queue(f"q{i}") for i in range(len(lasts))]
    for queue, last in zip(queues, lasts, strict=True):
        queue.last_position = last
    era = epoch << ERA_SHIFT
    era = 0 if era > MAX_ID else era
    run_steps(entered_steps(queues, epoch, None, [], size))  # a promotion's pass
    assert [q.last_position for q in queues] == [
        max(era, last + REPLICATION_ID_GAP) for last in lasts
    ]
    enter_era(queues, epoch)  # again: the gap again, never back
    assert all(
        q.last_position >= last + 2 * REPLICATION_ID_GAP
        for q, last in zip(queues, lasts, strict=True)
    )
