"""When freed heap memory is handed back (HeapReturn), and the monitor that does it."""

from __future__ import annotations

import threading

from broker.core.alarms import ResourceAlarms
from broker.core.heap_return import RELEASE_STEP, HeapReturn
from broker.store.resource_monitor import ResourceMonitor, _OffLoopTrim

MIB = 1024 * 1024


def test_a_trim_once_the_held_bytes_fell_by_a_step_never_while_they_grow() -> None:
    rule = HeapReturn(release_step=32 * MIB)
    assert not any(rule.sample(n * MIB) for n in range(0, 500, 10))  # a queue fills
    assert not rule.sample(470 * MIB)  # 20 MiB released: not yet
    assert rule.sample(450 * MIB)  # 40 MiB since the high of 490
    assert not rule.sample(440 * MIB)  # 10 since the last trim
    assert rule.sample(415 * MIB)
    assert [rule.sample(n * MIB) for n in (0, 0, 0)] == [True, False, False]  # deleted
    assert rule.trims == 3


def test_the_monitor_trims_when_the_broker_released_messages() -> None:
    held = [0]
    trims: list[int] = []
    monitor = ResourceMonitor(
        ResourceAlarms(0, 0),
        None,
        log=None,
        on_block=lambda _reason: None,
        held=lambda: held[0],
        trim=lambda: trims.append(held[0]),
    )
    for size in (100 * MIB, 300 * MIB, 300 * MIB, 300 * MIB - RELEASE_STEP + 1):
        held[0] = size
        monitor.sample()
    assert trims == []
    held[0] = 0  # the queue was deleted
    monitor.sample()
    monitor.sample()
    assert trims == [0]


def test_the_end_of_a_drain_is_handed_back_in_halving_trims() -> None:
    rule = HeapReturn(release_step=32 * MIB, smallest_step=4 * MIB)
    rule.sample(300 * MIB)
    trimmed_at = [n for n in range(300, -1, -1) if rule.sample(n * MIB)]
    # Every 32 MiB down to 44 MiB, then half of the last trim's level, then 4 MiB down.
    assert trimmed_at[:8] == [268, 236, 204, 172, 140, 108, 76, 44]
    assert trimmed_at[8:] == [22, 11, 5, 1]
    assert not rule.sample(3 * MIB) and not rule.sample(0)  # small wobbles: no trim


def test_a_settled_trim_once_the_held_bytes_stay_still_after_a_release() -> None:
    rule = HeapReturn(release_step=32 * MIB, settle_samples=8)
    assert not any(rule.sample(n * MIB) for n in range(0, 300, 10))  # a queue fills
    assert not any(rule.sample(290 * MIB) for _ in range(50))  # still, but nothing released
    assert rule.sample(0)  # deleted: the release's trim
    # What was freed after it (unacknowledged messages, their objects) goes back once the
    # held bytes stayed still for 8 samples: one settled trim, not one a sample.
    assert [rule.sample(0) for _ in range(12)] == [False] * 7 + [True] + [False] * 4
    assert rule.settled_trims == 1


def test_no_settled_trim_while_the_held_bytes_move() -> None:
    rule = HeapReturn(release_step=32 * MIB, settle_samples=8)
    rule.sample(100 * MIB)
    assert rule.sample(60 * MIB)
    moving = [rule.sample((60 + (n % 2) * 2) * MIB) for n in range(40)]  # 60, 62, 60 MiB ...
    assert not any(moving)
    assert [rule.sample(60 * MIB) for _ in range(9)] == [False] * 8 + [True]  # still at last


def test_the_trim_runs_off_the_loop_one_at_a_time() -> None:
    started = threading.Event()
    release = threading.Event()
    calls: list[tuple[str, int]] = []

    def slow_trim(pad: int) -> int:
        calls.append((threading.current_thread().name, pad))
        started.set()
        assert release.wait(30)
        return 1

    trim = _OffLoopTrim(slow_trim)
    trim()
    assert started.wait(30)
    trim()  # one is running: nothing more
    trim()
    release.set()
    assert calls == [("malloc-trim", 0)]
