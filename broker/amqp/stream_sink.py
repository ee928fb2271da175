"""What a stream of deliveries may do with the channel it runs on: :class:`StreamSink`.

A :class:`~broker.amqp.context.StreamHooks` (on the primary, the HA replication streams of
``broker/ha/streams.py``) is handed the channel of a basic.consume it serves as a
:class:`StreamSink`, and uses nothing else of the channel or its connection:

- who asked: :attr:`~StreamSink.client_properties`, :attr:`~StreamSink.connection_name`
  and :attr:`~StreamSink.peer` of the connection;
- credit: :attr:`~StreamSink.consumer_prefetch` (basic.qos before the consume; 0 for none)
  and :attr:`~StreamSink.can_deliver` (channel open, flow on, connection writable);
- output: :meth:`~StreamSink.deliver_stream` writes one basic.deliver with an opaque body
  and returns its delivery tag; :meth:`~StreamSink.request_pump` asks for a callback just
  before the connection's next flush, so one flush carries everything pending;
- failure: :meth:`~StreamSink.fail` closes the connection with 541 INTERNAL_ERROR and a
  text naming what could not be sent (a stream that cannot go on never stalls in silence);
  :attr:`~StreamSink.close_reason` is why the connection closed, once it has (the
  backup's own connection.close text when it gave up on a stream).

The channel keeps the delivery-tag sequence and the framing; the stream keeps its own
accounting (in flight, credit) and is told of acks and of the channel's end through
:class:`~broker.amqp.context.Stream`. Call direction: the stream calls the sink, the
channel calls the stream; neither reaches into the other.

THREAD UNSAFE: the channel's event loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol


class StreamSink(Protocol):
    """The channel, as a stream sees it; see the module docstring."""

    @property
    def client_properties(self) -> dict[str, Any]:
        """The connection's connection.start-ok client properties."""
        ...

    @property
    def connection_name(self) -> str:
        """The connection's name, for logs (``"<peer> #<id>"``)."""
        ...

    @property
    def peer(self) -> str:
        """The connection's remote address."""
        ...

    @property
    def user(self) -> str | None:
        """The connection's authenticated user (None: authentication is off)."""
        ...

    @property
    def consumer_prefetch(self) -> int:
        """The channel's basic.qos prefetch count for consumers (0: none set)."""
        ...

    @property
    def can_deliver(self) -> bool:
        """May deliveries be written now (channel open, flow on, connection writable)?"""
        ...

    def deliver_stream(self, body: bytes) -> int:
        """Write basic.deliver of ``body`` (empty properties) to the stream's consumer tag,
        with exchange ``""`` and the consumed name as routing key; return its delivery tag."""
        ...

    def request_pump(self, key: int, pump: Callable[[], None]) -> None:
        """Run ``pump`` once before the connection's next flush, however often asked
        (``key`` identifies the asker)."""
        ...

    def fail(self, text: str) -> None:
        """Close the connection: 541 INTERNAL_ERROR with ``text`` (the stream cannot go on)."""
        ...

    @property
    def close_reason(self) -> str | None:
        """Why the connection closed (None: open, or no reason known)."""
        ...
