"""A replication stream tells its ``on_close`` once, then drops its callbacks: the
primary's callbacks name the stream (``PrimaryStreams.subscribe``), a reference cycle that
reference counting never frees and a frozen heap keeps for good (``broker.collector``;
before, each backup link's lease stream stayed after the link closed)."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import pytest

from broker.ha.channel_stream import ChannelStream
from broker.ha.lease_stream import LeaseStream


class Sink:
    """The channel, as a stream sees it (broker/amqp/stream_sink.py), in memory."""

    client_properties: dict[str, Any] = {}
    connection_name = "link #1"
    peer = "backup:1"
    user = None
    consumer_prefetch = 10
    can_deliver = True
    close_reason = None

    def __init__(self) -> None:
        self.pumps: dict[int, Callable[[], None]] = {}

    def deliver_stream(self, body: bytes) -> int:
        return 1

    def request_pump(self, key: int, pump: Callable[[], None]) -> None:
        self.pumps[key] = pump

    def fail(self, text: str) -> None:
        raise AssertionError(text)


class Stream(ChannelStream):
    def pump(self) -> None:
        pass

    def close(self) -> None:
        self._closed()


def _subscribed(kind: str, closed: list[str]) -> Stream | LeaseStream:
    """A stream with callbacks that name it, as ``PrimaryStreams.subscribe`` gives them."""
    stream: Stream | LeaseStream
    if kind == "lease stream":
        stream = LeaseStream(Sink(), "backup-1", lambda seq: None, lambda: None)
    else:
        stream = Stream(Sink())
    stream.on_close = lambda: closed.append(type(stream).__name__)
    stream.on_failed = lambda what, reason: closed.append(f"{stream!r} {what}")
    return stream


@pytest.mark.parametrize("kind", ["channel stream", "lease stream"])
def test_a_closed_stream_is_freed_by_reference_counting(
    no_cyclic_collector: None, kind: str
) -> None:
    closed: list[str] = []
    stream = _subscribed(kind, closed)
    gone = weakref.ref(stream)
    stream.close()
    stream.close()  # told once
    assert closed == [type(stream).__name__]
    assert stream.on_close is None and stream.on_failed is None
    del stream
    assert gone() is None
