"""The Prometheus metrics: valid text format, the samples, label escaping, the endpoint."""

from __future__ import annotations

from typing import Any

from broker import __version__
from broker.management.metrics import CONTENT_TYPE, escape_label_value, format_value, render_metrics
from tests.amqp.helpers import open_client
from tests.management.support import (
    GUEST,
    FakeBroker,
    FakeOptions,
    basic,
    parse_metrics,
    publish,
    sample,
    serve,
)


def test_metrics_text_is_valid_and_complete() -> None:
    broker = FakeBroker()
    open_client(broker.context)
    text = render_metrics(broker, now=broker.started_at + 12.5)
    samples = parse_metrics(text)
    assert sample(samples, "qpidd_up") == 1
    assert sample(samples, "qpidd_uptime_seconds") == 12.5
    assert sample(samples, "qpidd_connections") == 1
    assert sample(samples, "qpidd_connections_opened_total") == 1
    assert sample(samples, "qpidd_connections_refused_total") == 0
    assert sample(samples, "qpidd_protocol_errors_total") == 0
    assert sample(samples, "qpidd_queues") == 0
    assert sample(samples, "qpidd_exchanges") == 6
    assert sample(samples, "qpidd_messages_published_total") == 0
    assert sample(samples, "qpidd_messages_unroutable_total") == 0
    assert sample(samples, "qpidd_messages_dead_lettered_total") == 0
    assert (
        sample(samples, "qpidd_info", node="node-a", version=__version__, ha_state="standalone")
        == 1
    )
    for name in (
        "qpidd_up",
        "qpidd_queue_messages",
        "qpidd_queue_enqueued_total",
        "qpidd_messages_published_total",
    ):
        assert f"# HELP {name} " in text
    assert "# TYPE qpidd_queue_messages gauge" in text
    assert "# TYPE qpidd_queue_acked_total counter" in text
    assert "# TYPE qpidd_messages_published_total counter" in text


def test_metrics_follow_queues_and_messages() -> None:
    broker = FakeBroker()
    vhost = broker.vhost
    before = parse_metrics(render_metrics(broker))
    assert not any(name.startswith("qpidd_queue_") for name, _ in before)

    vhost.declare_queue("work", arguments={"x-max-length": 1, "x-dead-letter-exchange": "dlx"})
    vhost.declare_exchange("dlx", "fanout")
    vhost.declare_queue("dead")
    vhost.bind("dead", "dlx", "")
    publish(broker, "", "work", b"one")
    publish(broker, "", "work", b"two")  # drops "one" (drop-head) into the DLX
    publish(broker, "amq.direct", "nowhere")

    after = parse_metrics(render_metrics(broker))
    assert sample(after, "qpidd_queues") == 2
    assert sample(after, "qpidd_exchanges") == 7
    assert sample(after, "qpidd_messages_published_total") == 4  # the dead letter too
    assert sample(after, "qpidd_messages_unroutable_total") == 1
    assert sample(after, "qpidd_messages_dead_lettered_total") == 1
    assert sample(after, "qpidd_queue_messages", queue="work") == 1
    assert sample(after, "qpidd_queue_bytes", queue="work") == 3
    assert sample(after, "qpidd_queue_enqueued_total", queue="work") == 2
    assert sample(after, "qpidd_queue_dropped_total", queue="work") == 1
    assert sample(after, "qpidd_queue_messages", queue="dead") == 1
    for name in (
        "qpidd_queue_messages_unacked",
        "qpidd_queue_consumers",
        "qpidd_queue_delivered_total",
        "qpidd_queue_acked_total",
        "qpidd_queue_expired_total",
        "qpidd_queue_rejected_publishes_total",
    ):
        assert sample(after, name, queue="work") == 0, name


def test_metrics_escape_label_values() -> None:
    broker = FakeBroker()
    awkward = 'a"b\\c\nd'
    broker.vhost.declare_queue(awkward)
    text = render_metrics(broker)
    assert 'qpidd_queue_messages{queue="a\\"b\\\\c\\nd"} 0' in text
    samples = parse_metrics(text)
    assert sample(samples, "qpidd_queue_messages", queue=awkward) == 0


def test_metric_value_and_label_formatting() -> None:
    assert escape_label_value('x"y\\z\n') == 'x\\"y\\\\z\\n'
    assert format_value(3) == "3"
    assert format_value(True) == "1"
    assert format_value(0.25) == "0.25"
    assert format_value(float("inf")) == "+Inf"
    assert format_value(float("-inf")) == "-Inf"
    assert format_value(float("nan")) == "NaN"


def test_metrics_endpoint_changes_after_creating_a_queue() -> None:
    broker = FakeBroker(options=FakeOptions(auth=True))

    async def scenario(client: Any) -> None:
        response = await client.get("/metrics")  # open without credentials
        assert response.status == 200
        assert response.headers["Content-Type"] == CONTENT_TYPE
        before = parse_metrics(await response.text())
        assert sample(before, "qpidd_queues") == 0

        assert (await client.put("/api/queues/jobs", headers=GUEST)).status == 201
        publish(broker, "", "jobs", b"12345")

        # Without a login the aggregates only: no queue name (RabbitMQ's default).
        anonymous = await (await client.get("/metrics")).text()
        assert "jobs" not in anonymous and "qpidd_queue_messages" not in anonymous
        assert sample(parse_metrics(anonymous), "qpidd_queues") == 1
        assert sample(parse_metrics(anonymous), "qpidd_messages_published_total") == 1
        # Credentials given are checked; a login sees the per-queue series.
        wrong = await client.get("/metrics", headers=basic("guest", "wrong"))
        assert wrong.status == 401
        after = parse_metrics(await (await client.get("/metrics", headers=GUEST)).text())
        assert sample(after, "qpidd_queues") == 1
        assert sample(after, "qpidd_queue_messages", queue="jobs") == 1
        assert sample(after, "qpidd_queue_bytes", queue="jobs") == 5
        assert sample(after, "qpidd_messages_published_total") == 1

    serve(broker, scenario)


def test_metrics_in_slices_are_the_same_text_a_few_samples_at_a_time() -> None:
    """The endpoint renders a slice a turn of the loop (issue 25): the slices make the text
    of one render, each family's HELP and TYPE once, no slice over its size."""
    from broker.management.metrics import collect, render_slices

    broker = FakeBroker()
    for i in range(5):
        broker.vhost.declare_queue(f"q{i}")
    slices = list(render_slices(broker, now=broker.started_at, size=2))
    whole = "\n".join(line for f in collect(broker, broker.started_at) for line in f.render())
    assert "".join(slices) == whole + "\n"
    queue_slices = [s for s in slices if s.startswith(("qpidd_queue_", "# HELP qpidd_queue_"))]
    assert all(sum(not line.startswith("#") for line in s.splitlines()) <= 2 for s in queue_slices)
    assert "".join(slices).count("# TYPE qpidd_queue_messages gauge") == 1


def test_metrics_per_queue_without_a_login_when_configured_or_auth_off() -> None:
    for options in (FakeOptions(auth=True, metrics_per_queue=True), FakeOptions(auth=False)):
        broker = FakeBroker(options=options)

        async def scenario(client: Any) -> None:
            assert (await client.put("/api/queues/jobs", headers=GUEST)).status == 201
            samples = parse_metrics(await (await client.get("/metrics")).text())
            assert sample(samples, "qpidd_queue_messages", queue="jobs") == 0

        serve(broker, scenario)
