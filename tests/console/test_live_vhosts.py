"""The console's snapshot, its actions and the metrics with two virtual hosts: queues,
exchanges and bindings of each, named by vhost; one history (and one series) a queue even
when two vhosts hold queues of the same name."""

from __future__ import annotations

from aiohttp import web
from aiohttp.test_utils import TestClient

from broker.core.message import Message
from broker.core.vhosts import VirtualHosts, queue_key
from broker.management.console.live import LiveFeed
from broker.management.metrics import render_metrics
from common.log import get_logger
from tests.management.support import FakeBroker, parse_metrics, sample, serve


class VhostsBroker(FakeBroker):
    """The stand-in broker with a registry of vhosts around its own."""

    def __init__(self) -> None:
        super().__init__()
        self.vhosts = VirtualHosts(default=self.context.vhost)


def test_the_snapshot_shows_every_vhost_and_keeps_same_named_queues_apart() -> None:
    broker = VhostsBroker()
    other, _ = broker.vhosts.create("other")
    broker.vhost.declare_queue("q")
    other.declare_queue("q")
    other.declare_exchange("x", "fanout")
    other.bind("q", "x", "")
    other.publish(other.exchange("x"), Message("x", "", body=b"1"))
    feed = LiveFeed(broker, get_logger("management"))
    feed.sample()
    snapshot = feed.fresh()
    assert [(q["vhost"], q["name"], q["messages"]) for q in snapshot["queues"]] == [
        ("/", "q", 0),
        ("other", "q", 1),
    ]
    assert ("other", "x") in {(e["vhost"], e["name"]) for e in snapshot["exchanges"]}
    assert [(b["vhost"], b["source"]) for b in snapshot["bindings"]] == [("other", "x")]
    assert [v["name"] for v in snapshot["vhosts"]] == ["/", "other"]
    assert snapshot["status"]["queues"] == 2
    assert set(feed.queue_history) == {"q", queue_key("other", "q")}
    assert feed.queue_history[queue_key("other", "q")][-1]["messages"] == 1


def test_purge_get_and_publish_act_in_the_vhost_named() -> None:
    broker = VhostsBroker()
    other, _ = broker.vhosts.create("other")
    mine = broker.vhost.declare_queue("q")
    theirs = other.declare_queue("q")

    async def scenario(client: TestClient[web.Request, web.Application]) -> None:
        published = await client.post(
            "/api/exchanges/amq.default/publish?vhost=other", json={"routing_key": "q"}
        )
        assert (await published.json())["queues"] == 1
        assert (mine.message_count, theirs.message_count) == (0, 1)
        got = await client.post("/api/queues/q/get?vhost=other", json={"count": 1})
        assert len(await got.json()) == 1
        purged = await client.delete("/api/queues/q/contents?vhost=other")
        assert (await purged.json())["messages_purged"] == 1
        missing = await client.delete("/api/queues/q/contents?vhost=nope")
        assert missing.status == 404 and "no vhost 'nope'" in (await missing.json())["reason"]
        deleted = await client.delete("/api/queues/other/q")
        assert (await deleted.json())["vhost"] == "other"
        assert "q" not in other.queues and "q" in broker.vhost.queues

    serve(broker, scenario)


def test_metrics_count_every_vhost_and_label_a_queue_outside_the_default() -> None:
    broker = VhostsBroker()
    other, _ = broker.vhosts.create("other")
    broker.vhost.declare_queue("q")
    other.declare_queue("q")
    other.publish(other.exchange(""), Message("", "q", body=b"1"))
    samples = parse_metrics(render_metrics(broker, now=0.0))  # no duplicate series
    assert sample(samples, "qpidd_queues") == 2
    assert sample(samples, "qpidd_queue_messages", queue="q") == 0
    assert sample(samples, "qpidd_queue_messages", queue="q", vhost="other") == 1
