"""A message keeps its publisher's confirm handle only while the publish is not settled:
settled at its publish (nothing to wait for: no disk, no backup), the queued message keeps
none (about 100 B and one object the collector tracks, for as long as it waits in its queue;
issue 32, memory); held (the store, an HA guard), it keeps it while held, as the paging and
the guards read it, and lets go at the last release. 0-9-1, through the sans-I/O
connection."""

from __future__ import annotations

from collections.abc import Sequence

from pamqp import commands

from broker.core.confirms import ConfirmHandle
from broker.core.message import Entry
from broker.core.queue import Queue
from broker.core.queue_contracts import ObserverRole
from tests.amqp.helpers import Client, make_context


def _confirm_client(queue: str) -> Client:
    client = Client(make_context())
    client.handshake()
    client.open_channel(1)
    client.send(1, commands.Queue.Declare(queue=queue))
    client.send(1, commands.Confirm.Select())
    client.frames.clear()
    return client


def _acks(client: Client) -> list[int]:
    return [int(m.delivery_tag) for _, m in client.frames if isinstance(m, commands.Basic.Ack)]


def test_a_message_settled_at_its_publish_keeps_no_handle() -> None:
    client = _confirm_client("q")
    for _ in range(3):
        client.publish(1, b"x" * 100, routing_key="q")
    assert _acks(client)[-1] == 3
    entries = client.ctx.vhost.queues["q"].entries()
    assert len(entries) == 3
    assert [entry.message.confirm for entry in entries] == [None, None, None]


class Holder:
    """A confirm's holder, as the store or an HA guard is: takes a hold at the enqueue."""

    def __init__(self) -> None:
        self.held: list[ConfirmHandle] = []

    def enqueued(self, queue: Queue, entry: Entry) -> None:
        handle = entry.message.confirm
        if handle is not None and not handle.settled:
            handle.hold()
            self.held.append(handle)

    def enqueued_all(self, queue: Queue, entries: Sequence[Entry]) -> None:
        for entry in entries:
            self.enqueued(queue, entry)

    def dequeued(self, queue: Queue, entry: Entry) -> None:
        pass

    def dequeued_all(self, queue: Queue, entries: Sequence[Entry]) -> None:
        for entry in entries:
            self.dequeued(queue, entry)


def test_a_held_confirm_stays_with_its_message_until_released() -> None:
    client = _confirm_client("q")
    holder = Holder()
    client.ctx.vhost.queues["q"].observe(holder, ObserverRole.GUARD)
    client.publish(1, b"x" * 100, routing_key="q")
    (entry,) = client.ctx.vhost.queues["q"].entries()
    assert entry.message.confirm is holder.held[0]  # read while held (paging, guards)
    assert not entry.message.confirm.settled
    assert _acks(client) == []
    holder.held[0].release()
    client.send_bytes(b"")  # a read of nothing, then what the connection has to send
    assert _acks(client) == [1]
    assert entry.message.confirm is None  # settled: let go of, the message still queued
