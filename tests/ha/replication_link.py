"""The backup's side of a replication link in memory, for the replication models.

A :class:`Link` subscribes to a primary's real :class:`~broker.ha.streams.PrimaryStreams`
through in-memory :class:`Sink` s (one a stream, as a link's channels are) and applies what
they receive to a real :class:`~broker.ha.broker_replicator.BrokerReplicator` through the
real wire codecs, acknowledging each body, subscribing and unsubscribing queue streams as a
backup's link does (``broker/ha/backup.py``). :meth:`Link.settle` pumps until nothing moves;
:meth:`Link.step` applies one body, for a link that lags.
"""

from __future__ import annotations

from collections.abc import Callable

from broker.core.errors import AmqpError
from broker.core.vhosts import VirtualHosts
from broker.ha.broker_replicator import BrokerReplicator
from broker.ha.names import (
    BACKUP_PROPERTY,
    BROKER_ID_PROPERTY,
    CONFIG_STREAM,
    FORMATS_PROPERTY,
    IDS_ARGUMENT,
    QUEUE_STREAM_PREFIX,
)
from broker.ha.streams import ConfigStream, PrimaryStreams, QueueStream
from broker.ha.wire import decode_batch, decode_config_event
from common.version import REPLICATION_FORMATS


class Sink:
    """One channel of the backup's link, as a stream sees it, in memory."""

    def __init__(self, link: Link) -> None:
        self.link = link
        self.client_properties = {
            BACKUP_PROPERTY: True,
            BROKER_ID_PROPERTY: link.backup_id,
            FORMATS_PROPERTY: REPLICATION_FORMATS.text,  # format 1: the wire module's codecs
        }
        self.connection_name = "model #1"
        self.peer = "model:1"
        self.user: str | None = None
        self.consumer_prefetch = 10_000
        self.can_deliver = True
        self.close_reason: str | None = None
        self.bodies: list[tuple[int, bytes]] = []
        self._tag = 0

    def deliver_stream(self, body: bytes) -> int:
        self._tag += 1
        self.bodies.append((self._tag, body))
        return self._tag

    def request_pump(self, key: int, pump: Callable[[], None]) -> None:
        self.link.pumps[key] = pump

    def fail(self, text: str) -> None:
        raise AssertionError(f"a stream failed: {text}")


class Link:
    """The backup's side: applies what the sinks received, acknowledges, subscribes."""

    def __init__(self, streams: PrimaryStreams, backup_id: str = "backup-1") -> None:
        self.streams = streams
        self.backup_id = backup_id
        self.pumps: dict[int, Callable[[], None]] = {}
        self.backup = VirtualHosts()
        self.replicator = BrokerReplicator(self.backup)
        self.config_sink = Sink(self)
        stream = streams.subscribe(self.config_sink, CONFIG_STREAM, {})
        assert isinstance(stream, ConfigStream)
        self.config = stream
        self.queue_streams: dict[str, tuple[Sink, QueueStream]] = {}
        self.first_snapshot = True

    def settle(self) -> None:
        """Pump and apply until nothing moves (the link quiescent)."""
        for _ in range(1000):
            moved = False
            while self.pumps:
                pumps = list(self.pumps.values())
                self.pumps.clear()
                for pump in pumps:
                    pump()
            moved |= self._apply_config()
            for key, (sink, stream) in list(self.queue_streams.items()):
                bodies, sink.bodies = sink.bodies, []
                for tag, body in bodies:
                    moved = True
                    self.replicator.replicators[key].apply(decode_batch(body))
                    stream.acknowledged(tag, False)
            if not moved and not self.pumps:
                return
        raise AssertionError("the link never settled")

    def apply_some(self, count: int) -> None:
        """Pump, then apply at most ``count`` of the bodies received (configuration first,
        then the queue streams in turn): a link that lags behind its primary."""
        while self.pumps:
            pumps = list(self.pumps.values())
            self.pumps.clear()
            for pump in pumps:
                pump()
        while count > 0 and self.config_sink.bodies:
            self._apply_config(limit=1)
            count -= 1
        for key, (sink, stream) in sorted(self.queue_streams.items()):
            while count > 0 and sink.bodies and key in self.queue_streams:
                tag, body = sink.bodies.pop(0)
                self.replicator.replicators[key].apply(decode_batch(body))
                stream.acknowledged(tag, False)
                count -= 1

    def _apply_config(self, limit: int | None = None) -> bool:
        sink = self.config_sink
        if limit is None:
            bodies, sink.bodies = sink.bodies, []
        else:
            bodies, sink.bodies = sink.bodies[:limit], sink.bodies[limit:]
        for tag, body in bodies:
            event = decode_config_event(body)
            changes = self.replicator.apply(event)
            self.config.acknowledged(tag, False)
            subscribe = list(changes.subscribe)
            if event.get("type") == "snapshot" and self.first_snapshot:
                self.first_snapshot = False
                subscribe = list(self.replicator.replicators)
            for key in changes.unsubscribe:
                gone = self.queue_streams.pop(key, None)
                if gone is not None:
                    gone[1].close()
            for key in subscribe:
                if key not in self.queue_streams:
                    self._subscribe(key)
        return bool(bodies)

    def _subscribe(self, key: str) -> None:
        replicator = self.replicator.replicators[key]
        sink = Sink(self)
        arguments = {IDS_ARGUMENT: bytearray(replicator.ids().encode())}
        try:
            stream = self.streams.subscribe(sink, QUEUE_STREAM_PREFIX + key, arguments)
        except AmqpError:  # gone on the primary meanwhile: its deletion event follows (as
            return  # the link's ha_subscribe_failed)
        assert isinstance(stream, QueueStream)
        self.queue_streams[key] = (sink, stream)
