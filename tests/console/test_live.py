"""The console's sampler without sockets: rates from counters, lag histories, a backup
silent with unacknowledged batches, snapshots only while someone watches. A real virtual
host and queues (tests.management's stand-in broker), an HA role reduced to its status."""

from __future__ import annotations

import asyncio
import gc
import json
import re
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from broker.core.message import Message
from broker.management.console import ha_view
from broker.management.console.live import LiveFeed
from broker.management.console.samples import HISTORY
from common.log import get_logger
from common.slices import SLICE
from tests.management.support import FakeBroker


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Ha:
    """What the sampler reads of an HA role: its status, with one backup."""

    batches: int = 0
    lag: int = 0
    sent: int = 0
    addresses: list[str] = field(default_factory=lambda: ["127.0.0.1:5001", "127.0.0.1:5002"])
    replicate_default: Any = None

    def status(self) -> dict[str, Any]:
        row = {"queue": "q", "lag": self.lag, "unacknowledged_batches": self.batches}
        row["sent"] = self.sent
        return {"state": "active", "backups": [{"id": "b1", "queues": [row]}]}


@dataclass
class HaBroker(FakeBroker):
    ha: Ha = field(default_factory=Ha)


def publish(broker: FakeBroker, count: int) -> None:
    vhost = broker.vhost
    for _ in range(count):
        vhost.publish(vhost.exchange(""), Message("", "q", body=b"x"))


def test_rates_lags_and_silent_backups() -> None:
    broker, clock = HaBroker(), Clock()
    broker.vhost.declare_queue("q")
    feed = LiveFeed(broker, get_logger("management"), clock)
    feed.sample()
    publish(broker, 20)
    broker.ha.lag, broker.ha.batches = 3, 2
    clock.now += 2.0
    feed.sample()
    point = feed.queue_history["q"][-1]
    assert point == {"messages": 20, "unacked": 0, "publish": 10.0, "deliver": 0.0, "ack": 0.0}
    assert list(feed.lag_history["b1"]["q"]) == [0, 3]
    assert feed.state is None  # nobody follows
    clock.now += 1.5
    snapshot = feed.fresh()
    feed.sample()
    assert snapshot["lag_history"] == {"b1": {"q": [0, 3]}}
    assert feed.unacknowledged_since == {"b1": 1002.0}
    built = feed._build(clock.now, broker.ha.status())
    assert built["unacknowledged_for"] == {"b1": 1.5}
    assert built["configured_members"] == ["127.0.0.1:5001", "127.0.0.1:5002"]
    broker.ha.batches = 0
    feed.sample()
    assert feed.unacknowledged_since == {}


def test_a_busy_backup_with_a_batch_in_flight_at_each_sample_is_not_silent() -> None:
    """Issue 30: healthy backups flickered LAGGING ("no acknowledgement for 1 s") under
    load, a batch being in flight at each sample. The primary sends on acknowledgements, so
    messages sent since the last sample mean something was acknowledged: not silence.
    Silence starts at the first sample with batches waiting and nothing sent since."""
    broker, clock = HaBroker(), Clock()
    feed = LiveFeed(broker, get_logger("management"), clock)
    broker.ha.batches = 1
    for _ in range(10):
        broker.ha.sent += 64
        clock.now += 1.0
        feed.sample()
        assert feed.unacknowledged_since == {}
    clock.now += 1.0
    feed.sample()  # nothing sent since: the batch waits, and so does the backup
    assert feed.unacknowledged_since == {"b1": clock.now}
    clock.now += 1.0
    feed.sample()
    assert feed.unacknowledged_since == {"b1": clock.now - 1.0}
    broker.ha.sent += 1
    clock.now += 1.0
    feed.sample()
    assert feed.unacknowledged_since == {}


def test_histories_are_bounded_and_follow_the_queues() -> None:
    broker, clock = HaBroker(), Clock()
    broker.vhost.declare_queue("q")
    feed = LiveFeed(broker, get_logger("management"), clock)
    for _ in range(HISTORY + 5):
        clock.now += 1
        feed.sample()
    assert len(feed.queue_history["q"]) == HISTORY
    broker.vhost.delete_queue("q")
    feed.sample()
    assert "q" not in feed.queue_history


def test_idle_queues_are_sampled_without_new_objects_and_a_moving_one_gets_its_rates() -> None:
    """10,000 idle queues a second made 20,000 objects for the collector to walk: a queue
    read as at the tick before adds its last point again, once that point's rates are 0."""
    broker, clock = FakeBroker(), Clock()
    names = [f"q{i}" for i in range(2 * SLICE)]
    for name in names:
        broker.vhost.declare_queue(name)
    feed = LiveFeed(broker, get_logger("management"), clock)
    for _ in range(2):
        clock.now += 1
        feed.sample()
    gc.disable()
    try:
        before = gc.get_count()[0]
        clock.now += 1
        feed.sample()
        made = gc.get_count()[0] - before
    finally:
        gc.enable()
    assert made < 50, f"{made} objects kept by a sample of {len(names)} idle queues"
    idle = feed.queue_history["q0"]
    assert len(idle) == 3 and idle[-1] is idle[-2]
    assert idle[-1] == {"messages": 0, "unacked": 0, "publish": 0.0, "deliver": 0.0, "ack": 0.0}
    vhost = broker.vhost
    for _ in range(6):
        vhost.publish(vhost.exchange(""), Message("", "q1", body=b"x"))
    clock.now += 2
    feed.sample()
    assert feed.queue_history["q1"][-1]["publish"] == 3.0
    assert feed.queue_history["q1"][-1]["messages"] == 6
    clock.now += 1
    feed.sample()  # nothing since: rates 0 again, a new point once
    still = feed.queue_history["q1"]
    assert still[-1] == {"messages": 6, "unacked": 0, "publish": 0.0, "deliver": 0.0, "ack": 0.0}
    clock.now += 1
    feed.sample()
    assert still[-1] is still[-2]
    broker.vhost.delete_queue("q1")
    feed.sample()
    assert "q1" not in feed.queue_history and "q0" in feed.queue_history


def test_lag_in_bytes_counts_what_is_past_the_last_sent(monkeypatch) -> None:
    broker = HaBroker()
    queue = broker.vhost.declare_queue("q")
    vhost = broker.vhost
    for size in (10, 20, 30, 40):
        vhost.publish(vhost.exchange(""), Message("", "q", body=b"x" * size))
    positions = [entry.position for entry in queue.entries()]
    assert ha_view.lag_bytes(queue, positions[1]) == (70, False)
    assert ha_view.lag_bytes(queue, 0) == (100, False)
    assert ha_view.lag_bytes(queue, positions[-1]) == (0, False)
    monkeypatch.setattr(ha_view, "LAG_BYTES_SCAN", 2)
    assert ha_view.lag_bytes(queue, 0) == (70, True)  # a lower bound: shown with a "+"
    status = {
        "backups": [
            {"id": "b1", "queues": [{"queue": "q", "lag": 2, "last_sent_id": positions[1]}]}
        ]
    }
    rows = ha_view.with_lag_bytes(vhost.queues, status)["backups"][0]["queues"]
    assert rows == [
        {
            "queue": "q",
            "lag": 2,
            "last_sent_id": positions[1],
            "lag_bytes": 70,
            "lag_bytes_partial": False,
        }
    ]


def test_two_backups_lag_rows_at_scale_are_counted_in_slices() -> None:
    """Two backups' rows of 3,000 queues are a slice of SLICE rows a step (10,000 queues in
    one step held the loop 131-171 ms), a turn of the loop after a long backlog counted."""
    broker = HaBroker()
    vhost = broker.vhost
    for i in range(3000):
        vhost.declare_queue(f"q{i}")
    for _ in range(2 * SLICE * ha_view.ENTRIES_PER_ROW):  # a backlog worth two slices
        vhost.publish(vhost.exchange(""), Message("", "q0", body=b"x"))
    lag = 2 * SLICE * ha_view.ENTRIES_PER_ROW
    rows = [{"queue": f"q{i}", "lag": lag if i == 0 else 0, "last_sent_id": 0} for i in range(3000)]
    status = {"backups": [{"id": b, "queues": rows} for b in ("b1", "b2")]}
    steps, slices = ha_view.with_lag_bytes_steps(vhost.queues, status), 1
    try:
        while True:
            next(steps)
            slices += 1
    except StopIteration as done:
        lagged = done.value
    assert slices > 2 * 3000 // SLICE  # the rows, and a turn after each long backlog
    assert lagged == ha_view.with_lag_bytes(vhost.queues, status)
    assert [b["queues"][0]["lag_bytes"] for b in lagged["backups"]] == [lag, lag]


def test_a_viewers_page_gets_only_what_moved_on_it() -> None:
    """The lists are followed while someone watches: a page event holds the rows of the
    page that moved since the viewer's last (a publish, and the rate falling back to 0 a
    tick later), nothing when nothing on it moved; a queue deleted leaves the page."""
    from broker.management.console.live_lists import CONSOLE_QUEUES, ListPage
    from broker.management.lists import parse_query
    from common.slices import run_steps

    broker, clock = HaBroker(), Clock()
    for i in range(1200):
        broker.vhost.declare_queue(f"q{i:04d}")
    feed = LiveFeed(broker, get_logger("management"), clock)
    feed.viewers = 1
    page = ListPage(parse_query({"name": "q00", "page": "1", "page_size": "5"}, CONSOLE_QUEUES))

    def tick() -> dict[str, Any] | None:
        clock.now += 1.0
        feed.sample()
        text = run_steps(feed.lists.page_steps(page, whole=False))
        return None if text is None else json.loads(text)

    feed.sample()
    whole = run_steps(feed.lists.page_steps(page, whole=True))
    assert whole is not None
    first = json.loads(whole)
    assert first["keys"] == ["q0000", "q0001", "q0002", "q0003", "q0004"]
    assert (first["filtered_count"], first["total_count"]) == (100, 1200)
    assert set(first["rows"]) == set(first["history"]) == set(first["keys"])
    assert tick() is None  # nothing moved
    vhost = broker.vhost
    vhost.publish(vhost.exchange(""), Message("", "q0003", body=b"x"))
    vhost.publish(vhost.exchange(""), Message("", "q0900", body=b"x"))  # not on the page
    moved = tick()
    assert moved is not None and list(moved["rows"]) == ["q0003"] and not moved["history"]
    assert moved["rows"]["q0003"]["messages"] == 1 and moved["rows"]["q0003"]["publish_rate"] == 1.0
    settled = tick()  # its rate fell back to 0
    assert settled is not None and settled["rows"]["q0003"]["publish_rate"] == 0.0
    assert tick() is None
    vhost.delete_queue("q0001")
    gone = tick()
    assert gone is not None and gone["keys"] == ["q0000", "q0002", "q0003", "q0004", "q0005"]
    assert list(gone["rows"]) == list(gone["history"]) == ["q0005"]  # new to the page
    changes = feed.lists.journal.since(first["version"])
    assert changes is not None and changes.lists["queues"].removed == ["q0001"]
    assert set(changes.lists["queues"].changed) == {"q0003", "q0900"}


@dataclass
class ManyQueuesHa(Ha):
    """Two backups with a row for each of ``queues`` queues."""

    queues: int = 1200

    def status(self) -> dict[str, Any]:
        rows = [
            {"queue": f"s{i}", "lag": 1, "unacknowledged_batches": 0} for i in range(self.queues)
        ]
        return {"state": "active", "backups": [{"id": b, "queues": rows} for b in ("b1", "b2")]}


def test_the_backups_lags_are_sampled_a_slice_at_a_time() -> None:
    """Two backups of 10,000 queues were one step of 100-130 ms a second: their lag rows go
    into the histories 500 a slice (issue 25)."""
    broker, clock = HaBroker(ha=ManyQueuesHa()), Clock()
    feed = LiveFeed(broker, get_logger("management"), clock)
    slices = 1
    steps = feed.sample_steps()
    while True:
        try:
            next(steps)
        except StopIteration:
            break
        slices += 1
    assert slices >= 2 * 1200 // SLICE
    assert all(len(feed.lag_history[b]) == 1200 for b in ("b1", "b2"))
    assert list(feed.lag_history["b2"]["s1199"]) == [1]


def test_channels_and_consumers_are_in_the_journal_while_someone_follows_them() -> None:
    """The channels of the 0-9-1 connections and their consumers join the delta feed
    (issue 25): 600 channels with a consumer each are built a slice at a time, only while
    a viewer pages them or a reader of the changes follows; a delivery changes its
    channel's and its consumer's rows, a cancel removes the consumer, a closed connection
    takes its channels and consumers with it; a page of channels is the viewer's own."""
    from pamqp import commands

    from broker.management.console.live_lists import CONSOLE_KINDS, ListPage
    from broker.management.lists import parse_query
    from common.slices import run_steps
    from tests.amqp.helpers import Client

    broker, clock = HaBroker(), Clock()
    broker.vhost.declare_queue("work")
    clients = []
    for _ in range(3):
        client = Client(broker.context)
        client.handshake()
        for number in range(1, 201):
            client.open_channel(number)
            client.send(number, commands.Basic.Consume(queue="work", consumer_tag=f"c{number}"))
        client.take()
        clients.append(client)
    feed = LiveFeed(broker, get_logger("management"), clock)
    feed.viewers = 1
    journal = feed.lists.journal

    def tick() -> None:
        clock.now += 1.0
        feed.sample()

    tick()  # a viewer, but nobody pages the channels: not built
    assert journal.totals()["channels"] == journal.totals()["consumers"] == 0
    feed.lists.channel_viewers = 1
    steps, slices = feed.sample_steps(), 1
    for _ in steps:
        slices += 1
    assert slices >= 600 // SLICE + 1
    assert journal.totals()["channels"] == journal.totals()["consumers"] == 600
    first = clients[0].conn.id
    row = journal.rows["channels"][f"{first}:7"]
    assert (row["number"], row["consumer_count"], row["messages_unacknowledged"]) == (7, 1, 0)
    consumer = journal.rows["consumers"][f"{first}:7:c7"]
    assert consumer["queue"] == {"name": "work", "vhost": "/"} and consumer["unacked"] == 0
    version = journal.version

    vhost = broker.vhost  # delivered to one consumer: its channel and consumer change
    vhost.publish(vhost.exchange(""), Message("", "work", body=b"x"))
    tick()
    delta = journal.since(version)
    assert delta is not None
    [moved] = delta.lists["channels"].changed
    assert delta.lists["channels"].changed[moved]["messages_unacknowledged"] == 1
    assert list(delta.lists["consumers"].changed) == [f"{moved}:c{moved.split(':')[1]}"]
    version = journal.version

    clients[1].send(3, commands.Basic.Cancel(consumer_tag="c3"))
    clients[2].conn.connection_lost()  # its socket went
    tick()
    delta = journal.since(version)
    assert delta is not None
    second, third = clients[1].conn.id, clients[2].conn.id
    gone = delta.lists["consumers"].removed
    assert f"{second}:3:c3" in gone and len(gone) == 201
    assert len(delta.lists["channels"].removed) == 200
    assert {k.split(":")[0] for k in delta.lists["channels"].removed} == {str(third)}
    assert delta.lists["channels"].changed[f"{second}:3"]["consumer_count"] == 0
    assert delta.totals["channels"] == 400 and delta.totals["consumers"] == 399

    query = {"page": "2", "page_size": "5", "sort": "number"}
    page = ListPage(parse_query(query, CONSOLE_KINDS["channels"]), "channels")
    text = run_steps(feed.lists.page_steps(page, whole=True))
    assert text is not None
    shown = json.loads(text)
    # by number, equal numbers in the list's order (connection id): page 2 of 5 rows
    assert shown["keys"] == [
        f"{second}:3",
        f"{first}:4",
        f"{second}:4",
        f"{first}:5",
        f"{second}:5",
    ]
    assert (shown["filtered_count"], shown["total_count"]) == (400, 400)

    feed.lists.channel_viewers = 0  # nobody follows them any more: the rows go
    tick()
    assert journal.totals()["channels"] == journal.totals()["consumers"] == 0


def test_a_page_of_one_connections_channels_builds_only_those() -> None:
    """The Connections tab pages one connection's channels (a filter on their names):
    only the channels some viewer's page may show are built (a primary's backups' links
    hold a channel per queue: 20,000 at 10,000 queues), the page's total counts them all;
    a page without a filter, a page of consumers or a reader of the changes builds all."""
    from broker.management.console.live_lists import CONSOLE_KINDS, ListPage, channels_wanted_by
    from broker.management.lists import parse_query
    from common.slices import run_steps
    from tests.amqp.helpers import Client

    broker, clock = HaBroker(), Clock()
    clients = []
    for _ in range(3):
        client = Client(broker.context)
        client.handshake()
        for number in range(1, 4):
            client.open_channel(number)
        client.take()
        clients.append(client)
    feed = LiveFeed(broker, get_logger("management"), clock)
    feed.viewers = 1
    lists, journal = feed.lists, feed.lists.journal
    mine = clients[1].conn
    pattern = "^" + re.escape(mine.name) + r" \("
    query = {"page": "1", "page_size": "100", "name": pattern, "use_regex": "true"}
    page = ListPage(parse_query(query, CONSOLE_KINDS["channels"]), "channels")
    lists.channel_viewers = 1
    lists.channel_filters.append(channels_wanted_by([page]))
    clock.now += 1.0
    feed.sample()
    assert sorted(journal.rows["channels"]) == [f"{mine.id}:{n}" for n in (1, 2, 3)]
    shown = json.loads(run_steps(lists.page_steps(page, whole=True)) or "{}")
    assert shown["keys"] == [f"{mine.id}:{n}" for n in (1, 2, 3)]
    assert (shown["filtered_count"], shown["total_count"]) == (3, 9)

    consumers = ListPage(parse_query({"page": "1"}, CONSOLE_KINDS["consumers"]), "consumers")
    assert channels_wanted_by([page, consumers]) is None  # a consumer's filter: tags, queues
    # a reader of GET /api/changes right after such a tick: every channel, at once
    request = SimpleNamespace(query={})
    answer = asyncio.run(feed.changes(request))  # type: ignore[arg-type]
    assert answer.text is not None and len(json.loads(answer.text)["lists"]["channels"]) == 9
    clock.now += 1.0
    feed.sample()  # and at each tick while it reads
    assert journal.totals()["channels"] == 9 and lists.channels_whole


def test_amqp_1_0_connections_are_followed_and_sorted_by_rate() -> None:
    """The live connections list has both protocols, as ``GET /api/connections``: an AMQP
    1.0 connection with RabbitMQ's protocol name ("AMQP 1-0"), counted by the Overview,
    without channels of its own in the channels list; a page sorted by a rate
    (``recv_oct_details.rate``, the field's field) follows the rates of each tick."""
    from broker.amqp10.connection import Connection as Amqp10Connection
    from broker.management.console.live_lists import CONSOLE_KINDS, ListPage
    from broker.management.lists import parse_query
    from common.slices import run_steps
    from tests.amqp.helpers import Client

    broker, clock = HaBroker(), Clock()
    client = Client(broker.context)
    client.handshake()
    client.open_channel(1)
    client.take()
    zero_nine_one = client.conn
    one = Amqp10Connection(broker.context, "127.0.0.1:40001")
    feed = LiveFeed(broker, get_logger("management"), clock)
    feed.viewers = 1
    feed.lists.channel_viewers = 1  # the channels built: the 0-9-1 connection's only
    journal = feed.lists.journal
    query = {"page": "1", "sort": "recv_oct_details.rate", "sort_reverse": "true"}
    page = ListPage(parse_query(query, CONSOLE_KINDS["connections"]), "connections")

    def tick_with(busier: Any) -> list[str]:
        clock.now += 1.0
        busier.recv_oct += 10_000
        feed.sample()
        return list(json.loads(run_steps(feed.lists.page_steps(page, whole=True)) or "{}")["keys"])

    tick_with(one)  # the first reading of each: rates from the next
    rows = journal.rows["connections"]
    assert rows[str(one.id)]["protocol"] == "AMQP 1-0"
    assert rows[str(zero_nine_one.id)]["protocol"] == "AMQP 0-9-1"
    assert list(journal.rows["channels"]) == [f"{zero_nine_one.id}:1"]
    assert feed.state is not None
    totals, node = feed.state["overview"]["totals"], feed.state["overview"]["node"]
    assert (totals["connections"], totals["channels"], node["sockets_used"]) == (2, 1, 2)
    assert tick_with(one) == [str(one.id), str(zero_nine_one.id)]
    assert rows[str(one.id)]["recv_oct_details"] == {"rate": 10_000.0}
    assert tick_with(zero_nine_one) == [str(zero_nine_one.id), str(one.id)]
