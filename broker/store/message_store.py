"""The message store as the virtual host sees it: what is durable goes to the journal.

:class:`MessageStore` listens to the virtual host's configuration (durable exchanges, durable
non-exclusive queues, their bindings) and observes each durable queue (persistent messages
enqueued, delivered, dequeued), writing one record for each to the
:class:`~broker.store.journal.Journal`. It keeps the promises that depend on the disk:

- a persistent message's publisher confirm on a durable queue is held until the write
  that covers it is durable (the journal's group commit); a failed write nacks it;
- :meth:`after_replicated` (the channel's barrier, beside the HA one) holds declare-ok,
  delete-ok, bind-ok, unbind-ok and purge-ok until the change is durable;
- transient messages and non-durable queues never wait for the disk (nothing is written).

Deliveries write nothing: before a clean close, :meth:`mark_delivered` records which stored
messages had been delivered and not acknowledged; after a crash every recovered message is
marked redelivered (see :meth:`recover_into`).

At start, :meth:`recover_into` re-creates what the store holds in the virtual host, in
order, delivered messages marked redelivered and expiry times kept, without writing it again.

THREAD UNSAFE: the broker's event loop owns it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from broker.core.exchange import Binding, Exchange
from broker.core.message import Entry, Message
from broker.core.queue import Queue
from broker.core.queue_contracts import ObserverRole
from broker.core.vhost import VirtualHost
from broker.core.vhosts import VirtualHosts
from broker.store.journal import Journal
from broker.store.records import (
    BindingRecord,
    ExchangeBindingRecord,
    ExchangeRecord,
    Kind,
    MessageRecord,
    QueueRecord,
    VhostRecord,
    encode_binding,
    encode_deleted,
    encode_dequeue,
    encode_enqueue,
    encode_exchange,
    encode_exchange_binding,
    encode_message_with_enqueue,
    encode_queue,
    encode_queue_entry,
    encode_vhost,
)
from broker.store.recovery import RecoveredMessage, RecoveredState, native_walk
from broker.store.tail import append_dequeue, append_message_with_enqueue

#: (vhost, source exchange, destination, binding key)
BindingId = tuple[str, str, str, Any]
#: (vhost, name) of an exchange or a queue.
Named = tuple[str, str]
#: Marks an exchange destination in a BindingId (a queue may have an exchange's name).
EXCHANGE_PREFIX = "\x00exchange:"


def _descriptors(cls: type, *names: str) -> tuple[Any, ...]:
    """The member descriptors of a __slots__ class, which the native walker copies and
    sets (broker/store/_walk.c, entries())."""
    return tuple(vars(cls)[name] for name in names)


_MESSAGE_SLOTS = _descriptors(Message, *Message.__slots__)
_MESSAGE_FIELDS = _descriptors(Message, "exchange", "routing_key", "body", "store_id")
_ENTRY_TEMPLATE = Entry(Message("", ""), 0, None)
_ENTRY_SLOTS = _descriptors(Entry, *Entry.__slots__)
_ENTRY_FIELDS = _descriptors(Entry, "message", "position", "expires_at", "delivery_count")


def _entries(
    recovered: list[RecoveredMessage],
    contents: dict[int, MessageRecord],
    shared: dict[int, Message] | None,
    now: float,
    wall_now_ms: float,
    crashed: bool,
) -> tuple[list[Entry], int]:
    """The entries of a recovered queue, on their messages (``shared``: by id, when a
    message may be on several queues), and the sum of their body sizes; each content used
    is taken out of ``contents``, and ``recovered`` is emptied: the pure-Python twin of the
    native walker's ``entries``."""
    entries: list[Entry] = []
    append = entries.append
    for message_id, position, expires_at_ms, delivered in recovered:
        message = None if shared is None else shared.get(message_id)
        if message is None:
            _id, exchange_name, routing_key, properties_raw, body = contents.pop(message_id)
            message = Message(exchange_name, routing_key, properties_raw, body)
            message.store_id = message_id
            if shared is not None:
                shared[message_id] = message
        entry = Entry(
            message,
            position,
            now + (expires_at_ms - wall_now_ms) / 1000.0 if expires_at_ms else None,
        )
        if delivered or crashed:
            entry.delivery_count = 1
        append(entry)
    recovered.clear()
    return entries, sum([len(entry.message.body) for entry in entries])


class MessageStore:
    """Writes the virtual hosts' durable state to a journal (see the module docstring).

    Every vhost other than ``/`` has a VHOST record; each exchange, queue and exchange
    binding record names its vhost (a queue binding is in its queue's)."""

    def __init__(self, journal: Journal, vhosts: VirtualHosts | VirtualHost) -> None:
        if isinstance(vhosts, VirtualHost):  # one vhost, "/" (tests, benches)
            vhosts = VirtualHosts(default=vhosts)
        self.journal = journal
        self.vhosts = vhosts
        self.vhost = vhosts.default
        self._vhosts: dict[str, int] = {}
        self._exchanges: dict[Named, int] = {}
        self._queues: dict[Named, int] = {}
        self._bindings: dict[BindingId, int] = {}
        #: The keys of :attr:`_bindings` to each queue, by the queue's (vhost, name): a
        #: queue's deletion finds its bindings without a scan of every binding (a backup's
        #: snapshot deleting 10,000 queues beside 5,000 bindings: 90 ms a slice of 500).
        self._queue_bindings: dict[Named, set[BindingId]] = {}
        self._adopting: int | None = None  # during recovery: the id of what is re-created
        self.recovered_messages = 0
        vhosts.listeners.append(self)
        vhosts.vhost_listeners.append(self)

    # -- recovery --------------------------------------------------------------------------
    def recover_into(
        self, state: RecoveredState, *, crashed: bool = False, native: bool = True
    ) -> None:
        """Re-create the recovered exchanges, queues, bindings and messages in the vhost.

        ``crashed``: the previous broker did not stop in order, so which messages had been
        delivered is not known (DELIVERED records are written at a clean close): every
        recovered message is marked redelivered, as Qpid's store does after a crash;
        after a clean stop, exactly those that had been delivered.

        ``native``: the messages and entries made by the native walker when it is built
        (copies of a Message made by its class for each distinct properties: the same
        objects, tests/store/test_native_walk.py), else by :func:`_entries`.

        It takes the contents of the messages it re-creates out of ``state.messages``, and
        empties each re-created queue's ``messages``, as it goes (each freed while it and
        its body are in the cache: freeing them all afterwards cost 0.3 CPU s for 1M x 1 KiB);
        what is left in ``state.messages`` belongs to no re-created queue."""
        native = native and native_walk is not None
        for vhost_record in state.vhosts:
            self._adopting = vhost_record.id
            self.vhosts.create(vhost_record.name)
        self._adopting = None
        for exchange in state.exchanges:
            vhost = self._recovered_in(exchange.vhost)
            if vhost is None:
                continue
            self._adopting = exchange.id
            vhost.declare_exchange(
                exchange.name,
                exchange.type,
                durable=True,
                auto_delete=exchange.auto_delete,
                internal=exchange.internal,
                arguments=exchange.arguments,
                replicated=True,  # recovered: not a client's declare
            )
        wall_now_ms = time.time() * 1000.0
        now = self.vhost.clock()
        contents = state.messages
        # One Message for all the queues it is on; not needed (nor kept) when each message
        # is on one queue, the usual case.
        shared = len(contents) < state.message_count
        objects: dict[int, Message] = {}
        queues: dict[int, Queue] = {}
        for recovered in state.queues:
            record = recovered.record
            vhost = self._recovered_in(record.vhost)
            if vhost is None:
                continue
            self._adopting = record.id
            queue = vhost.declare_queue(
                record.name,
                durable=True,
                auto_delete=record.auto_delete,
                arguments=record.arguments,
                replicated=True,  # amq.gen- names come back too
                uuid=record.uuid or None,
            )
            self._adopting = None
            queues[record.id] = queue
            # The hot loop of a restart: Entry objects made here, put back in bulk.
            held = objects if shared else None
            if native:
                entries, body_bytes = native_walk.entries(
                    recovered.messages,
                    contents,
                    held,
                    Message,
                    _MESSAGE_SLOTS,
                    _MESSAGE_FIELDS,
                    _ENTRY_TEMPLATE,
                    _ENTRY_SLOTS,
                    _ENTRY_FIELDS,
                    now,
                    wall_now_ms,
                    crashed,
                )
            else:
                entries, body_bytes = _entries(
                    recovered.messages, contents, held, now, wall_now_ms, crashed
                )
            # On disk already: the store is not told of what it restores.
            told = self in queue.observers
            if told:
                queue.unobserve(self)
            try:
                queue.restore(entries, body_bytes)
            finally:
                if told:  # back in its place: the observers are in role order
                    queue.observe(self, ObserverRole.STORE)
            self.recovered_messages += len(entries)
        for binding in state.bindings:
            bound = queues.get(binding.queue_id)
            vhost = None if bound is None else self.vhosts.get(bound.vhost)
            if bound is None or vhost is None or binding.exchange not in vhost.exchanges:
                continue
            self._adopting = binding.id
            vhost.bind(
                bound.name,
                binding.exchange,
                binding.routing_key,
                binding.arguments,
                replicated=True,
            )
        for link in state.exchange_bindings:
            vhost = self.vhosts.get(link.vhost)
            if (
                vhost is not None
                and link.source in vhost.exchanges
                and link.destination in vhost.exchanges
            ):
                self._adopting = link.id
                vhost.bind_exchange(
                    link.destination,
                    link.source,
                    link.routing_key,
                    link.arguments,
                    replicated=True,
                )
        self._adopting = None

    def _recovered_in(self, name: str) -> VirtualHost | None:
        """The vhost of a recovered record; None (the record skipped) if its vhost's record
        is gone, which deleting a vhost's objects first makes a damaged store's case."""
        return self.vhosts.get(name)

    def _new_id(self) -> int:
        adopted = self._adopting
        if adopted is not None:
            self._adopting = None
            return adopted
        return self.journal.new_id()

    # -- virtual hosts (VhostListener) ----------------------------------------------------
    def vhost_created(self, vhost: VirtualHost) -> None:
        adopted = self._adopting is not None
        object_id = self._new_id()
        self._vhosts[vhost.name] = object_id
        if adopted:
            return
        encoded = encode_vhost(VhostRecord(object_id, vhost.name))
        segment = self.journal.append(encoded)
        self.journal.ledger.config_created(object_id, segment, encoded)

    def vhost_deleted(self, vhost: VirtualHost) -> None:
        self._deleted(self._vhosts.pop(vhost.name, None), Kind.VHOST_DELETED)

    # -- configuration (vhost listener) ----------------------------------------------------
    def exchange_declared(self, exchange: Exchange) -> None:
        if not exchange.durable or exchange.builtin:
            return
        adopted = self._adopting is not None
        object_id = self._new_id()
        self._exchanges[(exchange.vhost, exchange.name)] = object_id
        if adopted:
            return
        record = ExchangeRecord(
            object_id,
            exchange.name,
            exchange.type,
            exchange.auto_delete,
            exchange.internal,
            dict(exchange.arguments),
            exchange.vhost,
        )
        encoded = encode_exchange(record)
        segment = self.journal.append(encoded)
        self.journal.ledger.config_created(object_id, segment, encoded)

    def exchange_deleted(self, exchange: Exchange) -> None:
        self._deleted(
            self._exchanges.pop((exchange.vhost, exchange.name), None), Kind.EXCHANGE_DELETED
        )

    def queue_declared(self, queue: Queue) -> None:
        if not queue.durable or queue.exclusive_owner is not None:
            return
        adopted = self._adopting is not None
        object_id = self._new_id()
        self._queues[(queue.vhost, queue.name)] = object_id
        queue.observe(self, ObserverRole.STORE)
        if adopted:
            return
        record = QueueRecord(
            object_id,
            queue.name,
            queue.auto_delete,
            dict(queue.arguments),
            queue.uuid,
            queue.vhost,
        )
        encoded = encode_queue(record)
        segment = self.journal.append(encoded)
        self.journal.ledger.config_created(object_id, segment, encoded)

    def queue_deleted(self, queue: Queue) -> None:
        object_id = self._queues.pop((queue.vhost, queue.name), None)
        if object_id is None:
            return
        ledger = self.journal.ledger
        for key in self._queue_bindings.pop((queue.vhost, queue.name), ()):
            binding_id = self._bindings.pop(key, None)
            if binding_id is not None:
                ledger.config_deleted(binding_id)
        ledger.queue_deleted(object_id)  # its messages go with it, unacked ones included
        self._deleted(object_id, Kind.QUEUE_DELETED)

    def _stored_or_builtin(self, vhost: str, exchange_name: str) -> Exchange | None:
        """The exchange if it is built in or stored, else None."""
        host = self.vhosts.get(vhost)
        exchange = None if host is None else host.exchanges.get(exchange_name)
        if exchange is None or not (exchange.builtin or (vhost, exchange_name) in self._exchanges):
            return None
        return exchange

    def _bound_exchange(self, binding: Binding, destination: Exchange) -> None:
        vhost = destination.vhost
        source = self._stored_or_builtin(vhost, binding.exchange)
        if (
            source is None
            or self._stored_or_builtin(vhost, destination.name) is None
            or not (destination.durable and source.durable)
        ):
            return
        adopted = self._adopting is not None
        object_id = self._new_id()
        key = (vhost, binding.exchange, EXCHANGE_PREFIX + destination.name, binding.key)
        self._bindings[key] = object_id
        if adopted:
            return
        record = ExchangeBindingRecord(
            object_id,
            binding.exchange,
            destination.name,
            binding.routing_key,
            dict(binding.arguments),
            vhost,
        )
        encoded = encode_exchange_binding(record)
        segment = self.journal.append(encoded)
        self.journal.ledger.config_created(object_id, segment, encoded)

    def bound(self, binding: Binding) -> None:
        destination = binding.destination
        if isinstance(destination, Exchange):
            self._bound_exchange(binding, destination)
            return
        queue_id = self._queues.get((destination.vhost, destination.name))
        if queue_id is None or self._stored_or_builtin(destination.vhost, binding.exchange) is None:
            return
        adopted = self._adopting is not None
        object_id = self._new_id()
        key = (destination.vhost, binding.exchange, destination.name, binding.key)
        self._bindings[key] = object_id
        self._queue_bindings.setdefault((destination.vhost, destination.name), set()).add(key)
        if adopted:
            return
        record = BindingRecord(
            object_id,
            binding.exchange,
            queue_id,
            binding.routing_key,
            dict(binding.arguments),
        )
        encoded = encode_binding(record)
        segment = self.journal.append(encoded)
        self.journal.ledger.config_created(object_id, segment, encoded)

    def unbound(self, binding: Binding) -> None:
        destination = binding.destination
        name = destination.name
        if isinstance(destination, Exchange):
            name = EXCHANGE_PREFIX + name
        else:
            keys = self._queue_bindings.get((destination.vhost, name))
            if keys is not None:
                keys.discard((destination.vhost, binding.exchange, name, binding.key))
                if not keys:
                    del self._queue_bindings[(destination.vhost, name)]
        key = (destination.vhost, binding.exchange, name, binding.key)
        self._deleted(self._bindings.pop(key, None), Kind.UNBOUND)

    def _deleted(self, object_id: int | None, kind: Kind) -> None:
        if object_id is None:
            return
        self.journal.append(encode_deleted(kind, object_id))
        self.journal.ledger.config_deleted(object_id)

    def after_replicated(self, reply: Callable[[], None]) -> None:
        """The barrier of configuration replies: ``reply`` once the changes so far are
        durable (a failed write still replies: the change is in memory, and the next
        successful write carries it)."""
        self.journal.after_durable(lambda _ok: reply())

    # -- messages (queue observer) ---------------------------------------------------------
    def enqueued(self, queue: Queue, entry: Entry) -> None:
        message = entry.message
        if not message.persistent:
            return
        queue_id = self._queues.get((queue.vhost, queue.name))
        if queue_id is None:
            return
        journal = self.journal
        ledger = journal.ledger
        expires_at = entry.expires_at
        expires_ms = 0
        if expires_at is not None:
            expires_ms = max(1, int((time.time() + expires_at - self.vhost.clock()) * 1000))
        message_id = message.store_id
        if not message_id or not ledger.has_message(message_id):
            message_id = message.store_id = journal.new_id()
            # Encoded into the journal's buffer in one step when it can be (tail.py); the
            # values spelled out, not a tuple passed twice (2 % more instructions on this path).
            exchange, routing_key = message.exchange, message.routing_key
            properties, body, position = message.properties_raw, message.body, entry.position
            segment = append_message_with_enqueue(
                journal.tail,
                message_id,
                exchange,
                routing_key,
                properties,
                body,
                queue_id,
                position,
                expires_ms,
            )
            if segment is None:
                segment = journal.append(
                    encode_message_with_enqueue(
                        message_id,
                        exchange,
                        routing_key,
                        properties,
                        body,
                        queue_id,
                        position,
                        expires_ms,
                    ),
                    2,
                )
            ledger.message_enqueued((queue_id, message_id), segment)
        else:  # the same message on another queue: stored once
            segment = journal.append(
                encode_enqueue(queue_id, message_id, entry.position, expires_ms)
            )
            ledger.enqueued((queue_id, message_id), segment)
        handle = message.confirm
        if handle is not None and not handle.settled:
            handle.hold()
            journal.after_durable(handle.release)

    def enqueued_all(self, queue: Queue, entries: Sequence[Entry]) -> None:
        enqueued = self.enqueued
        for entry in entries:
            enqueued(queue, entry)

    def mark_delivered(self) -> int:
        """Before a clean close: a DELIVERED record for every stored message that was
        delivered and not acknowledged (by then back on its queue), so that exactly those
        come back redelivered. Returns how many were written."""
        written = 0
        journal = self.journal
        ledger = journal.ledger
        for (vhost, name), queue_id in self._queues.items():
            host = self.vhosts.get(vhost)
            queue = None if host is None else host.queues.get(name)
            if queue is None:
                continue
            for entry in queue.snapshot():
                message_id = entry.message.store_id
                if entry.delivery_count and message_id:
                    key = (queue_id, message_id)
                    if ledger.has_enqueue(key) and key not in ledger.delivered:
                        ledger.delivered.add(key)
                        journal.append(encode_queue_entry(Kind.DELIVERED, queue_id, message_id))
                        written += 1
        return written

    def dequeued(self, queue: Queue, entry: Entry) -> None:
        message_id = entry.message.store_id
        if not message_id:
            return
        queue_id = self._queues.get((queue.vhost, queue.name))
        if queue_id is None:
            return
        journal = self.journal
        if (
            journal.ledger.dequeued((queue_id, message_id))
            and not queue.deleted  # (a deleted queue's record covers its messages)
            and append_dequeue(journal.tail, queue_id, message_id) is None
        ):
            journal.append(encode_dequeue(queue_id, message_id))

    def dequeued_all(self, queue: Queue, entries: Sequence[Entry]) -> None:
        queue_id = self._queues.get((queue.vhost, queue.name))
        if queue_id is None:
            return
        journal = self.journal
        dequeued, tail = journal.ledger.dequeued, journal.tail
        written = not queue.deleted  # (a deleted queue's record covers its messages)
        for entry in entries:
            message_id = entry.message.store_id
            if (
                message_id
                and dequeued((queue_id, message_id))
                and written
                and append_dequeue(tail, queue_id, message_id) is None
            ):
                journal.append(encode_dequeue(queue_id, message_id))
