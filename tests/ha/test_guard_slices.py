"""A new backup's guards made in slices (issue 25, "no long stalls": 10,000 queues at once
were one step of the loop of 200-300 ms), an expected, in-sync one's at once."""

from __future__ import annotations

from broker.core.confirms import PublisherConfirms
from broker.ha.role_events import GuardBackup
from common.slices import run_steps
from tests.ha.test_primary import publish, setup


def test_a_new_backup_is_guarded_in_slices_an_expected_one_at_once() -> None:
    _, _vhost, driver, _primary = setup({"b1": "h1:5672"})
    at_promotion = [a for a in driver.actions if isinstance(a, GuardBackup)]
    assert [(a.backup_id, a.sliced) for a in at_promotion] == [("b1", False)]
    driver.backup_connected("b9", "h9:5672")
    connected = [a for a in driver.actions if isinstance(a, GuardBackup)][len(at_promotion) :]
    assert [(a.backup_id, a.sliced) for a in connected] == [("b9", True)]


def test_guards_come_a_slice_at_a_time_and_the_streams_own_are_kept() -> None:
    _, vhost, _driver, primary = setup({})
    for i in range(1200):
        vhost.declare_queue(f"s{i}")
    steps = primary.guard_backup_steps("b9", "h9:5672", size=500)
    next(steps)
    backup = primary.backups["b9"]  # known at once: its streams find it
    assert len(backup.guards) == 500
    # not guarded yet: its confirm does not wait for b9 (not in sync: by the time it is,
    # its stream on the queue has made the guard, and caught up from its first position)
    assert publish(vhost, "s1100", PublisherConfirms()).settled
    late = vhost.queues["s1100"]
    stream_guard = backup.guard(late)  # the queue's stream opened meanwhile
    assert not publish(vhost, "s1100", PublisherConfirms()).settled
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
