"""Test doubles for the I/O-free core: a settable clock, consumers, observers, listeners."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pamqp import commands

from broker.core import properties
from broker.core.exchange import Binding, Exchange
from broker.core.message import Entry, Message
from broker.core.queue import Queue


class FakeClock:
    """A monotonic clock the test moves by hand (seconds)."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class FakeConsumer:
    """Records deliveries; ``credit`` None means unlimited, else decremented per delivery.

    Like the real channel consumer, ``deliver`` reads ``entry.redelivered`` and then books
    the delivery with ``queue.delivered(entry, no_ack)``.
    """

    def __init__(self, tag: str = "c", *, credit: int | None = None, no_ack: bool = False) -> None:
        self.tag = tag
        self.exclusive = False
        self.credit = credit
        self.no_ack = no_ack
        self.deliveries: list[tuple[Entry, bool]] = []
        self.unacked: list[Entry] = []
        self.deleted_queues: list[Queue] = []

    def can_deliver(self) -> bool:
        return self.credit is None or self.credit > 0

    def deliver(self, queue: Queue, entry: Entry) -> None:
        assert self.can_deliver(), "queue delivered to a consumer without credit"
        self.deliveries.append((entry, entry.redelivered))
        if self.credit is not None:
            self.credit -= 1
        queue.delivered(entry, self.no_ack)
        if not self.no_ack:
            self.unacked.append(entry)

    def queue_deleted(self, queue: Queue) -> None:
        self.deleted_queues.append(queue)

    @property
    def bodies(self) -> list[bytes]:
        return [entry.message.body for entry, _ in self.deliveries]

    def ack_all(self, queue: Queue) -> None:
        for entry in self.unacked:
            queue.settle(entry)
        self.unacked.clear()


class RecordingObserver:
    """Hears enqueues and dequeues, as the HA guards do."""

    def __init__(self) -> None:
        self.enqueued_entries: list[Entry] = []
        self.dequeued_entries: list[Entry] = []

    def enqueued(self, queue: Queue, entry: Entry) -> None:
        self.enqueued_entries.append(entry)

    def enqueued_all(self, queue: Queue, entries: Sequence[Entry]) -> None:
        for entry in entries:
            self.enqueued(queue, entry)

    def dequeued(self, queue: Queue, entry: Entry) -> None:
        self.dequeued_entries.append(entry)

    def dequeued_all(self, queue: Queue, entries: Sequence[Entry]) -> None:
        for entry in entries:
            self.dequeued(queue, entry)

    @property
    def dequeued_bodies(self) -> list[bytes]:
        return [entry.message.body for entry in self.dequeued_entries]


class RecordingListener:
    """A configuration listener recording every call as (event, name)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def queue_declared(self, queue: Queue) -> None:
        self.events.append(("queue_declared", queue.name))

    def queue_deleted(self, queue: Queue) -> None:
        self.events.append(("queue_deleted", queue.name))

    def exchange_declared(self, exchange: Exchange) -> None:
        self.events.append(("exchange_declared", exchange.name))

    def exchange_deleted(self, exchange: Exchange) -> None:
        self.events.append(("exchange_deleted", exchange.name))

    def bound(self, binding: Binding) -> None:
        self.events.append(("bound", f"{binding.exchange}->{binding.destination.name}"))

    def unbound(self, binding: Binding) -> None:
        self.events.append(("unbound", f"{binding.exchange}->{binding.destination.name}"))


def raw_props(**kwargs: Any) -> bytes:
    """Raw property bytes for the given Basic.Properties fields."""
    return properties.encode(commands.Basic.Properties(**kwargs))


def message(
    body: bytes | str = b"",
    routing_key: str = "",
    exchange: str = "",
    **props: Any,
) -> Message:
    data = body.encode() if isinstance(body, str) else body
    return Message(exchange, routing_key, raw_props(**props) if props else properties.EMPTY, data)


class GuardingBackup:
    """An in-sync HA backup's guard (a queue observer in the GUARD role, as the HA module's
    ``QueueGuard``): holds every enqueued message's confirm until :meth:`acknowledge_all`."""

    def __init__(self) -> None:
        self.held: list[Message] = []

    def enqueued(self, queue: Queue, entry: Entry) -> None:
        handle = entry.message.confirm
        if handle is not None:
            handle.hold()
            self.held.append(entry.message)

    def enqueued_all(self, queue: Queue, entries: Sequence[Entry]) -> None:
        for entry in entries:
            self.enqueued(queue, entry)

    def dequeued(self, queue: Queue, entry: Entry) -> None:
        pass

    def dequeued_all(self, queue: Queue, entries: Sequence[Entry]) -> None:
        for entry in entries:
            self.dequeued(queue, entry)

    def acknowledge_all(self) -> None:
        held, self.held = self.held, []
        for message in held:
            assert message.confirm is not None
            message.confirm.release()
