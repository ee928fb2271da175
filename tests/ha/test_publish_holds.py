"""What holds a publish's confirm, and in what order (``PUBLISH_HOLDS``, queue_contracts.py).

In process, with the real message store on a real directory and the real HA queue guards of
two backups on a durable queue: no broker, no sockets. A publish takes the channel's
routing hold, then the disk's, then each guarded backup's, in that order whatever order the
holders registered in; the confirm goes out only once every one of them is released.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path

from pamqp import commands

# the Python classes (the reference the native ones are held to): a handle that notes its
# holders is a subclass of one, numbered by hand
from broker.core.confirms import PythonConfirmHandle, PythonPublisherConfirms
from broker.core.message import Entry, Message
from broker.core.queue import Queue
from broker.core.queue_contracts import (
    CONFIRM_GATES,
    CONFIRM_PATH,
    PUBLISH_HOLDS,
    Gate,
    Hold,
    ObserverRole,
)
from broker.core.vhost import VirtualHost
from broker.ha.ha_broker import HaBroker
from broker.ha.queue_guard import QueueGuard
from broker.ha.role_events import LeaseGranted
from broker.liveness import LeaseOffers, RoleNote
from broker.options import parse_options
from broker.store.journal import Journal, SyncPolicy
from broker.store.message_store import MessageStore
from common.polling import poll_until_async
from tests.amqp.helpers import Client, FakeClock, make_context
from tests.ha.test_ha_broker import open_connection

PERSISTENT = bytes.fromhex("1000") + b"\x02"  # property flags: delivery-mode only; mode 2


class RecordingHandle(PythonConfirmHandle):
    """A confirm handle that notes who holds it, in order."""

    def __init__(self, owner: PythonPublisherConfirms, seq: int) -> None:
        super().__init__(owner, seq)
        self.holders: list[object] = []
        self.releases = 0

    def hold(self) -> None:
        self.holders.append(sys._getframe(1).f_locals.get("self"))
        super().hold()

    def release(self, ok: bool = True) -> None:
        self.releases += 1
        super().release(ok)


def _hold_of(holder: object) -> Hold:
    if isinstance(holder, MessageStore):
        return Hold.DISK
    assert isinstance(holder, QueueGuard), holder
    return Hold.BACKUP


def test_the_table_starts_with_routing_and_follows_the_observer_order() -> None:
    holds = [hold for hold, _role, _released in PUBLISH_HOLDS]
    assert holds == [Hold.ROUTING, Hold.DISK, Hold.BACKUP]
    roles = [role for _hold, role, _released in PUBLISH_HOLDS]
    assert roles[0] is None  # the publishing channel's own
    assert roles[1:] == sorted(r for r in roles[1:] if r is not None)


def test_a_publish_takes_its_holds_in_the_table_order_and_settles_after_all(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        journal = Journal(tmp_path, sync=SyncPolicy.FSYNC)
        vhost = VirtualHost()
        store = MessageStore(journal, vhost)
        store.recover_into(journal.recover())
        journal.start()
        queue = vhost.declare_queue("q", durable=True)
        guards = [QueueGuard(queue, "backup-1"), QueueGuard(queue, "backup-2")]
        # The store registers again after the guards (as after a restore): still first.
        queue.unobserve(store)
        queue.observe(store, ObserverRole.STORE)
        assert queue.observers == [store, *guards]

        confirms = PythonPublisherConfirms()
        handle = RecordingHandle(confirms, 1)
        confirms._next = 2  # the handle is tag 1, as confirms.publish() would number it
        message = Message("", "q", PERSISTENT, b"m", confirm=handle)
        vhost.publish(vhost.exchange(""), message)
        handle.release()  # routing done, as the channel does

        taken = [_hold_of(holder) for holder in handle.holders]
        assert taken == [Hold.DISK, Hold.BACKUP, Hold.BACKUP]
        assert handle.holders[1:] == guards  # the backups in the order they were guarded
        table = [hold for hold, _role, _released in PUBLISH_HOLDS]
        assert [Hold.ROUTING, *taken] == sorted([Hold.ROUTING, *taken], key=table.index)

        position = queue.last_position
        await poll_until_async(lambda: handle.releases == 2, 10, "the disk's release")
        assert not handle.settled  # routed and on disk, but no backup has it yet
        guards[0].acknowledged(position)
        assert not handle.settled
        guards[1].acknowledged(position)
        assert handle.settled
        assert [(r.delivery_tag, r.ack) for r in confirms.take_replies()] == [(1, True)]
        assert await journal.close()

    asyncio.run(scenario())


def test_observers_are_told_in_role_order_whatever_order_they_came_in() -> None:
    heard: list[str] = []

    class Observer:
        def __init__(self, name: str) -> None:
            self.name = name

        def enqueued(self, queue: Queue, entry: Entry) -> None:
            heard.append(self.name)

        def enqueued_all(self, queue: Queue, entries: Sequence[Entry]) -> None:
            for entry in entries:
                self.enqueued(queue, entry)

        def dequeued(self, queue: Queue, entry: Entry) -> None:
            pass

        def dequeued_all(self, queue: Queue, entries: Sequence[Entry]) -> None:
            for entry in entries:
                self.dequeued(queue, entry)

    queue = Queue("q", clock=lambda: 0.0)
    order = [
        ("stream", ObserverRole.STREAM),
        ("guard-1", ObserverRole.GUARD),
        ("subscription", ObserverRole.REPLICATION),
        ("store", ObserverRole.STORE),
        ("guard-2", ObserverRole.GUARD),
    ]
    observers = {name: Observer(name) for name, _ in order}
    for name, role in order:
        queue.observe(observers[name], role)
    queue.enqueue(Message("", "q", PERSISTENT, b"x"))
    assert heard == ["store", "guard-1", "guard-2", "subscription", "stream"]
    queue.unobserve(observers["guard-1"])
    queue.unobserve(observers["guard-1"])  # twice: nothing
    heard.clear()
    queue.enqueue(Message("", "q", PERSISTENT, b"y"))
    assert heard == ["store", "guard-2", "subscription", "stream"]


def test_the_confirm_path_is_the_holds_then_the_serving_gate() -> None:
    assert CONFIRM_PATH == (Hold.ROUTING, Hold.DISK, Hold.BACKUP, Gate.SERVING)
    assert [gate for gate, _asker, _opens in CONFIRM_GATES] == [Gate.SERVING]


def _leased_primary(tmp_path: Path) -> tuple[HaBroker, FakeClock, list[str]]:
    """An HA primary in process (no backups, no store) whose cluster manager granted it a
    1.5 s lease; its fences noted."""
    ha, clock, fences = _ha_broker(tmp_path)
    asyncio.run(ha.promote(epoch=1))
    ha.handle(LeaseGranted(1.5, clock.now))
    return ha, clock, fences


def _ha_broker(tmp_path: Path) -> tuple[HaBroker, FakeClock, list[str]]:
    options = parse_options(
        ["--ha-cluster=yes", "--ha-brokers-url=127.0.0.1:1", "--ha-replicate=all"]
    )
    clock = FakeClock()
    ctx = make_context(clock)
    fences: list[str] = []
    ha = HaBroker(
        ctx.vhost,
        ctx,
        options,
        amqp_port=lambda: 5672,
        on_fenced=fences.append,
        lease_offers=LeaseOffers(),
    )
    return ha, clock, fences


def _confirm_channel(ha: HaBroker) -> Client:
    """A client of ``ha`` with channel 1 in confirm mode and a queue "leased"."""
    client = open_connection(ha, {})
    client.expect(commands.Connection.OpenOk)
    client.send(1, commands.Channel.Open())
    client.send(1, commands.Confirm.Select())
    client.send(1, commands.Queue.Declare(queue="leased"))
    client.take()
    return client


def _publish(client: Client) -> list[int]:
    """Publish once: the confirms written (delivery tags)."""
    client.publish(1, b"m", routing_key="leased")
    return [f.delivery_tag for _, f in client.take() if isinstance(f, commands.Basic.Ack)]


def test_the_gate_is_asked_as_the_reply_is_written_and_decides_nothing(tmp_path: Path) -> None:
    """The wire's flush asks the gate; the fence is the role's, on its tick: a primary whose
    lease ran out writes no confirm, is not fenced by the asking, and fences at the tick."""
    ha, clock, fences = _leased_primary(tmp_path)
    client = _confirm_channel(ha)
    assert _publish(client) == [1]  # within the lease
    clock.now += 2.0  # the lease ran out
    assert _publish(client) == []  # settled (routed, nothing else holds it), held
    assert not ha.role.fenced and fences == []  # asking decided nothing
    ha.tick()
    assert ha.role.fenced and fences and "lease ran out" in fences[0]


def test_a_renewal_taken_off_the_loop_counts_before_it_is_applied(tmp_path: Path) -> None:
    """A renewal the liveness thread took is read by the gate as the next tick applies it:
    the confirm goes out, and the role's lease is applied only by that tick."""
    ha, clock, fences = _leased_primary(tmp_path)
    client = _confirm_channel(ha)
    clock.now += 1.0
    assert ha.lease_offers is not None
    assert ha.lease_offers.offer(1.5, clock.now, RoleNote(ha.state.value, 1)) is None
    clock.now += 1.0  # past the first lease, within the renewal
    assert ha.role.lease_expired(clock.now)  # not applied yet
    assert _publish(client) == [1]
    assert ha.role.lease_expired(clock.now)  # the asking applied nothing
    ha.tick()
    assert not ha.role.lease_expired(clock.now) and not ha.role.fenced and fences == []


def test_the_role_fences_when_the_lease_ends_not_at_a_flush(tmp_path: Path) -> None:
    """No flush and no housekeeping tick: the timer at the lease's end has the role fence."""

    async def scenario() -> None:
        ha, clock, fences = _ha_broker(tmp_path)
        await ha.promote(epoch=1)
        ha.grant_lease(0.2)
        assert ha.manager_lease.timer_armed
        clock.now += 0.3  # read when the timer fires, 0.2 s from now
        await poll_until_async(lambda: bool(fences), 10, "the fence at the lease's end")
        assert ha.role.fenced and "lease ran out" in fences[0]
        await ha.stop()

    asyncio.run(scenario())
