"""broker.management.console.samples: a connection's byte counters made RabbitMQ's
recv_oct / send_oct rates (issue 30), tick after tick, without a socket."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import example, given
from hypothesis import strategies as st

from broker.management.console.samples import Samples


@dataclass
class Counters:
    id: int
    recv_oct: int = 0
    send_oct: int = 0


def test_rates_are_bytes_per_second_between_two_ticks_and_gone_connections_forgotten() -> None:
    samples = Samples()
    a, b = Counters(1), Counters(2, 100, 50)
    samples.connections(10.0, [a, b])
    assert samples.connection_rates_of(1) == {"recv_oct_rate": 0.0, "send_oct_rate": 0.0}
    assert samples.connection_rates_of(2) == {"recv_oct_rate": 0.0, "send_oct_rate": 0.0}
    a.recv_oct, a.send_oct = 4096, 1024
    b.recv_oct = 300
    samples.connections(12.0, [a, b])
    assert samples.connection_rates_of(1) == {"recv_oct_rate": 2048.0, "send_oct_rate": 512.0}
    assert samples.connection_rates_of(2) == {"recv_oct_rate": 100.0, "send_oct_rate": 0.0}
    samples.connections(13.0, [b])  # a closed
    assert set(samples.connection_rates) == {2}
    assert samples.connection_rates_of(1) == {"recv_oct_rate": 0.0, "send_oct_rate": 0.0}
    assert samples.connection_rates_of(99) == {"recv_oct_rate": 0.0, "send_oct_rate": 0.0}


@given(
    st.lists(
        st.tuples(st.floats(0.0, 5.0), st.integers(0, 10**9), st.integers(0, 10**9)), max_size=6
    )
)
@example([(0.0, 5, 5), (0.0, 10, 10)])  # two ticks at the same instant
@example([(1.0, 10, 10), (1.0, 0, 0)])  # a counter that went down (a new connection, same id)
def test_a_rate_is_never_negative_nor_infinite(ticks: list[tuple[float, int, int]]) -> None:
    samples, connection, now = Samples(), Counters(7), 0.0
    for step, recv, send in ticks:
        now += step
        connection.recv_oct, connection.send_oct = recv, send
        samples.connections(now, [connection])
        rates = samples.connection_rates_of(7)
        assert all(0.0 <= rate < float("inf") for rate in rates.values())
