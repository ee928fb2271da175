"""A replication stream asks its sink for a pump once until that pump runs: a queue stream
asks at every enqueue and dequeue of its queue, and the sink runs a pump once however often
asked, so the asks between two runs are not passed on (three calls a message and backup on
the primary's hot path). Asked while its pump runs, it asks again: that pump runs at a later
flush, as before."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from broker.ha.channel_stream import ChannelStream

from .test_stream_callbacks import Sink as ChannelSink


class Sink(ChannelSink):
    """The in-memory channel of tests/ha/test_stream_callbacks.py, counting the asks."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    def request_pump(self, key: int, pump: Callable[[], None]) -> None:
        self.asked += 1
        super().request_pump(key, pump)

    def flush(self) -> None:
        """What the connection does before a flush: the pumps asked for, once each."""
        pumps = list(self.pumps.values())
        self.pumps.clear()
        for pump in pumps:
            pump()


class Stream(ChannelStream):
    def __init__(self, sink: Sink) -> None:
        super().__init__(sink)
        self.pumped = 0
        self.ask_while_pumping = False

    def pump(self) -> None:
        self.pumped += 1
        if self.ask_while_pumping:
            self.ask_while_pumping = False
            self.request_pump()

    def close(self) -> None:
        self._closed()


def test_asked_many_times_the_sink_is_asked_once_and_the_pump_runs_once() -> None:
    sink = Sink()
    stream = Stream(sink)
    for _ in range(1000):
        stream.request_pump()
    assert sink.asked == 1
    sink.flush()
    assert stream.pumped == 1
    sink.flush()
    assert stream.pumped == 1  # nothing asked since


def test_asked_again_after_its_pump_ran_the_sink_is_asked_again() -> None:
    sink = Sink()
    stream = Stream(sink)
    for round_ in range(1, 6):
        stream.request_pump()
        stream.request_pump()
        assert sink.asked == round_
        sink.flush()
        assert stream.pumped == round_


def test_asked_while_its_pump_runs_it_runs_again_at_the_next_flush() -> None:
    sink = Sink()
    stream = Stream(sink)
    stream.ask_while_pumping = True
    stream.request_pump()
    sink.flush()
    assert stream.pumped == 1
    assert sink.asked == 2 and stream.key in sink.pumps
    sink.flush()
    assert stream.pumped == 2 and not sink.pumps


def test_a_pump_that_raises_does_not_leave_the_stream_unheard() -> None:
    sink = Sink()
    stream = Stream(sink)

    def broken() -> None:
        raise RuntimeError("boom")

    stream.pump = broken  # type: ignore[method-assign]
    stream.request_pump()
    with pytest.raises(RuntimeError, match="boom"):
        sink.flush()
    del stream.pump
    stream.request_pump()
    assert sink.asked == 2
    sink.flush()
    assert stream.pumped == 1


def test_a_closed_stream_asks_nothing() -> None:
    sink = Sink()
    stream = Stream(sink)
    stream.close()
    stream.request_pump()
    assert sink.asked == 0 and not sink.pumps
