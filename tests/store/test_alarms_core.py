"""The resource alarms' core: samples in, raise/clear and block/unblock out (no I/O)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.core.alarms import (
    MIN_DISK_MARGIN,
    AlarmCleared,
    AlarmRaised,
    BlockPublishers,
    Resource,
    ResourceAlarms,
    UnblockPublishers,
    memory_limit_bytes,
    parse_size,
)

MB = 1000**2


def test_memory_alarm_raises_at_the_watermark_and_clears_below_the_margin() -> None:
    alarms = ResourceAlarms(100 * MB, None, hysteresis=0.1)
    assert alarms.memory_sample(99 * MB) == []
    assert alarms.memory_sample(100 * MB) == [
        AlarmRaised(Resource.MEMORY, 100 * MB, 100 * MB),
        BlockPublishers("low on memory"),
    ]
    assert alarms.blocked and alarms.reason == "low on memory"
    assert alarms.memory_sample(120 * MB) == []
    assert alarms.memory_sample(95 * MB) == []  # under the limit, not under the margin
    assert alarms.memory_sample(89 * MB) == [
        AlarmCleared(Resource.MEMORY, 89 * MB, 100 * MB),
        UnblockPublishers(),
    ]
    assert not alarms.blocked and alarms.reason is None


def test_disk_alarm_raises_below_the_limit_and_clears_above_the_margin() -> None:
    alarms = ResourceAlarms(None, 50 * MB)
    assert alarms.disk_sample(60 * MB) == []
    assert alarms.disk_sample(49 * MB) == [
        AlarmRaised(Resource.DISK, 49 * MB, 50 * MB),
        BlockPublishers("low on disk"),
    ]
    assert alarms.disk_sample(50 * MB) == []
    assert alarms.disk_sample(50 * MB + MIN_DISK_MARGIN + 2_500_000) == [
        AlarmCleared(Resource.DISK, 50 * MB + MIN_DISK_MARGIN + 2_500_000, 50 * MB),
        UnblockPublishers(),
    ]


def test_publishers_stay_blocked_until_the_last_alarm_clears() -> None:
    alarms = ResourceAlarms(100, 50 * MB, hysteresis=0)
    assert alarms.memory_sample(100)[-1] == BlockPublishers("low on memory")
    raised = alarms.disk_sample(0)
    assert raised == [AlarmRaised(Resource.DISK, 0, 50 * MB)]  # already blocked: no 2nd block
    assert alarms.reason == "low on memory and disk"
    assert alarms.memory_sample(10) == [AlarmCleared(Resource.MEMORY, 10, 100)]
    assert alarms.blocked
    assert alarms.disk_sample(60 * MB)[-1] == UnblockPublishers()


def test_a_write_failing_for_space_raises_the_disk_alarm_until_space_comes_back() -> None:
    alarms = ResourceAlarms(None, 10 * MB)
    assert alarms.disk_write_failed() == [
        AlarmRaised(Resource.DISK, None, 10 * MB),
        BlockPublishers("low on disk"),
    ]
    # The first sample after the failure is the base; free space must grow past it.
    assert alarms.disk_sample(200 * MB) == []
    assert alarms.disk_sample(200 * MB) == []
    assert alarms.disk_sample(202 * MB)[-1] == UnblockPublishers()


def test_a_write_failure_while_raised_changes_nothing_visible() -> None:
    alarms = ResourceAlarms(None, 10 * MB)
    alarms.disk_sample(MB)
    assert alarms.disk_write_failed() == []
    assert alarms.blocked


def test_zero_limits_switch_the_alarms_off() -> None:
    alarms = ResourceAlarms(0, 0)
    assert alarms.memory_sample(10**12) == []
    assert alarms.disk_sample(0) == []
    assert not alarms.blocked


@given(
    limit=st.integers(1, 10**9),
    hysteresis=st.floats(0, 0.5),
    samples=st.lists(st.tuples(st.booleans(), st.integers(0, 2 * 10**9)), max_size=60),
)
def test_block_and_unblock_alternate_and_follow_the_raised_alarms(
    limit: int, hysteresis: float, samples: list[tuple[bool, int]]
) -> None:
    alarms = ResourceAlarms(limit, limit, hysteresis=hysteresis)
    blocked = False
    for memory, value in samples:
        actions = alarms.memory_sample(value) if memory else alarms.disk_sample(value)
        for action in actions:
            if isinstance(action, BlockPublishers):
                assert not blocked
                blocked = True
            elif isinstance(action, UnblockPublishers):
                assert blocked
                blocked = False
        assert blocked == alarms.blocked == bool(alarms.raised)
        # A sample beyond the limit always leaves that alarm raised.
        if memory and value >= limit:
            assert Resource.MEMORY in alarms.raised
        if not memory and value < limit:
            assert Resource.DISK in alarms.raised


@given(value=st.integers(0, 10**6), raised=st.integers(0, 10**6))
def test_memory_alarm_does_not_flap_inside_the_margin(value: int, raised: int) -> None:
    alarms = ResourceAlarms(1000, None, hysteresis=0.1)
    alarms.memory_sample(1000 + raised)
    cleared = alarms.memory_sample(value)
    assert bool(cleared) == (value < 900)


@pytest.mark.parametrize(
    ("text", "value"),
    [("1048576", 1048576), ("50MB", 50 * MB), ("50 mib", 50 * 1024**2), ("2G", 2 * 1024**3)],
)
def test_sizes(text: str, value: int) -> None:
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "-1", "1.5GB", "12 parsecs", "MB"])
def test_bad_sizes(text: str) -> None:
    with pytest.raises(ValueError, match="expected a size"):
        parse_size(text)


def test_memory_limit_is_a_size_or_a_share_of_memory() -> None:
    assert memory_limit_bytes("40%", 1000) == 400
    assert memory_limit_bytes("12.5 %", 1000) == 125
    assert memory_limit_bytes("2GiB", 1000) == 2 * 1024**3
    assert memory_limit_bytes("0", 1000) == 0
    for bad in ("140%", "lots", "-3%"):
        with pytest.raises(ValueError, match="share of memory"):
            memory_limit_bytes(bad, 1000)
