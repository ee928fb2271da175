"""The base of the primary's replication streams: deliveries to one channel, with credit.

A replication stream (:mod:`broker.ha.streams`: a queue's, :mod:`broker.ha.config_stream`:
the configuration's) writes opaque bodies to the channel of the backup's basic.consume, seen
only as a :class:`~broker.amqp.stream_sink.StreamSink`, and counts what is in flight
against the channel's basic.qos prefetch (:data:`DEFAULT_CREDIT` without one), in
deliveries. :class:`ChannelStream` is that part; each kind says what it pumps. A stream
never writes in a queue's observer callbacks: it asks the sink for a *pump* and writes
everything pending when it runs, so one flush carries many messages.

THREAD UNSAFE: the primary's event loop owns the streams.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from broker.amqp.stream_sink import StreamSink

__all__ = ["DEFAULT_CREDIT", "ChannelStream"]

DEFAULT_CREDIT = 32

_ids = iter(range(1, 2**62))


class ChannelStream(ABC):
    """Deliveries of opaque bodies to one channel's sink, with prefetch credit."""

    def __init__(self, sink: StreamSink) -> None:
        self.sink = sink
        self.on_close: Callable[[], None] | None = None
        #: Told ``(object, reason)`` when this stream cannot send what it must: the
        #: backup's link is then closed (541), never left to stall.
        self.on_failed: Callable[[str, str], None] | None = None
        self.key = next(_ids)
        self.credit = sink.consumer_prefetch or DEFAULT_CREDIT
        self.in_flight = 0
        self.closed = False
        #: A pump is asked of the sink and has not run yet: asking again changes nothing
        #: (the sink runs it once however often asked), so it is not asked (a queue stream
        #: asks at every enqueue and dequeue of its queue).
        self._pump_asked = False

    def request_pump(self) -> None:
        if not self._pump_asked and not self.closed:
            self._pump_asked = True
            self.sink.request_pump(self.key, self._pump_asked_for)

    def _pump_asked_for(self) -> None:
        self._pump_asked = False  # asked during the pump: runs again, at a later flush
        self.pump()

    @abstractmethod
    def pump(self) -> None:
        """Write what is pending, as far as credit allows."""

    def _closed(self) -> None:
        self.closed = True
        # told once, then dropped: the callbacks name this stream (a reference cycle that
        # a frozen heap would keep, common.weakly)
        on_close, self.on_close, self.on_failed = self.on_close, None, None
        if on_close is not None:
            on_close()

    def _failed(self, what: str, reason: str) -> None:
        """What this stream must send cannot be sent: say so, and close the link."""
        if self.on_failed is not None:
            self.on_failed(what, reason)
        self.sink.fail(f"replication error: {what}: {reason}")

    def _deliver(self, body: bytes) -> int:
        tag = self.sink.deliver_stream(body)
        self.in_flight += 1
        return tag

    @property
    def can_send(self) -> bool:
        return not self.closed and self.in_flight < self.credit and self.sink.can_deliver
