"""A read's methods are handled :data:`~broker.amqp.connection.READ_SLICE` at a time, and a
flush's pumps too (issue 25, "no long stalls": a backup's 1,700 basic.consume in one read
were one step of the loop of 110-480 ms). The rest waits for a later turn, in order; the
publish path is not timed. Without sockets: the shell's part (reading paused meanwhile,
the rest parsed next turn) is :class:`~broker.amqp.protocol.AmqpProtocol`, run end to end
by the scale test (tests/ha/test_loop_steps_scale.py).

And whatever the pieces a socket's reads cut the bytes into, the connection does the same:
the same messages queued and confirmed, the same error for bad bytes (its parser copies a
read once and slices each frame's payload out of the copy)."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pamqp import body, commands, frame, header

from broker.amqp import connection as connection_module
from broker.amqp import framing
from broker.amqp.context import BrokerContext, ConnectionSettings
from broker.core import properties
from broker.core.vhost import VirtualHost
from broker.security.sasl import Authenticator, UserDatabase
from tests.amqp.helpers import Client, FakeClock, open_client


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


def _publishes(bodies: list[bytes], frame_max: int) -> bytes:
    """basic.publish to ``q`` of each body, its content cut at ``frame_max``."""
    return b"".join(
        framing.marshal_publish(1, "", "q", False)
        + framing.content_frames(
            1,
            properties.encode(commands.Basic.Properties(message_id=str(i))),
            payload,
            frame_max,
        )
        for i, payload in enumerate(bodies)
    )


def _pieces(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


#: One user database for every example's connections: it remembers a verified login, so
#: only the first of them pays the slow password hash.
_AUTHENTICATOR = Authenticator(UserDatabase.default(), True)


def _confirm_client(frame_max: int) -> Client:
    clock = FakeClock()
    ctx = BrokerContext(
        vhost=VirtualHost(clock=clock),
        authenticator=_AUTHENTICATOR,
        settings=ConnectionSettings(),
        clock=clock,
    )
    client = open_client(ctx, frame_max=frame_max)
    client.send(1, commands.Confirm.Select())
    client.send(1, commands.Queue.Declare(queue="q"))
    client.take()
    return client


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.integers(0, 9000), max_size=8),
    cuts=st.lists(st.integers(0, 80_000), max_size=12),
    frame_max=st.sampled_from([4096, 8192]),
)
@example(sizes=[0, 1, 4088, 4089], cuts=[7, 8, 15, 4100], frame_max=4096)
def test_any_cut_of_the_bytes_into_reads_queues_and_confirms_the_same(
    sizes: list[int], cuts: list[int], frame_max: int
) -> None:
    """The frames of publishes read in any pieces (a frame's head, its end octet or a body
    cut anywhere) queue every message whole, in order, and confirm each once."""
    client = _confirm_client(frame_max)
    bodies = [bytes((i % 251,)) * n for i, n in enumerate(sizes)]
    confirmed: set[int] = set()
    for piece in _pieces(_publishes(bodies, frame_max), cuts):
        client.feed(piece)
        for method in client.methods():
            assert isinstance(method, commands.Basic.Ack), method
            tag = method.delivery_tag
            confirmed |= set(range(1, tag + 1)) if method.multiple else {tag}
    assert confirmed == set(range(1, len(bodies) + 1))
    entries = client.ctx.vhost.queues["q"].entries()
    assert [e.message.body for e in entries] == bodies
    assert [properties.decode(e.message.properties_raw).message_id for e in entries] == [
        str(i) for i in range(len(bodies))
    ]


def _outcome(client: Client) -> tuple[object, ...]:
    closes = [m for m in client.methods() if isinstance(m, commands.Connection.Close)]
    code = closes[0].reply_code if closes else None
    queue = client.ctx.vhost.queues["q"]
    return code, client.conn.state, [e.message.body for e in queue.entries()]


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.integers(0, 5000), max_size=3),
    garbage=st.binary(max_size=300),
    cuts=st.lists(st.integers(0, 20_000), max_size=10),
)
@example(sizes=[10], garbage=b"\x03\x00\x01\x00\x00\x00\x02ab\xce", cuts=[3])  # body, no header
@example(sizes=[], garbage=b"\x01\x00\x01\xff\xff\xff\xff", cuts=[2])  # oversized: its head
@example(sizes=[1], garbage=b"\x08\x00\x00\x00\x00\x00\x00\x00", cuts=[5])  # bad end octet
def test_any_cut_of_bad_bytes_into_reads_ends_the_same(
    sizes: list[int], garbage: bytes, cuts: list[int]
) -> None:
    """Publishes then any bytes, read whole or in any pieces: the same connection error (or
    none), the same messages queued."""
    data = _publishes([b"m" * n for n in sizes], 4096) + garbage
    whole = _confirm_client(4096)
    whole.feed(data)
    cut = _confirm_client(4096)
    for piece in _pieces(data, cuts):
        cut.feed(piece)
    assert _outcome(cut) == _outcome(whole)
