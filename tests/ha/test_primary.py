"""The primary role without I/O: recovering, expected backups, timeout, guards.

The role machine (:class:`~broker.ha.role.HaRole`) decides; the primary's guards
(:class:`~broker.ha.primary.Primary`) hold and release confirms as it says.
"""

from __future__ import annotations

from broker.core.confirms import ConfirmHandle, PublisherConfirms
from broker.core.message import Message
from broker.core.vhost import VirtualHost
from broker.ha.primary import Primary
from broker.ha.replicate_level import ReplicateLevel
from broker.ha.state import HaState
from tests.ha.role_driver import RoleDriver


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def state(driver: RoleDriver) -> HaState:
    """The current state (a call, so mypy does not narrow it across events)."""
    return driver.state


def setup(
    expected: dict[str, str], level: ReplicateLevel = ReplicateLevel.ALL
) -> tuple[Clock, VirtualHost, RoleDriver, Primary]:
    clock = Clock()
    vhost = VirtualHost(clock=clock)
    vhost.declare_queue("q1")
    vhost.declare_queue("q2")
    vhost.declare_queue("local", arguments={"qpid.replicate": "none"})
    driver = RoleDriver(vhost, clock, replicate_default=level, backup_timeout=10.0)
    primary = driver.promote(expected)
    return clock, vhost, driver, primary


def publish(vhost: VirtualHost, queue: str, confirms: PublisherConfirms) -> ConfirmHandle:
    handle = confirms.publish()
    vhost.publish(vhost.exchange(""), Message("", queue, body=b"x", confirm=handle))
    handle.release()
    return handle


def test_no_expected_backups_is_active_at_once() -> None:
    _, vhost, driver, _primary = setup({})
    assert state(driver) is HaState.ACTIVE
    assert driver.transitions == [
        (HaState.READY, HaState.RECOVERING),
        (HaState.RECOVERING, HaState.ACTIVE),
    ]
    assert publish(vhost, "q1", PublisherConfirms()).settled


def test_recovering_holds_confirms_for_expected_backups() -> None:
    _, vhost, driver, primary = setup({"b1": "h1:5672", "b2": "h2:5672"})
    assert state(driver) is HaState.RECOVERING
    confirms = PublisherConfirms()
    held = publish(vhost, "q1", confirms)
    free = publish(vhost, "local", confirms)  # not replicated: not guarded
    assert not held.settled and free.settled
    assert primary.held_confirms() == 2  # one hold per expected backup


def test_active_when_every_expected_backup_is_ready() -> None:
    _, _vhost, driver, _primary = setup({"b1": "h1:5672"})
    driver.backup_connected("b1", "h1:5672")
    driver.queue_ready("b1", "q1")
    assert state(driver) is HaState.RECOVERING
    driver.queue_ready("b1", "q2")
    assert state(driver) is HaState.ACTIVE
    assert driver.role.ready_backups() == ["b1"]


def test_backup_timeout_releases_missing_backups_once_their_removal_is_committed() -> None:
    clock, vhost, driver, primary = setup({"b1": "h1:5672", "b2": "h2:5672"})
    driver.backup_connected("b1", "h1:5672")
    driver.queue_ready("b1", "q1")
    driver.queue_ready("b1", "q2")
    handle = publish(vhost, "q1", PublisherConfirms())
    assert not handle.settled
    clock.now += 9.9
    driver.tick()
    assert state(driver) is HaState.RECOVERING
    clock.now += 0.2
    driver.tick()
    assert state(driver) is HaState.ACTIVE
    assert driver.role.pending_removal() == ["b2"]
    assert primary.held_confirms() == 2  # b2 was in sync: held until its removal is committed
    driver.commit_in_sync({"b1"})
    assert driver.role.dropped == ["b2"]
    assert primary.held_confirms() == 1  # still held for b1, which is connected
    guard = primary.backups["b1"].guards["q1"]
    guard.acknowledged(guard.held_positions()[0])
    assert handle.settled


def test_in_sync_backup_gone_holds_confirms_until_its_removal_is_committed() -> None:
    _, vhost, driver, primary = setup({})
    driver.backup_connected("b1", "h1:5672")
    driver.queue_ready("b1", "q1")
    driver.queue_ready("b1", "q2")  # in sync from here
    handle = publish(vhost, "q2", PublisherConfirms())
    driver.backup_gone("b1")
    assert not handle.settled and driver.role.pending_removal() == ["b1"]
    driver.commit_in_sync({"b1"})  # the set still names it: held
    assert not handle.settled
    driver.commit_in_sync(set())
    assert handle.settled and primary.held_confirms() == 0


def test_disconnected_backup_releases_its_confirms() -> None:
    _, vhost, driver, _primary = setup({})
    driver.backup_connected("b1", "h1:5672")
    driver.stream_opened("b1", "q2")
    handle = publish(vhost, "q2", PublisherConfirms())
    assert not handle.settled
    driver.backup_gone("b1")
    assert handle.settled


def test_queue_created_later_is_guarded_but_does_not_delay_readiness() -> None:
    _, vhost, driver, primary = setup({"b1": "h1:5672"})
    driver.backup_connected("b1", "h1:5672")
    queue = vhost.declare_queue("late")
    primary.queue_declared(queue)
    assert not publish(vhost, "late", PublisherConfirms()).settled
    driver.queue_ready("b1", "q1")
    driver.queue_ready("b1", "q2")
    assert driver.role.backups["b1"].ready and state(driver) is HaState.ACTIVE


def test_deleted_queue_no_longer_delays_readiness() -> None:
    _, vhost, driver, _primary = setup({"b1": "h1:5672"})
    driver.backup_connected("b1", "h1:5672")
    driver.queue_ready("b1", "q1")
    queue = vhost.queues["q2"]
    vhost.delete_queue("q2")
    driver.queue_deleted(queue)
    assert state(driver) is HaState.ACTIVE


def test_replicate_none_by_default_guards_nothing() -> None:
    _, vhost, driver, _primary = setup({"b1": "h1:5672"}, level=ReplicateLevel.NONE)
    assert state(driver) is HaState.RECOVERING  # until b1 is back, or the timeout
    assert publish(vhost, "q1", PublisherConfirms()).settled
    driver.backup_connected("b1", "h1:5672")  # nothing to catch up: ready at once
    assert state(driver) is HaState.ACTIVE
