"""What holds a publish's confirm, and in what order (``PUBLISH_HOLDS``, queue_contracts.py).

In process, with the real message store on a real directory and the real HA queue guards of
two backups on a durable queue: no broker, no sockets. A publish takes the channel's
routing hold, then the disk's, then each guarded backup's, in that order whatever order the
holders registered in; the confirm goes out only once every one of them is released.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from broker.core.confirms import ConfirmHandle, PublisherConfirms
from broker.core.message import Entry, Message
from broker.core.queue import Queue
from broker.core.queue_contracts import PUBLISH_HOLDS, Hold, ObserverRole
from broker.core.vhost import VirtualHost
from broker.ha.queue_guard import QueueGuard
from broker.store.journal import Journal, SyncPolicy
from broker.store.message_store import MessageStore
from common.polling import poll_until_async

PERSISTENT = bytes.fromhex("1000") + b"\x02"  # property flags: delivery-mode only; mode 2


class RecordingHandle(ConfirmHandle):
    """A confirm handle that notes who holds it, in order."""

    def __init__(self, owner: PublisherConfirms, seq: int) -> None:
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

        confirms = PublisherConfirms()
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

        def dequeued(self, queue: Queue, entry: Entry) -> None:
            pass

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
