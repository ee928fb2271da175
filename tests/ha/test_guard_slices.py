"""Who a confirm waits for at scale (issue 25): a new backup, not in sync, is guarded on a
queue only from its stream of that queue on (a catching-up backup's 10,000 queues held a
confirm of the queue it subscribed last for the whole catch-up, 30 s in the scale soak);
an expected, in-sync one on every queue before the broker serves, in slices; and a dropped
backup's guards are released a slice a turn of the loop (10,000 at once: one step of
11-12 ms)."""

from __future__ import annotations

import asyncio

from broker.core.confirms import PublisherConfirms
from broker.ha.primary_start import loop_call_soon
from broker.ha.role_events import GuardBackup
from common.slices import SLICE, run_steps
from tests.ha.test_primary import publish, setup


def test_a_new_backup_is_guarded_lazily_an_expected_one_at_once() -> None:
    _, _vhost, driver, _primary = setup({"b1": "h1:5672"})
    at_promotion = [a for a in driver.actions if isinstance(a, GuardBackup)]
    assert [(a.backup_id, a.lazy) for a in at_promotion] == [("b1", False)]
    driver.backup_connected("b9", "h9:5672")
    connected = [a for a in driver.actions if isinstance(a, GuardBackup)][len(at_promotion) :]
    assert [(a.backup_id, a.lazy) for a in connected] == [("b9", True)]


def test_a_new_backup_holds_a_queues_confirms_from_its_stream_of_the_queue_on() -> None:
    _, vhost, driver, primary = setup({})
    driver.backup_connected("b9", "h9:5672")
    backup = primary.backups["b9"]  # known at once: its streams find it
    assert backup.guards == {}
    # its stream of q1 not open yet: q1's confirms do not wait for it (not in sync: by the
    # time it is, its stream has made the guard and caught up from its first position)
    assert publish(vhost, "q1", PublisherConfirms()).settled
    driver.stream_opened("b9", "q1")
    first = backup.guards["q1"].first_guarded
    held = publish(vhost, "q1", PublisherConfirms())
    assert not held.settled and first == vhost.queues["q1"].last_position
    # a queue declared after it connected is not in its catch-up set: guarded at once
    late = vhost.declare_queue("late")
    primary.queue_declared(late)
    assert not publish(vhost, "late", PublisherConfirms()).settled
    # ready only through its streams: each queue of its catch-up set guarded by then
    driver.queue_ready("b9", "q1")
    assert not driver.role.ready("b9")
    driver.queue_ready("b9", "q2")
    assert driver.role.ready("b9") and sorted(backup.guards) == ["late", "q1", "q2"]
    assert driver.role.in_sync_wanted() == ["b9"]
    backup.guards["q1"].acknowledged(first)
    assert held.settled


def test_an_expected_backups_guards_come_a_slice_at_a_time_before_it_serves() -> None:
    _, vhost, _driver, primary = setup({})
    for i in range(1200):
        vhost.declare_queue(f"s{i}")
    steps = primary.guard_backup_steps("b9", "h9:5672", size=500)
    next(steps)
    backup = primary.backups["b9"]  # known at once
    assert len(backup.guards) == 500
    late = vhost.queues["s1100"]
    stream_guard = backup.guard(late)  # made meanwhile: kept
    vhost.delete_queue("s1199")
    run_steps(steps)
    assert backup.guards["s1100"] is stream_guard
    assert "s1199" not in backup.guards
    assert len(backup.guards) == 2 + 1200 - 1  # q1, q2 and every s but the deleted one


def test_a_backup_dropped_meanwhile_gets_no_more_guards() -> None:
    _, vhost, _driver, primary = setup({})
    for i in range(1200):
        vhost.declare_queue(f"s{i}")
    steps = primary.guard_backup_steps("b9", "h9:5672", size=500)
    next(steps)
    backup = primary.backups["b9"]
    primary.release("b9")
    run_steps(steps)
    assert backup.cancelled and backup.guards == {}
    assert publish(vhost, "s1", PublisherConfirms()).settled


QUEUES = 2 * SLICE + 200  # three slices


def test_a_dropped_backups_guards_are_released_a_slice_a_turn() -> None:
    """The role's ReleaseGuards on a loop: the backup is forgotten in the step, its guards
    released at most SLICE a turn, every held confirm by the last."""
    _, vhost, _driver, primary = setup({})
    primary.call_soon = loop_call_soon  # as the broker's (broker/ha/primary_start.py)
    names = [f"s{i}" for i in range(QUEUES)]
    for name in names:
        vhost.declare_queue(name)
    run_steps(primary.guard_backup_steps("b9", "h9:5672"))
    backup = primary.backups["b9"]
    guards = list(backup.guards.values())
    confirms = PublisherConfirms()
    held = [publish(vhost, name, confirms) for name in names[:: SLICE // 2]]
    assert not any(h.settled for h in held)

    async def release() -> tuple[int, list[int]]:
        primary.release("b9")
        in_the_step = sum(g.cancelled for g in guards)
        assert "b9" not in primary.backups and backup.cancelled
        per_turn: list[int] = []
        done = in_the_step
        while done < len(guards):
            await asyncio.sleep(0)
            now = sum(g.cancelled for g in guards)
            per_turn.append(now - done)
            done = now
        return in_the_step, per_turn

    in_the_step, per_turn = asyncio.run(release())
    assert in_the_step <= SLICE and max(per_turn) <= SLICE  # never all in one step
    assert len([n for n in per_turn if n]) >= 2
    assert all(h.settled for h in held) and primary.held_confirms() == 0


def test_without_a_loop_a_dropped_backups_guards_are_released_at_once() -> None:
    _, vhost, _driver, primary = setup({"b1": "h1:5672"})
    held = publish(vhost, "q1", PublisherConfirms())
    assert not held.settled
    primary.release("b1")
    assert held.settled and primary.held_confirms() == 0
