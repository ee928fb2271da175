"""The console's Overview figures (overview.py): totals, rates over the sampler's ticks,
node figures; sans I/O but /proc."""

from __future__ import annotations

from broker.management.console.overview import Overview
from tests.management.support import FakeBroker, publish


def test_totals_rates_and_node_figures() -> None:
    broker = FakeBroker(amqp_port=5672, mgmt_port=8672)
    broker.vhost.declare_queue("q")
    overview = Overview(broker)
    first = overview.sample(100.0)
    assert first["rates"] == {"published_rate": 0.0, "delivered_rate": 0.0, "acked_rate": 0.0}
    for _ in range(3):
        publish(broker, "", "q")
    between = overview.sample(100.2)  # a viewer's snapshot between two ticks
    assert between["rates"]["published_rate"] == 0.0 and between["totals"]["messages_ready"] == 3
    second = overview.sample(101.0)
    assert second["rates"]["published_rate"] == 3.0
    assert overview.sample(101.3)["rates"] == second["rates"]  # kept until the next tick
    totals = second["totals"]
    assert (totals["queues"], totals["messages_unacked"], totals["consumers"]) == (1, 0, 0)
    assert totals["exchanges"] == len(broker.vhost.exchanges) and totals["vhosts"] == 1
    node = second["node"]
    assert node["fd_used"] > 0 and node["alarms"] == []
    assert node["listeners"] == [
        {"protocol": "amqp", "port": 5672},
        {"protocol": "http", "port": 8672},
    ]


def test_each_range_keeps_its_points_with_the_rates_averaged_over_each() -> None:
    broker = FakeBroker()
    broker.vhost.declare_queue("q")
    overview = Overview(broker)
    for second in range(125):  # a tick a second; 2 messages a second
        publish(broker, "", "q")
        publish(broker, "", "q")
        overview.sample(1000.0 + second)
    minute = overview.history("1m")
    assert len(minute) == 60 and minute[-1]["at"] == 1124.0
    assert minute[-1]["published_rate"] == 2.0 and minute[-1]["messages_ready"] == 250
    hour = overview.history("1h")
    assert [p["at"] for p in hour] == [1000.0, 1060.0, 1120.0]
    assert hour[0]["published_rate"] == 0.0  # the first point: nothing before it
    assert hour[1]["published_rate"] == 2.0 and hour[2]["messages_ready"] == 242
    assert [p["at"] for p in overview.history("1d")] == [1000.0]


def test_the_sample_of_thousands_of_queues_runs_in_slices() -> None:
    """A slice a turn of the loop (common.slices.SLICE queues), the same figures as at once."""
    from common.slices import SLICE

    broker = FakeBroker()
    count = 2 * SLICE + 7
    for i in range(count):
        broker.vhost.declare_queue(f"q{i}")
    for i in range(0, count, 100):
        publish(broker, "", f"q{i}")
    steps = Overview(broker).sample_steps(100.0)
    slices = 0
    try:
        while True:
            next(steps)
            slices += 1
    except StopIteration as done:
        sliced = done.value
    assert slices >= 3  # 1,007 queues: three slices at least
    at_once = Overview(broker).sample(100.0)
    assert sliced["totals"] == at_once["totals"]
    assert sliced["totals"]["queues"] == count and sliced["totals"]["messages_ready"] == 11
