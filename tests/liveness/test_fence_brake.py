"""The fence brake (ha_agent/fence_brake.py): pure, times passed in."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ha_agent.fence_brake import FenceBrake


def test_one_failover_a_minute_keeps_the_timeout() -> None:
    brake = FenceBrake()
    assert brake.note_primary(1, 0.0) and brake.note_primary(2, 10.0)
    assert not brake.note_primary(2, 11.0)  # the same primary read again
    assert brake.patience(2.0, 11.0) == 2.0 and not brake.engaged(11.0)


def test_a_cascade_doubles_the_patience_up_to_eight_times_then_ends() -> None:
    brake = FenceBrake()
    for epoch, at in ((4, 0.0), (5, 3.0), (6, 6.0)):
        brake.note_primary(epoch, at)
    assert brake.engaged(6.0) and brake.patience(2.0, 6.0) == 4.0
    for epoch in range(7, 12):
        brake.note_primary(epoch, 6.0 + epoch)
    assert brake.patience(2.0, 20.0) == 16.0  # at most 8 x --broker-timeout
    assert brake.patience(0.0, 20.0) == 0.0  # "fence at once" stays so
    assert not brake.engaged(200.0) and brake.patience(2.0, 200.0) == 2.0  # a quiet minute


@given(st.lists(st.floats(min_value=0.0, max_value=600.0), max_size=40), st.floats(0.1, 10.0))
def test_patience_is_bounded_and_never_below_the_timeout(
    times: list[float], timeout: float
) -> None:
    brake = FenceBrake()
    now = 0.0
    for epoch, t in enumerate(sorted(times), start=1):
        now = t
        brake.note_primary(epoch, now)
        patience = brake.patience(timeout, now)
        assert timeout <= patience <= timeout * brake.max_factor
