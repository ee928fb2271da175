"""A read's methods are handled :data:`~broker.amqp.connection.READ_SLICE` at a time, and a
flush's pumps too (issue 25, "no long stalls": a backup's 1,700 basic.consume in one read
were one step of the loop of 110-480 ms). The rest waits for a later turn, in order; the
publish path is not timed. Without sockets: the shell's part (reading paused meanwhile,
the rest parsed next turn) is :class:`~broker.amqp.protocol.AmqpProtocol`, run end to end
by the scale test (tests/ha/test_loop_steps_scale.py)."""

from __future__ import annotations

import functools
from collections.abc import Iterator

import pytest
from pamqp import body, commands, frame, header

from broker.amqp import connection as connection_module
from tests.amqp.helpers import open_client


class StepClock:
    """A work clock that moves ``step`` seconds at each reading."""

    def __init__(self, step: float) -> None:
        self.now, self.step, self.readings = 0.0, step, 0

    def __call__(self) -> float:
        self.now += self.step
        self.readings += 1
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[StepClock]:
    ticking = StepClock(0.008)
    monkeypatch.setattr(connection_module, "_now", ticking)
    yield ticking


def test_a_read_of_many_methods_is_handled_a_slice_at_a_time_in_order(clock: StepClock) -> None:
    client = open_client()
    conn = client.conn
    conn.receive_data(
        b"".join(frame.marshal(commands.Queue.Declare(queue=f"q{i}"), 1) for i in range(20))
    )
    assert conn.unparsed  # 8 ms a method: two or three of them, then the rest next turn
    first = [m.queue for m in client.methods() if isinstance(m, commands.Queue.DeclareOk)]
    assert 1 <= len(first) <= 3 and first == [f"q{i}" for i in range(len(first))]
    turns = 1
    while conn.unparsed:
        conn.parse_more()
        turns += 1
    assert turns >= 7
    rest = [m.queue for m in client.methods() if isinstance(m, commands.Queue.DeclareOk)]
    assert first + rest == [f"q{i}" for i in range(20)]


def test_a_read_of_publishes_is_not_timed(clock: StepClock) -> None:
    client = open_client()
    client.send(1, commands.Queue.Declare(queue="q"))
    client.take()
    message = b"".join(
        frame.marshal(commands.Basic.Publish(exchange="", routing_key="q"), 1)
        + frame.marshal(header.ContentHeader(0, 2, commands.Basic.Properties()), 1)
        + frame.marshal(body.ContentBody(b"%02d" % (i % 100)), 1)
        for i in range(200)
    )
    readings = clock.readings
    client.conn.receive_data(message)
    assert not client.conn.unparsed and clock.readings == readings
    assert client.ctx.vhost.queues["q"].message_count == 200


def test_a_flush_runs_its_pumps_a_slice_at_a_time_in_order(clock: StepClock) -> None:
    client = open_client()
    conn = client.conn
    signals: list[int] = []
    conn.on_output = lambda: signals.append(1)
    ran: list[int] = []
    for key in range(6):
        conn.request_pump(key, functools.partial(ran.append, key))
    conn.data_to_send()
    assert ran == [0, 1, 2] and signals  # 8 ms a pump: the rest at the next flush, asked for
    conn.request_pump(0, lambda: ran.append(10))  # asked again meanwhile: after the rest
    conn.data_to_send()
    conn.data_to_send()
    assert ran == [0, 1, 2, 3, 4, 5, 10]
