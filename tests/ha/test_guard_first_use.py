"""A promotion's expected backups are guarded on each queue at its first use (issue 25).

Their guards on every queue before the broker served were 70-140 ms of CPU at 10,000
queues on the fail-over's path; now every queue is marked (``Queue.before_use``) and the
guards come at the queue's first enqueue, delivery or purge, or when the backup's stream of
it opens. What a confirm, a delivery and a purge-ok wait for is what they waited for with
the guards made before serving: real queues, guards and delivery watermarks, no sockets.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from broker.core.confirms import ConfirmHandle, PublisherConfirms
from broker.core.message import Message
from broker.core.vhost import VirtualHost
from broker.core.vhosts import VirtualHosts, queue_key
from broker.ha.delivery_watermark import DeliveryWatermark
from broker.ha.id_era import ERA_SHIFT
from broker.ha.primary import Primary
from broker.ha.primary_start import entered_steps, in_turns, start_primary
from broker.ha.replicate_level import ReplicateLevel, queue_level
from common.slices import Steps, run_steps
from tests.core.fakes import FakeConsumer
from tests.ha.test_primary import Clock


def promoted(
    queues: int = 3, expected: dict[str, str] | None = None
) -> tuple[VirtualHost, Primary]:
    """A vhost of ``queues`` replicated queues with a message each (from the old primary)
    and one not replicated, promoted: the era entered, ``expected`` guarded on first use."""
    clock = Clock()
    vhost = VirtualHost(clock=clock)
    for i in range(queues):
        vhost.declare_queue(f"q{i}")
        vhost.publish(vhost.exchange(""), Message("", f"q{i}", body=b"old"))
    vhost.declare_queue("local", arguments={"qpid.replicate": "none"})
    primary = Primary(
        vhost, replicate_default=ReplicateLevel.ALL, clock=clock, auto_delete_grace=10.0
    )
    hook = primary.owe_first_use({"b1": "h1:5672"} if expected is None else expected)
    run_steps(entered_steps(list(vhost.queues.values()), 2, hook, []))  # as a promotion
    return vhost, primary


def publish(vhost: VirtualHost, queue: str) -> ConfirmHandle:
    handle = PublisherConfirms().publish()
    vhost.publish(vhost.exchange(""), Message("", queue, body=b"new", confirm=handle))
    handle.release()
    return handle


def test_the_backups_are_known_at_once_and_no_queue_is_guarded_before_its_first_use() -> None:
    vhost, primary = promoted()
    backup = primary.backups["b1"]  # the role's GuardBackup and the link's streams find it
    assert backup.guards == {} and not backup.cancelled
    assert primary.guard_backup("b1", "h1:5672") is backup  # the role's GuardBackup
    assert all(q.delivery_gate is None for q in vhost.queues.values())


def test_a_first_publish_is_held_for_the_backup_from_the_era_on() -> None:
    vhost, primary = promoted()
    era_last = vhost.queues["q1"].last_position
    held = publish(vhost, "q1")
    backup = primary.backups["b1"]
    assert not held.settled and sorted(backup.guards) == ["q1"]
    guard = backup.guards["q1"]
    assert guard.first_guarded == era_last + 1 == vhost.queues["q1"].last_position
    guard.acknowledged(guard.first_guarded)
    assert held.settled
    # a queue not replicated is never guarded, used or not
    assert publish(vhost, "local").settled and "local" not in backup.guards


def test_a_first_delivery_waits_for_the_backups_watermark() -> None:
    """The message the old primary may have delivered is not delivered before the backup
    acknowledged a watermark covering it (as with a guard made before serving)."""
    vhost, primary = promoted()
    queue = vhost.queues["q0"]
    consumer = FakeConsumer()
    queue.add_consumer(consumer)
    assert consumer.deliveries == []
    guard = primary.backups["b1"].guards["q0"]
    gate = DeliveryWatermark.of(queue)
    assert gate.announced >= queue.last_position
    gate.acknowledged(guard, gate.announced)
    queue.dispatch()
    assert [entry.message.body for entry, _ in consumer.deliveries] == [b"old"]


def test_a_first_get_and_a_first_purge_guard_the_queue() -> None:
    vhost, primary = promoted()
    assert vhost.queues["q0"].get() is None  # held back by the gate made at its first use
    assert "q0" in primary.backups["b1"].guards
    vhost.queues["q2"].purge()
    assert "q2" in primary.backups["b1"].guards


def test_a_stream_opened_first_keeps_its_guard() -> None:
    vhost, primary = promoted()
    backup = primary.backups["b1"]
    stream_guard = backup.guard(vhost.queues["q1"])  # its stream of q1 opened
    held = publish(vhost, "q1")
    assert backup.guards["q1"] is stream_guard and not held.settled


def test_every_expected_backup_is_guarded_at_the_first_use() -> None:
    vhost, primary = promoted(expected={"b1": "h1:5672", "b2": "h2:5672"})
    held = publish(vhost, "q0")
    for backup_id in ("b1", "b2"):
        guard = primary.backups[backup_id].guards["q0"]
        assert not held.settled
        guard.acknowledged(guard.first_guarded)
    assert held.settled


def test_a_released_backup_owes_no_guard() -> None:
    vhost, primary = promoted(expected={"b1": "h1:5672", "b2": "h2:5672"})
    primary.release("b2")
    held = publish(vhost, "q0")
    assert "b2" not in primary.backups and "q0" in primary.backups["b1"].guards
    guard = primary.backups["b1"].guards["q0"]
    guard.acknowledged(guard.first_guarded)
    assert held.settled
    # a new link of b2 is a new backup: guarded by its streams, not by the promotion
    again = primary.guard_lazily("b2", "h2:5672")
    publish(vhost, "q1")
    assert "q1" in primary.backups["b1"].guards and "q1" not in again.guards


def test_a_queue_deleted_or_declared_after_the_promotion() -> None:
    vhost, primary = promoted()
    doomed = vhost.queues["q2"]
    vhost.delete_queue("q2")
    doomed.first_use()  # a late use of the deleted queue guards nothing
    assert "q2" not in primary.backups["b1"].guards
    late = vhost.declare_queue("late")
    primary.queue_declared(late)  # as the primary's vhost listener does: guarded at once
    assert "late" in primary.backups["b1"].guards


def test_the_promotion_marks_every_queue_a_slice_at_a_time() -> None:
    """One pass, a slice at a time: each queue's era, its first-use mark and, for an
    auto-delete one, its place among the orphans' candidates."""
    vhost = VirtualHost()
    for i in range(1200):
        vhost.declare_queue(f"s{i}", auto_delete=i % 100 == 0)
    primary = Primary(
        vhost, replicate_default=ReplicateLevel.ALL, clock=Clock(), auto_delete_grace=10.0
    )
    hook = primary.owe_first_use({"b3": "h3:5672"})
    assert hook is not None and "b3" in primary.backups  # known at once
    auto_delete: list[Any] = []
    steps = entered_steps(list(vhost.queues.values()), 2, hook, auto_delete, size=500)
    next(steps)
    assert sum(q.before_use is not None for q in vhost.queues.values()) == 500
    assert sum(q.last_position == 2 << ERA_SHIFT for q in vhost.queues.values()) == 500
    assert [q.name for q in auto_delete] == [f"s{i}" for i in range(0, 500, 100)]
    run_steps(steps)
    assert all(q.before_use is not None for q in vhost.queues.values())
    assert len(auto_delete) == 12
    primary.orphaned(auto_delete)
    assert len(primary.orphans) == 12
    assert primary.owe_first_use({}) is None  # no backup expected: nothing to mark


class Lineage:
    async def promoted(self, epoch: int) -> None:
        await asyncio.sleep(0)


class Identity:
    def __init__(self, error: Exception | None = None) -> None:
        self.error = error

    async def promoted(self) -> None:
        if self.error is not None:
            raise self.error


def _start(vhost: VirtualHost, identity: Identity) -> Primary:
    args: dict[str, Any] = {
        "epoch": 3,
        "lineage": Lineage(),
        "identity": identity,
        "replicate_default": ReplicateLevel.ALL,
        "clock": Clock(),
        "auto_delete_grace": 10.0,
    }
    return asyncio.run(start_primary(vhost, {"b1": "h1:5672"}, **args))


def test_start_primary_guards_on_first_use() -> None:
    vhost = VirtualHost(clock=Clock())
    vhost.declare_queue("q0")
    primary = _start(vhost, Identity())
    assert primary.backups["b1"].guards == {}
    assert vhost.queues["q0"].last_position == 3 << 40  # the era, before anything serves
    assert not publish(vhost, "q0").settled


def test_a_failed_promotion_leaves_no_guard_to_be_made() -> None:
    vhost = VirtualHost(clock=Clock())
    vhost.declare_queue("q0")
    with pytest.raises(OSError):
        _start(vhost, Identity(OSError("disk full")))
    queue = vhost.queues["q0"]
    assert publish(vhost, "q0").settled  # not primary: nothing waits for b1
    assert queue.delivery_gate is None and queue.before_use is None


@pytest.mark.parametrize("default", list(ReplicateLevel))
def test_the_replicated_queue_names_of_every_vhost(default: ReplicateLevel) -> None:
    """The expected backups' catch-up set (PrimaryStarted's queues), in one pass."""
    hosts = VirtualHosts()
    for host in (hosts.default, hosts.create("v1")[0]):
        host.declare_queue("plain")
        host.declare_queue("all", arguments={"qpid.replicate": "all"})
        host.declare_queue("none", arguments={"qpid.replicate": "none"})
        host.declare_queue("config", arguments={"qpid.replicate": "configuration"})
    primary = Primary(hosts, replicate_default=default, clock=Clock(), auto_delete_grace=1.0)
    expected = {
        key for key, q in hosts.queues.items() if queue_level(q, default) is ReplicateLevel.ALL
    }
    assert primary.replicated_queue_names() == expected
    assert "all" in expected and queue_key("v1", "all") in expected


def test_a_promotions_slices_share_a_turn_while_its_cpu_budget_lasts() -> None:
    """The promotion's slices (the era, the marks) run one after the other while the turn
    has CPU left, then at the next turn: at load 20-30 a turn a slice cost a promotion
    0.2-0.7 s for 5-6 ms of work at 10,000 queues (issue 25)."""
    clock = [0.0]
    ran: list[tuple[int, int]] = []  # (turn, slice)

    def slices() -> Steps[None]:
        for number in range(6):
            if number:
                yield
            ran.append((turns[0], number))
            clock[0] += 0.004  # each slice 4 ms of CPU

    turns = [0]

    async def main() -> None:
        work = asyncio.ensure_future(in_turns(slices(), budget=0.01, cpu=lambda: clock[0]))
        while not work.done():
            await asyncio.sleep(0)
            turns[0] += 1
        await work

    asyncio.run(main())
    # 10 ms a turn: three slices of 4 ms (the third spends it), then the next turn
    assert [number for _, number in ran] == list(range(6))
    per_turn: dict[int, int] = {}
    for turn, _ in ran:
        per_turn[turn] = per_turn.get(turn, 0) + 1
    assert list(per_turn.values()) == [3, 3]
