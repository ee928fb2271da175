"""The primary's configuration stream to one backup: ``qpid.ha-config``.

:class:`ConfigStream` sends a snapshot of the replicated configuration (virtual hosts,
queues, exchanges, bindings), built and encoded a slice a pump, then every change, one
field-table event a delivery (an object outside vhost ``/`` carries a ``vhost`` field;
none: ``/``), in the link's replication format. It hears the changes as a listener of the
virtual hosts, and reports to the backup's :class:`~broker.ha.config_guard.ConfigGuard` how
far the backup acknowledged (synchronous configuration).

What it reads of the primary's streams (:class:`~broker.ha.streams.PrimaryStreams`, which
owns it) is a :class:`ConfigSource`: the virtual hosts, the replication rules with the
broker's default, and the snapshot.

THREAD UNSAFE: the primary's event loop owns the streams.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from broker.core.exchange import Binding, Exchange
from broker.core.queue import Queue
from broker.core.vhost import VirtualHost
from broker.core.vhosts import VirtualHosts
from broker.ha.channel_stream import ChannelStream
from broker.ha.config_guard import ConfigGuard
from broker.ha.config_objects import binding_config, exchange_config, in_vhost, queue_config
from broker.ha.link_format import Codec
from broker.ha.replicate_level import ReplicateLevel
from broker.ha.replication_errors import event_object
from common.log import get_logger
from common.slices import SLICE, TURN_BUDGET, Steps

if TYPE_CHECKING:
    from broker.amqp.stream_sink import StreamSink

__all__ = ["ConfigSource", "ConfigStream"]

_log = get_logger("ha")

#: CPU a pump gives a snapshot's slices (seconds; 0: one slice a pump). A member's first
#: confirms wait for its snapshot (its busy queues' streams open as their rows are read):
#: a slice a turn, 10,000 queues' snapshot was 7 turns and 30-46 ms of the new primary's
#: clock for about 25 ms of CPU, each turn behind every other ready callback (issue 25).
SNAPSHOT_PUMP_CPU = TURN_BUDGET
#: A snapshot of this many queues or more, after its head, waits :data:`SNAPSHOT_PAUSE`.
BIG_SNAPSHOT = 1000
#: How long a big snapshot waits after its head's acknowledgement (seconds). After a
#: fail-over the member's busy streams are open from the head by then; the snapshot's
#: making, sending and decoding (10,000 queues: 1.8 MB, tens of ms of CPU on both
#: brokers) came in the middle of the clients' reconnection and first confirms on 2 cores,
#: and a 10,000-queue fail-over took 2.2 times the one-queue time: 1.5 times with this
#: pause (issue 25). What waits meanwhile: the other queues' streams (their first confirms
#: after a fail-over wait for the snapshot, which takes seconds at that size) and the
#: member's readiness; nothing is confirmed before the member has it, pause or not.
SNAPSHOT_PAUSE = 0.2


class ConfigSource(Protocol):
    """What a configuration stream reads of the primary's streams (see the module
    docstring)."""

    @property
    def vhosts(self) -> VirtualHosts:
        """The virtual hosts, whose listener the stream is while open."""
        ...

    def queue_level(self, queue: Queue) -> ReplicateLevel: ...

    def exchange_level(self, exchange: Exchange) -> ReplicateLevel: ...

    def binding_replicated(self, binding: Binding, standard_exchanges: bool = True) -> bool:
        """Whether ``binding`` is sent on a link (``standard_exchanges``: one whose format
        carries bindings to ``amq.topic`` and the like)."""
        ...

    def snapshot_steps(
        self,
        size: int = SLICE,
        *,
        standard_exchanges: bool = True,
        encode_row: Callable[[dict[str, Any]], bytes] | None = None,
    ) -> Steps[dict[str, Any]]:
        """The replicated configuration as of this call, in slices; with rows encoded
        ahead by ``encode_row`` (the link's encoder) where it has them."""
        ...

    def snapshot_head(
        self, encode_row: Callable[[dict[str, Any]], bytes] | None = None
    ) -> dict[str, Any] | None:
        """The busiest queues' rows as of this call (``snapshot-head``; None: none)."""
        ...


class ConfigStream(ChannelStream):
    """Replicated configuration: a snapshot, then every change (a vhost config listener).

    Events are numbered from 1 (the snapshot) as they are pushed; :attr:`acked` is the
    highest number the backup has acknowledged with every one before it, reported to the
    backup's :class:`~broker.ha.config_guard.ConfigGuard` (synchronous configuration)."""

    def __init__(
        self, sink: StreamSink, streams: ConfigSource, guard: ConfigGuard, codec: Codec
    ) -> None:
        super().__init__(sink)
        self.streams = streams
        self.guard = guard
        self._encode = codec.encode_config_steps  # the link's replication format
        #: Whether the link's format carries the cluster's users (format 4).
        self.carries_users = codec.cluster_users
        #: Whether it carries bindings to the standard ``amq.*`` exchanges (format 4).
        self.carries_standard_bindings = codec.standard_bindings
        #: The first pending event's encoding in progress (a snapshot: a slice a pump).
        self._encoding: Steps[bytes] | None = None
        #: Events to send; the snapshot is built a slice a pump, then encoded; on a link of
        #: format 4 its head (the busiest queues' rows, read at the same moment) first.
        snapshot = streams.snapshot_steps(
            standard_exchanges=self.carries_standard_bindings,
            encode_row=codec.encode_snapshot_row,
        )
        head = streams.snapshot_head(codec.encode_snapshot_row) if codec.snapshot_head else None
        self._pending: list[dict[str, Any] | Steps[dict[str, Any]]] = (
            [snapshot] if head is None else [head, snapshot]
        )
        #: The snapshot's event number (2 after its head, which the backup acknowledges
        #: once it opened the busy streams the head named: the snapshot is made after
        #: that, its slices then not in front of those streams' round trips).
        self._snapshot_number = len(self._pending)
        #: CPU a pump gives the snapshot's slices: after a head, one slice a pump (the
        #: member's busy streams, opened from the head, and the clients' handshakes are
        #: then not each behind 20 ms of the rest of it).
        self._pump_cpu = SNAPSHOT_PUMP_CPU if head is None else 0.0
        #: A big snapshot after a head waits SNAPSHOT_PAUSE from the head's ack: when
        #: (monotonic; None: not yet acknowledged, or no pause), and its timer.
        self._pauses = head is not None and _queue_count(streams.vhosts) >= BIG_SNAPSHOT
        self._snapshot_due: float | None = None
        self._timer: asyncio.TimerHandle | None = None
        self.pushed = len(self._pending)
        guard.pushed(self.key, self.pushed)
        #: When the stream opened, and how many pumps its snapshot took (``ha_snapshot_sent``).
        self._opened = time.monotonic()
        self._pumps = 0
        self.acked = 0
        self._sent: deque[tuple[int, int]] = deque()  # (delivery tag, event number)
        self._acked_tags: set[int] = set()
        streams.vhosts.listeners.append(self)
        streams.vhosts.vhost_listeners.append(self)
        self.request_pump()

    def push(self, event: dict[str, Any]) -> None:
        self._pending.append(event)
        self.pushed += 1
        self.guard.pushed(self.key, self.pushed)
        self.request_pump()

    def pump(self) -> None:
        began = time.thread_time()
        while self._pending and self.can_send:
            number = self.pushed - len(self._pending) + 1
            event = self._pending[0]
            if number == self._snapshot_number:
                if self.acked < number - 1:
                    return  # after its head's acknowledgement (acknowledged() pumps again)
                if self._paused():
                    return  # a big one, SNAPSHOT_PAUSE after its head (its timer pumps)
                self._pumps += 1
            # the snapshot's rows, then its encoding: slices while the pump has CPU left
            # (SNAPSHOT_PUMP_CPU; after a head, a slice), the rest at a later pump (a turn
            # later)
            while not isinstance(event, dict):
                try:
                    next(event)
                except StopIteration as built:
                    event = self._pending[0] = built.value
                else:
                    if time.thread_time() - began >= self._pump_cpu:
                        self.request_pump()
                        return
            if self._encoding is None:
                self._encoding = self._encode(event)
            while True:
                try:
                    next(self._encoding)
                except StopIteration as done:
                    body: bytes = done.value
                    break
                except ValueError as exc:  # outside the replication contract: a bug
                    self._encoding = None
                    self._failed(event_object(event), str(exc))
                    return
                if time.thread_time() - began >= self._pump_cpu:
                    self.request_pump()
                    return
            self._encoding = None
            del self._pending[0]
            tag = self._deliver(body)
            self._sent.append((tag, number))
            if number == self._snapshot_number:
                _log.debug(
                    "ha_snapshot_sent",
                    bytes=len(body),
                    pumps=self._pumps,
                    ms=round((time.monotonic() - self._opened) * 1000.0, 1),
                )

    def acknowledged(self, delivery_tag: int, multiple: bool) -> None:
        self.in_flight = 0 if multiple else max(0, self.in_flight - 1)
        sent, acked = self._sent, self.acked
        if multiple:
            while sent and sent[0][0] <= delivery_tag:
                acked = sent.popleft()[1]
        else:
            self._acked_tags.add(delivery_tag)
            while sent and sent[0][0] in self._acked_tags:
                tag, acked = sent.popleft()
                self._acked_tags.discard(tag)
        if acked > self.acked:
            if self._pauses and self.acked < self._snapshot_number - 1 <= acked:
                self._snapshot_due = time.monotonic() + SNAPSHOT_PAUSE  # the head's
            self.acked = acked
            self.guard.acknowledged(self.key, acked)
        self.request_pump()

    def _paused(self) -> bool:
        """Whether the snapshot waits still (:data:`SNAPSHOT_PAUSE`); its timer is set then."""
        if self._snapshot_due is None:
            return False
        wait = self._snapshot_due - time.monotonic()
        if wait <= 0:
            self._snapshot_due = None
            return False
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(wait, self._resume)
        return True

    def _resume(self) -> None:
        self._timer = None
        self.request_pump()

    def close(self) -> None:
        if self.closed:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._closed()
        listeners = self.streams.vhosts.listeners
        if self in listeners:
            listeners.remove(self)
        vhost_listeners = self.streams.vhosts.vhost_listeners
        if self in vhost_listeners:
            vhost_listeners.remove(self)

    # -- virtual hosts (VhostListener) -------------------------------------------------
    def vhost_created(self, vhost: VirtualHost) -> None:
        self.push({"type": "vhost-declared", "name": vhost.name})

    def vhost_deleted(self, vhost: VirtualHost) -> None:
        self.push({"type": "vhost-deleted", "name": vhost.name})

    # -- vhost config listener ---------------------------------------------------------
    def queue_declared(self, queue: Queue) -> None:
        level = self.streams.queue_level(queue)
        if level is not ReplicateLevel.NONE:
            self.push({"type": "queue-declared", "queue": queue_config(queue, level)})

    def queue_deleted(self, queue: Queue) -> None:
        if self.streams.queue_level(queue) is not ReplicateLevel.NONE:
            self.push(in_vhost({"type": "queue-deleted", "name": queue.name}, queue.vhost))

    def exchange_declared(self, exchange: Exchange) -> None:
        if self.streams.exchange_level(exchange) is not ReplicateLevel.NONE:
            self.push({"type": "exchange-declared", "exchange": exchange_config(exchange)})

    def exchange_deleted(self, exchange: Exchange) -> None:
        if self.streams.exchange_level(exchange) is not ReplicateLevel.NONE:
            self.push(in_vhost({"type": "exchange-deleted", "name": exchange.name}, exchange.vhost))

    def bound(self, binding: Binding) -> None:
        if self.streams.binding_replicated(binding, self.carries_standard_bindings):
            self.push({"type": "bound", "binding": binding_config(binding)})

    def unbound(self, binding: Binding) -> None:
        if self.streams.binding_replicated(binding, self.carries_standard_bindings):
            self.push({"type": "unbound", "binding": binding_config(binding)})


def _queue_count(vhosts: VirtualHosts) -> int:
    return sum(len(vhost.queues) for vhost in vhosts)
