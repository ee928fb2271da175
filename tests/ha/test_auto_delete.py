"""Orphaned auto-delete queues of a new primary, without sockets: time is a number."""

from __future__ import annotations

from typing import Any

import pytest

from broker.core.message import Entry
from broker.core.queue import Queue
from broker.core.vhost import VirtualHost
from broker.ha.auto_delete import AUTO_DELETE_TIMEOUT_ARG, OrphanedQueues, grace_of
from tests.ha.role_driver import RoleDriver


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Idle:
    """A consumer that takes nothing (only its presence counts here)."""

    tag = "c1"
    exclusive = False

    def can_deliver(self) -> bool:
        return False

    def deliver(self, queue: Queue, entry: Entry) -> None:
        raise AssertionError("no delivery expected")


def attach(vhost: VirtualHost, name: str) -> Idle:
    consumer = Idle()
    vhost.queues[name].add_consumer(consumer)
    return consumer


def names(queues: list[Any]) -> list[str]:
    return [q.name for q in queues]


def test_grace_is_the_queue_argument_else_the_default() -> None:
    vhost = VirtualHost(clock=Clock())
    plain = vhost.declare_queue("plain", auto_delete=True)
    quick = vhost.declare_queue("quick", auto_delete=True, arguments={AUTO_DELETE_TIMEOUT_ARG: 1})
    text = vhost.declare_queue("text", auto_delete=True, arguments={AUTO_DELETE_TIMEOUT_ARG: "2.5"})
    assert grace_of(plain, 10.0) == 10.0
    assert grace_of(quick, 10.0) == 1.0
    assert grace_of(text, 10.0) == 2.5
    for bad in (-1, "soon", float("nan"), float("inf"), True, [3]):
        odd = vhost.declare_queue(
            f"odd-{bad!r}", auto_delete=True, arguments={AUTO_DELETE_TIMEOUT_ARG: bad}
        )
        assert grace_of(odd, 10.0) == 10.0


def test_only_unused_auto_delete_queues_are_orphans() -> None:
    vhost = VirtualHost(clock=Clock())
    vhost.declare_queue("durable-ish")
    vhost.declare_queue("orphan", auto_delete=True)
    vhost.declare_queue("in-use", auto_delete=True)
    attach(vhost, "in-use")
    orphans = OrphanedQueues(vhost.queues.values(), now=0.0, default_grace=5.0)
    assert orphans.waiting(0.0) == {"orphan": 5.0}
    assert orphans.due(4.99) == []
    assert names(orphans.due(5.0)) == ["orphan"]
    assert orphans.due(100.0) == [] and len(orphans) == 0  # handed out once


def test_a_consumer_within_the_grace_period_keeps_the_queue() -> None:
    vhost = VirtualHost(clock=Clock())
    vhost.declare_queue("kept", auto_delete=True)
    vhost.declare_queue("gone", auto_delete=True)
    orphans = OrphanedQueues(vhost.queues.values(), now=0.0, default_grace=5.0)
    attach(vhost, "kept")
    assert names(orphans.due(1.0)) == []
    assert orphans.waiting(1.0) == {"gone": 4.0}  # the re-attached queue is no orphan now
    assert names(orphans.due(5.0)) == ["gone"]
    assert len(orphans) == 0


def test_a_queue_deleted_or_redeclared_meanwhile_is_forgotten() -> None:
    vhost = VirtualHost(clock=Clock())
    vhost.declare_queue("q", auto_delete=True)
    orphans = OrphanedQueues(vhost.queues.values(), now=0.0, default_grace=5.0)
    vhost.delete_queue("q")
    vhost.declare_queue("q", auto_delete=True)  # a new queue of the same name: not an orphan
    assert orphans.waiting(1.0) == {}
    assert orphans.due(10.0) == []


def test_per_queue_grace() -> None:
    vhost = VirtualHost(clock=Clock())
    vhost.declare_queue("slow", auto_delete=True, arguments={AUTO_DELETE_TIMEOUT_ARG: 30})
    vhost.declare_queue("now", auto_delete=True, arguments={AUTO_DELETE_TIMEOUT_ARG: 0})
    orphans = OrphanedQueues(vhost.queues.values(), now=10.0, default_grace=5.0)
    assert names(orphans.due(10.0)) == ["now"]
    assert names(orphans.due(39.9)) == []
    assert names(orphans.due(40.0)) == ["slow"]


@pytest.mark.parametrize("grace", [None, 2.0])
def test_primary_hands_out_orphans_after_the_grace_period(grace: float | None) -> None:
    clock = Clock()
    vhost = VirtualHost(clock=clock)
    vhost.declare_queue("orphan", auto_delete=True)
    vhost.declare_queue("kept", auto_delete=True)
    vhost.declare_queue("local", auto_delete=True, arguments={"qpid.replicate": "none"})
    vhost.declare_queue("plain")
    driver = RoleDriver(vhost, clock, backup_timeout=10.0)
    if grace is not None:
        driver.auto_delete_grace = grace
    primary = driver.promote({})
    wait = 10.0 if grace is None else grace  # the default grace is backup_timeout
    attach(vhost, "kept")
    clock.now += wait - 0.01
    primary.tick()
    assert primary.take_orphans() == []
    clock.now += 0.01
    primary.tick()
    assert names(primary.take_orphans()) == ["orphan"]  # not the unreplicated one
    primary.tick()
    assert primary.take_orphans() == []
