"""Every list of the management API with RabbitMQ's query (filter, sort, page, columns) on
a real broker whose objects a pika client made over real sockets; bad parameters are 400s
that name the value; without parameters each list answers as before (a plain array)."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pika
import pytest

from tests.broker_process import BrokerProcess
from tests.management.support import GUEST

#: queue name -> messages it holds
QUEUES = {f"lq-{i:02d}": (i * 7) % 5 for i in range(30)}


@pytest.fixture(scope="module")
def qpidd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker with 30 queues (some holding messages), a topic exchange binding 10 of
    them, and three pika connections, two of them consuming."""
    process = BrokerProcess(tmp_path_factory.mktemp("list-query") / "qpidd").start()
    connections: list[pika.BlockingConnection] = []
    try:
        params = pika.URLParameters(process.url)
        maker = pika.BlockingConnection(params)
        connections.append(maker)
        channel = maker.channel()
        channel.exchange_declare("lx-topic", "topic")
        for name, count in QUEUES.items():
            channel.queue_declare(name)
            for _ in range(count):
                channel.basic_publish("", name, b"m")
        for i in range(10):
            channel.queue_bind(f"lq-{i:02d}", "lx-topic", f"orders.{i}.#")
        for tags in (("tag-a1", "tag-a2"), ("tag-b1",)):
            consumer = pika.BlockingConnection(params)
            connections.append(consumer)
            consuming = consumer.channel()
            consuming.basic_qos(prefetch_count=0)
            for queue, tag in zip(("lq-20", "lq-25"), tags, strict=False):  # empty queues
                consuming.basic_consume(queue, lambda *a: None, consumer_tag=tag)
        yield process
    finally:
        for connection in connections:
            connection.close()
        process.stop()


def get(broker: BrokerProcess, path: str, **query: str) -> tuple[int, Any]:
    url = f"http://127.0.0.1:{broker.mgmt_port}{path}"
    if query:
        url += "?" + urllib.parse.urlencode(query)
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url, headers=GUEST), timeout=10
        ) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def ok(broker: BrokerProcess, path: str, **query: str) -> Any:
    status, body = get(broker, path, **query)
    assert status == 200, body
    return body


def bad(broker: BrokerProcess, path: str, words: str, **query: str) -> None:
    status, body = get(broker, path, **query)
    assert status == 400, body
    assert body["error"] == "bad_request" and words in body["reason"], body


def test_queues_filter_sort_page_and_columns(qpidd: BrokerProcess) -> None:
    plain = ok(qpidd, "/api/queues")
    assert isinstance(plain, list) and [q["name"] for q in plain] == sorted(QUEUES)
    page = ok(qpidd, "/api/queues", page="2", page_size="10")
    assert [q["name"] for q in page["items"]] == [f"lq-{i}" for i in range(10, 20)]
    assert {k: v for k, v in page.items() if k != "items"} == {
        "page": 2,
        "page_size": 10,
        "page_count": 3,
        "filtered_count": 30,
        "item_count": 10,
        "total_count": 30,
    }
    found = ok(qpidd, "/api/queues", page="1", name="LQ-2")  # ignoring case
    assert [q["name"] for q in found["items"]] == [f"lq-2{i}" for i in range(10)]
    assert (found["filtered_count"], found["total_count"]) == (10, 30)
    regex = ok(qpidd, "/api/queues", name="^lq-(0|1)5$", use_regex="true", pagination="true")
    assert [q["name"] for q in regex["items"]] == ["lq-05", "lq-15"]
    fullest = ok(
        qpidd, "/api/queues", sort="messages", sort_reverse="true", columns="name,messages"
    )
    expected = sorted(QUEUES, key=lambda n: -QUEUES[n])  # ties keep the order by name
    assert [q["name"] for q in fullest] == expected
    assert fullest[0] == {"name": expected[0], "messages": 4}
    consumed = ok(qpidd, "/api/queues", sort="consumers", sort_reverse="true", page_size="2")
    assert [(q["name"], q["consumers"]) for q in consumed["items"]] == [("lq-20", 2), ("lq-25", 1)]
    nested = ok(qpidd, "/api/queues", columns="name,arguments.x-max-length", page_size="1")
    assert nested["items"] == [{"name": "lq-00", "arguments": {"x-max-length": None}}]


def test_bad_parameters_are_400s_naming_the_value(qpidd: BrokerProcess) -> None:
    bad(qpidd, "/api/queues", "page must be a positive integer, not '0'", page="0")
    bad(qpidd, "/api/queues", "page_size must be between 1 and 500, not '501'", page_size="501")
    bad(qpidd, "/api/queues", "page 9 is out of range: the list has 1 page(s)", page="9")
    bad(qpidd, "/api/queues", "sort: no field 'nope'", sort="nope")
    bad(qpidd, "/api/queues", "columns: no field 'x'", columns="name,x")
    bad(qpidd, "/api/queues", "use_regex must be true or false, not 'maybe'", use_regex="maybe")
    bad(qpidd, "/api/queues", "not a regular expression: '['", name="[", use_regex="true")
    bad(qpidd, "/api/queues", "repeats a repetition", name="(a+)+$", use_regex="true")
    bad(qpidd, "/api/queues", "2 unbounded repetitions", name=".*.*x", use_regex="true")
    bad(qpidd, "/api/queues", "at most 256 characters", name="a" * 300)
    for path in ("/api/exchanges", "/api/bindings", "/api/connections", "/api/channels"):
        bad(qpidd, path, "sort: no field 'messages'", sort="messages")
    bad(qpidd, "/api/consumers", "back-reference", name=r"(a)\1", use_regex="true")


def test_exchanges_and_bindings(qpidd: BrokerProcess) -> None:
    exchanges = ok(qpidd, "/api/exchanges", name="lx", page="1")
    assert [e["name"] for e in exchanges["items"]] == ["lx-topic"]
    assert exchanges["total_count"] == len(ok(qpidd, "/api/exchanges"))
    by_type = ok(qpidd, "/api/exchanges", sort="type", columns="type")
    assert [e["type"] for e in by_type] == sorted(e["type"] for e in by_type)
    bindings = ok(qpidd, "/api/bindings", name="orders.3", page="1", page_size="5")
    assert [(b["source"], b["destination"]) for b in bindings["items"]] == [("lx-topic", "lq-03")]
    keys = ok(qpidd, "/api/bindings", sort="routing_key", sort_reverse="true", page_size="3")
    assert [b["routing_key"] for b in keys["items"]] == [f"orders.{i}.#" for i in (9, 8, 7)]
    assert (keys["total_count"], keys["page_count"]) == (10, 4)


def test_connections_channels_and_consumers(qpidd: BrokerProcess) -> None:
    connections = ok(qpidd, "/api/connections", sort="id", sort_reverse="true", columns="id")
    ids = [c["id"] for c in connections]
    assert len(ids) >= 3 and ids == sorted(ids, reverse=True)
    one = ok(qpidd, "/api/connections", page="2", page_size="1", columns="id,user")
    assert one["items"] == [{"id": sorted(ids)[1], "user": "guest"}]
    channels = ok(qpidd, "/api/channels", sort="consumer_count", sort_reverse="true", page="1")
    assert [c["consumer_count"] for c in channels["items"]][:2] == [2, 1]
    named = ok(qpidd, "/api/channels", name=channels["items"][0]["name"], page="1")
    assert named["filtered_count"] == 1
    consumers = ok(qpidd, "/api/consumers")
    assert sorted(c["consumer_tag"] for c in consumers) == ["tag-a1", "tag-a2", "tag-b1"]
    tagged = ok(qpidd, "/api/consumers", name="^tag-a", use_regex="true", sort="queue.name")
    assert [(c["consumer_tag"], c["queue"]) for c in tagged] == [
        ("tag-a1", {"name": "lq-20", "vhost": "/"}),
        ("tag-a2", {"name": "lq-25", "vhost": "/"}),
    ]
    by_queue = ok(
        qpidd, "/api/consumers", name="lq-25", columns="consumer_tag,queue.name,ack_required"
    )
    assert by_queue == [
        {"consumer_tag": "tag-a2", "queue": {"name": "lq-25"}, "ack_required": True}
    ]
    page = ok(qpidd, "/api/consumers", page="2", page_size="2", sort="consumer_tag")
    assert [c["consumer_tag"] for c in page["items"]] == ["tag-b1"]
    assert page["item_count"] == 1


def test_a_page_of_channels_in_the_lists_order_is_the_whole_lists_page(
    qpidd: BrokerProcess,
) -> None:
    """Unsorted, a page of channels is chosen before its rows are built (a primary's
    backups' links hold 20,000 channels at 10,000 queues): the same rows, counts and
    columns as the page of every row built; a connection's channels likewise."""
    every = ok(qpidd, "/api/channels")
    assert len(every) >= 3
    second = ok(qpidd, "/api/channels", page="2", page_size="1")
    assert second["items"] == every[1:2]
    assert (second["total_count"], second["filtered_count"]) == (len(every), len(every))
    name = every[-1]["name"]
    named = ok(qpidd, "/api/channels", name=name, page="1", columns="name,consumer_count")
    assert named["items"] == [{"name": name, "consumer_count": every[-1]["consumer_count"]}]
    assert named["filtered_count"] == 1 and named["total_count"] == len(every)
    bad(qpidd, "/api/channels", "out of range", page="99", page_size="100")
    connection = every[0]["connection"]
    mine = ok(qpidd, f"/api/connections/{connection}/channels")
    assert mine == [c for c in every if c["connection"] == connection]


def test_each_list_names_the_fields_its_rows_have(qpidd: BrokerProcess) -> None:
    """What sort and columns accept is what the rows hold (a field added to a view and not
    to its list would be refused)."""
    from broker.management import lists

    every = (lists.QUEUES, lists.EXCHANGES, lists.BINDINGS, lists.CONNECTIONS, lists.CHANNELS)
    for kind in (*every, lists.CONSUMERS):
        rows = ok(qpidd, f"/api/{kind.name}")
        assert rows and all(set(row) == set(kind.fields) for row in rows), kind.name
