"""pika's BlockingConnection against a real qpidd, used exactly as against RabbitMQ."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel
from pika.exceptions import (
    AuthenticationError,
    ChannelClosedByBroker,
    NackError,
    ProbableAccessDeniedError,
    ProbableAuthenticationError,
    UnroutableError,
)
from pika.spec import Basic, BasicProperties

from common.polling import poll_until
from tests.broker_process import BrokerProcess
from tests.e2e.conftest import StartBroker
from tests.e2e.support import (
    RawClient,
    connect,
    events,
    pika_params,
    unique,
)


@pytest.fixture
def conn(shared_broker: BrokerProcess) -> Iterator[pika.BlockingConnection]:
    connection = connect(shared_broker)
    try:
        yield connection
    finally:
        if connection.is_open:
            connection.close()


def drain(channel: BlockingChannel, queue: str) -> list[bytes]:
    """Every ready message of ``queue`` (basic.get with auto-ack until empty)."""
    bodies: list[bytes] = []
    while True:
        method, _, body = channel.basic_get(queue, auto_ack=True)
        if method is None:
            return bodies
        bodies.append(body)


def ready_count(channel: BlockingChannel, queue: str) -> int:
    return int(channel.queue_declare(queue, passive=True).method.message_count)


def pump_until(connection: pika.BlockingConnection, predicate: Any, timeout: float = 5.0) -> None:
    """Process pika's I/O until ``predicate()`` holds, failing after ``timeout``."""
    poll_until(
        predicate, timeout, between=lambda _left: connection.process_data_events(time_limit=0.05)
    )


# -- the basics ------------------------------------------------------------------------------
def test_declare_publish_consume_ack(conn: pika.BlockingConnection) -> None:
    channel = conn.channel()
    queue = unique("basic")
    declared = channel.queue_declare(queue)
    assert (declared.method.queue, declared.method.message_count) == (queue, 0)
    assert declared.method.consumer_count == 0
    for i in range(5):
        channel.basic_publish(
            "",
            queue,
            f"m{i}".encode(),
            BasicProperties(content_type="text/plain", headers={"i": i}),
        )
    assert ready_count(channel, queue) == 5

    received: list[bytes] = []
    for method, props, body in channel.consume(queue, inactivity_timeout=5):
        assert method is not None, "no delivery within 5 s"
        assert not method.redelivered
        assert method.routing_key == queue and method.exchange == ""
        assert props.content_type == "text/plain"
        assert props.headers == {"i": len(received)}
        received.append(body)
        channel.basic_ack(method.delivery_tag)
        if len(received) == 5:
            break
    assert channel.cancel() == 0
    assert received == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    channel.close()

    # Acknowledged for good: closing the channel requeued nothing.
    other = conn.channel()
    assert ready_count(other, queue) == 0
    assert other.queue_delete(queue).method.message_count == 0


def test_basic_get(conn: pika.BlockingConnection) -> None:
    channel = conn.channel()
    queue = unique("get")
    channel.queue_declare(queue)
    assert channel.basic_get(queue) == (None, None, None)
    for body in (b"a", b"b", b"c"):
        channel.basic_publish("", queue, body, BasicProperties(message_id=body.decode()))

    method, props, body = channel.basic_get(queue)
    assert body == b"a" and props.message_id == "a"
    assert (method.message_count, method.redelivered) == (2, False)
    assert (method.exchange, method.routing_key) == ("", queue)
    channel.basic_ack(method.delivery_tag)

    method, _, body = channel.basic_get(queue, auto_ack=True)
    assert (body, method.message_count) == (b"b", 1)
    method, _, body = channel.basic_get(queue, auto_ack=True)
    assert (body, method.message_count) == (b"c", 0)
    assert channel.basic_get(queue) == (None, None, None)
    channel.queue_delete(queue)


def test_nack_and_reject_with_and_without_requeue(conn: pika.BlockingConnection) -> None:
    channel = conn.channel()
    queue = unique("nack")
    channel.queue_declare(queue)
    for body in (b"a", b"b"):
        channel.basic_publish("", queue, body)

    method, _, body = channel.basic_get(queue)
    assert (body, method.redelivered) == (b"a", False)
    channel.basic_nack(method.delivery_tag, requeue=True)
    method, _, body = channel.basic_get(queue)
    assert (body, method.redelivered) == (b"a", True)  # back at the head, marked
    channel.basic_reject(method.delivery_tag, requeue=True)
    method, _, body = channel.basic_get(queue)
    assert (body, method.redelivered) == (b"a", True)
    channel.basic_reject(method.delivery_tag, requeue=False)  # dropped (no DLX)

    method, _, body = channel.basic_get(queue)
    assert (body, method.redelivered) == (b"b", False)
    channel.basic_nack(method.delivery_tag, requeue=False)
    assert channel.basic_get(queue) == (None, None, None)

    # nack multiple=True requeues every delivery up to the tag, in the original order.
    for body in (b"x", b"y", b"z"):
        channel.basic_publish("", queue, body)
    tags = [channel.basic_get(queue)[0].delivery_tag for _ in range(3)]
    channel.basic_nack(tags[-1], multiple=True, requeue=True)
    redelivered = [channel.basic_get(queue, auto_ack=True) for _ in range(3)]
    assert [body for _, _, body in redelivered] == [b"x", b"y", b"z"]
    assert all(method.redelivered for method, _, _ in redelivered)
    channel.queue_delete(queue)


def test_ack_of_unknown_delivery_tag_closes_the_channel_406(conn: pika.BlockingConnection) -> None:
    channel = conn.channel()
    channel.basic_ack(12345)
    with pytest.raises(ChannelClosedByBroker) as info:
        channel.queue_declare("", exclusive=True)
    assert info.value.reply_code == 406
    assert "PRECONDITION_FAILED" in info.value.reply_text
    assert conn.is_open


# -- publisher confirms and returns ----------------------------------------------------------
def test_confirms_unroutable_mandatory_and_reject_publish_nack(
    conn: pika.BlockingConnection,
) -> None:
    channel = conn.channel()
    channel.confirm_delivery()
    queue = unique("bounded")
    channel.queue_declare(queue, arguments={"x-max-length": 1, "x-overflow": "reject-publish"})

    channel.basic_publish("", queue, b"fits")  # confirmed (ack)
    with pytest.raises(NackError):
        channel.basic_publish("", queue, b"overflows")

    nowhere = unique("nowhere")
    with pytest.raises(UnroutableError) as returned:
        channel.basic_publish("", nowhere, b"lost", mandatory=True)
    [message] = returned.value.messages
    assert message.body == b"lost"
    assert (message.method.reply_code, message.method.reply_text) == (312, "NO_ROUTE")
    assert message.method.routing_key == nowhere

    channel.basic_publish("", nowhere, b"dropped")  # not mandatory: silently acked
    assert ready_count(channel, queue) == 1
    assert drain(channel, queue) == [b"fits"]

    # A publish to a missing exchange closes the channel with 404.
    with pytest.raises(ChannelClosedByBroker) as closed:
        channel.basic_publish(unique("no-exchange"), "rk", b"x")
    assert closed.value.reply_code == 404
    conn.channel().queue_delete(queue)


def test_mandatory_return_without_confirms(conn: pika.BlockingConnection) -> None:
    channel = conn.channel()
    returned: list[tuple[Basic.Return, bytes]] = []
    channel.add_on_return_callback(
        lambda _ch, method, _props, body: returned.append((method, body))
    )
    channel.basic_publish("amq.direct", unique("unbound"), b"back", mandatory=True)
    pump_until(conn, lambda: returned)
    method, body = returned[0]
    assert (method.reply_code, method.exchange, body) == (312, "amq.direct", b"back")


# -- dead-lettering ------------------------------------------------------------------------
def test_dead_letter_on_nack(conn: pika.BlockingConnection) -> None:
    channel = conn.channel()
    source, dead = unique("dlx-src"), unique("dlx-dead")
    channel.queue_declare(dead)
    channel.queue_declare(
        source,
        arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dead},
    )
    channel.basic_publish(
        "", source, b"poison", BasicProperties(headers={"k": "v"}, message_id="m-1")
    )
    method, _, _ = channel.basic_get(source)
    channel.basic_nack(method.delivery_tag, requeue=False)

    method, props, body = channel.basic_get(dead, auto_ack=True)
    assert body == b"poison"
    assert (method.exchange, method.routing_key) == ("", dead)
    assert props.message_id == "m-1"
    headers = props.headers
    assert headers["k"] == "v"
    [death] = headers["x-death"]
    assert death["reason"] == "rejected"
    assert death["queue"] == source
    assert death["count"] == 1
    assert death["exchange"] == ""
    assert death["routing-keys"] == [source]
    assert isinstance(death["time"], datetime)
    assert headers["x-first-death-reason"] == "rejected"
    assert headers["x-first-death-queue"] == source
    assert headers["x-first-death-exchange"] == ""
    assert ready_count(channel, source) == 0
    channel.queue_delete(source)
    channel.queue_delete(dead)


def test_dead_letter_on_ttl_expiry(conn: pika.BlockingConnection) -> None:
    channel = conn.channel()
    dlx, dead = unique("dlx"), unique("expired")
    queue_ttl, message_ttl = unique("queue-ttl"), unique("message-ttl")
    channel.exchange_declare(dlx, "direct", auto_delete=True)
    channel.queue_declare(dead)
    for source in (queue_ttl, message_ttl):
        channel.queue_bind(dead, dlx, routing_key=source)  # DLX keeps the original key
    channel.queue_declare(queue_ttl, arguments={"x-message-ttl": 50, "x-dead-letter-exchange": dlx})
    channel.queue_declare(message_ttl, arguments={"x-dead-letter-exchange": dlx})
    channel.basic_publish("", queue_ttl, b"queue-ttl")
    channel.basic_publish("", message_ttl, b"message-ttl", BasicProperties(expiration="50"))

    got: dict[bytes, tuple[Basic.GetOk, BasicProperties]] = {}

    def collect() -> bool:
        method, props, body = channel.basic_get(dead, auto_ack=True)
        if method is not None:
            got[body] = (method, props)
        return len(got) == 2

    poll_until(collect, 5)
    for body, source in ((b"queue-ttl", queue_ttl), (b"message-ttl", message_ttl)):
        method, props = got[body]
        assert (method.exchange, method.routing_key) == (dlx, source)
        assert props.expiration is None  # the per-message TTL does not follow it
        [death] = props.headers["x-death"]
        assert (death["reason"], death["queue"], death["count"]) == ("expired", source, 1)
        assert death["routing-keys"] == [source]
        assert props.headers["x-first-death-reason"] == "expired"
    assert ready_count(channel, queue_ttl) == ready_count(channel, message_ttl) == 0
    for queue in (queue_ttl, message_ttl, dead):
        channel.queue_delete(queue)


def test_max_length_drop_head_dead_letters_the_oldest(conn: pika.BlockingConnection) -> None:
    channel = conn.channel()
    source, dead = unique("maxlen"), unique("maxlen-dead")
    channel.queue_declare(dead)
    channel.queue_declare(
        source,
        arguments={
            "x-max-length": 2,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": dead,
        },
    )
    for body in (b"1", b"2", b"3", b"4"):
        channel.basic_publish("", source, body)
    assert drain(channel, source) == [b"3", b"4"]
    _, props, body = channel.basic_get(dead, auto_ack=True)
    assert body == b"1" and props.headers["x-death"][0]["reason"] == "maxlen"
    assert drain(channel, dead) == [b"2"]
    channel.queue_delete(source)
    channel.queue_delete(dead)


def test_unused_queue_expires(conn: pika.BlockingConnection) -> None:
    queue = unique("expires")
    channel = conn.channel()
    channel.queue_declare(queue, arguments={"x-expires": 200})
    channel.confirm_delivery()

    def gone() -> bool:
        # Publishing does not count as use (a passive declare would renew the lease).
        try:
            channel.basic_publish("", queue, b"probe", mandatory=True)
        except UnroutableError:
            return True
        return False

    poll_until(gone, 5, interval=0.05)


# -- flow control --------------------------------------------------------------------------
def test_prefetch_count_per_consumer(conn: pika.BlockingConnection) -> None:
    channel = conn.channel()
    queue = unique("prefetch")
    channel.queue_declare(queue)
    for i in range(10):
        channel.basic_publish("", queue, str(i).encode())
    channel.basic_qos(prefetch_count=3)
    deliveries: list[Basic.Deliver] = []
    channel.basic_consume(queue, lambda _ch, method, _p, _b: deliveries.append(method))
    # Dispatch happens while the broker handles basic.consume, so one more round trip
    # shows exactly how many it handed out: three, and seven still ready.
    assert ready_count(channel, queue) == 7
    pump_until(conn, lambda: len(deliveries) >= 3)
    assert len(deliveries) == 3

    channel.basic_ack(deliveries[0].delivery_tag)  # one credit back: one more delivery
    assert ready_count(channel, queue) == 6
    pump_until(conn, lambda: len(deliveries) >= 4)
    channel.basic_ack(deliveries[3].delivery_tag, multiple=True)  # three credits back
    assert ready_count(channel, queue) == 3
    pump_until(conn, lambda: len(deliveries) >= 7)
    assert len(deliveries) == 7
    channel.close()  # three unacknowledged deliveries go back
    assert ready_count(conn.channel(), queue) == 6


def test_prefetch_count_global_is_shared_by_the_channel(conn: pika.BlockingConnection) -> None:
    channel = conn.channel()
    queues = [unique("global-a"), unique("global-b")]
    for queue in queues:
        channel.queue_declare(queue)
        for i in range(5):
            channel.basic_publish("", queue, str(i).encode())
    channel.basic_qos(prefetch_count=4, global_qos=True)
    deliveries: list[Basic.Deliver] = []
    for queue in queues:
        channel.basic_consume(queue, lambda _ch, method, _p, _b: deliveries.append(method))
    assert sum(ready_count(channel, queue) for queue in queues) == 6
    pump_until(conn, lambda: len(deliveries) >= 4)
    assert len(deliveries) == 4
    channel.basic_ack(0, multiple=True)
    assert sum(ready_count(channel, queue) for queue in queues) == 2
    channel.close()
    for queue in queues:
        conn.channel().queue_delete(queue)


def test_unacked_messages_are_redelivered_when_the_connection_closes(
    shared_broker: BrokerProcess,
) -> None:
    queue = unique("redeliver")
    first = connect(shared_broker)
    channel = first.channel()
    channel.queue_declare(queue)
    for body in (b"one", b"two", b"three"):
        channel.basic_publish("", queue, body)
    deliveries: list[Basic.Deliver] = []
    channel.basic_consume(queue, lambda _ch, method, _p, _b: deliveries.append(method))
    pump_until(first, lambda: len(deliveries) == 3)
    channel.basic_ack(deliveries[0].delivery_tag)
    first.close()

    second = connect(shared_broker)
    try:
        channel = second.channel()
        assert ready_count(channel, queue) == 2
        for expected in (b"two", b"three"):
            method, _, body = channel.basic_get(queue, auto_ack=True)
            assert (body, method.redelivered) == (expected, True)
        channel.queue_delete(queue)
    finally:
        second.close()


def test_consumer_is_cancelled_when_its_queue_is_deleted(conn: pika.BlockingConnection) -> None:
    channel = conn.channel()
    queue = unique("cancel-notify")
    channel.queue_declare(queue)
    cancelled: list[Basic.Cancel] = []
    channel.add_on_cancel_callback(lambda frame: cancelled.append(frame.method))
    tag = channel.basic_consume(queue, lambda *_: None)
    conn.channel().queue_delete(queue)
    pump_until(conn, lambda: cancelled)
    assert cancelled[0].consumer_tag == tag
    assert channel.is_open


# -- errors: exclusive, not found, inequivalent ----------------------------------------------
def test_exclusive_queue_is_locked_to_its_connection(shared_broker: BrokerProcess) -> None:
    owner = connect(shared_broker)
    other = connect(shared_broker)
    try:
        queue = unique("exclusive")
        owner.channel().queue_declare(queue, exclusive=True)
        attempts = {
            "declare": lambda ch: ch.queue_declare(queue, exclusive=True),
            "passive declare": lambda ch: ch.queue_declare(queue, passive=True),
            "consume": lambda ch: ch.basic_consume(queue, lambda *_: None),
            "get": lambda ch: ch.basic_get(queue),
            "purge": lambda ch: ch.queue_purge(queue),
            "delete": lambda ch: ch.queue_delete(queue),
        }
        for what, attempt in attempts.items():
            channel = other.channel()
            with pytest.raises(ChannelClosedByBroker) as info:
                attempt(channel)
            assert info.value.reply_code == 405, what
            assert "RESOURCE_LOCKED" in info.value.reply_text, what
        assert other.is_open

        owner.close()  # the exclusive queue goes with its connection
        with pytest.raises(ChannelClosedByBroker) as gone:
            other.channel().queue_declare(queue, passive=True)
        assert gone.value.reply_code == 404
    finally:
        for connection in (owner, other):
            if connection.is_open:
                connection.close()


def test_passive_declare_of_missing_queue_is_404_and_connection_survives(
    conn: pika.BlockingConnection,
) -> None:
    channel = conn.channel()
    missing = unique("missing")
    with pytest.raises(ChannelClosedByBroker) as info:
        channel.queue_declare(missing, passive=True)
    assert info.value.reply_code == 404
    assert info.value.reply_text == f"NOT_FOUND - no queue '{missing}' in vhost '/'"
    assert channel.is_closed and conn.is_open

    with pytest.raises(ChannelClosedByBroker) as info:
        conn.channel().exchange_declare(unique("missing-ex"), passive=True)
    assert info.value.reply_code == 404

    fresh = conn.channel()
    queue = fresh.queue_declare("", exclusive=True).method.queue
    fresh.basic_publish("", queue, b"still fine")
    assert fresh.basic_get(queue, auto_ack=True)[2] == b"still fine"


def test_inequivalent_redeclare_is_406(conn: pika.BlockingConnection) -> None:
    channel = conn.channel()
    queue = unique("equiv")
    channel.queue_declare(queue, arguments={"x-message-ttl": 60000})
    channel.queue_declare(queue, arguments={"x-message-ttl": 60000})  # equivalent: fine
    redeclares = {
        "durable": lambda ch: ch.queue_declare(
            queue, durable=True, arguments={"x-message-ttl": 60000}
        ),
        "auto_delete": lambda ch: ch.queue_declare(
            queue, auto_delete=True, arguments={"x-message-ttl": 60000}
        ),
        "x-message-ttl": lambda ch: ch.queue_declare(queue, arguments={"x-message-ttl": 1000}),
    }
    for field, redeclare in redeclares.items():
        channel = conn.channel()
        with pytest.raises(ChannelClosedByBroker) as info:
            redeclare(channel)
        assert info.value.reply_code == 406, field
        assert f"inequivalent arg '{field}'" in info.value.reply_text

    exchange = unique("equiv-ex")
    conn.channel().exchange_declare(exchange, "direct", auto_delete=True)
    with pytest.raises(ChannelClosedByBroker) as info:
        conn.channel().exchange_declare(exchange, "fanout", auto_delete=True)
    assert info.value.reply_code == 406
    assert "inequivalent arg 'type'" in info.value.reply_text

    channel = conn.channel()
    assert channel.queue_declare(queue, passive=True).method.queue == queue
    channel.queue_delete(queue)
    channel.exchange_delete(exchange)


# -- transactions --------------------------------------------------------------------------
def test_tx_commit_and_rollback(conn: pika.BlockingConnection) -> None:
    tx = conn.channel()
    observer = conn.channel()
    queue = unique("tx")
    observer.queue_declare(queue)
    tx.tx_select()

    tx.basic_publish("", queue, b"rolled back")
    tx.tx_rollback()
    assert ready_count(observer, queue) == 0

    tx.basic_publish("", queue, b"committed")
    assert ready_count(observer, queue) == 0  # held until commit
    tx.tx_commit()
    assert ready_count(observer, queue) == 1

    # Acknowledgements are transactional too: a rolled-back ack leaves the delivery
    # unacknowledged, and it comes back when the channel closes.
    method, _, body = tx.basic_get(queue)
    assert body == b"committed"
    tx.basic_ack(method.delivery_tag)
    tx.tx_rollback()
    tx.close()
    assert ready_count(observer, queue) == 1

    tx = conn.channel()
    tx.tx_select()
    method, _, _ = tx.basic_get(queue)
    assert method.redelivered
    tx.basic_ack(method.delivery_tag)
    tx.tx_commit()
    tx.close()
    assert ready_count(observer, queue) == 0
    observer.queue_delete(queue)


# -- routing ---------------------------------------------------------------------------------
def test_topic_routing(conn: pika.BlockingConnection) -> None:
    channel = conn.channel()
    exchange = unique("topic")
    channel.exchange_declare(exchange, "topic", auto_delete=True)
    patterns = {"star": "a.*.c", "hash": "a.#", "tail": "#.z", "exact": "a.b.c", "all": "#"}
    queues = {name: unique(f"topic-{name}") for name in patterns}
    for name, pattern in patterns.items():
        channel.queue_declare(queues[name], auto_delete=True)
        channel.queue_bind(queues[name], exchange, routing_key=pattern)
    keys = ["a.b.c", "a.x.c", "a", "a.b.c.d", "q.z", "z", "a.b", "b.c"]
    for key in keys:
        channel.basic_publish(exchange, key, key.encode())
    expected = {
        "star": {"a.b.c", "a.x.c"},
        "hash": {"a.b.c", "a.x.c", "a", "a.b.c.d", "a.b"},
        "tail": {"q.z", "z"},
        "exact": {"a.b.c"},
        "all": set(keys),
    }
    for name, queue in queues.items():
        assert {body.decode() for body in drain(channel, queue)} == expected[name], name


def test_headers_routing(conn: pika.BlockingConnection) -> None:
    channel = conn.channel()
    exchange = unique("headers")
    channel.exchange_declare(exchange, "headers", auto_delete=True)
    q_all, q_any = unique("h-all"), unique("h-any")
    for queue, arguments in (
        (q_all, {"x-match": "all", "format": "pdf", "type": "report"}),
        (q_any, {"x-match": "any", "format": "pdf", "type": "log"}),
    ):
        channel.queue_declare(queue, auto_delete=True)
        channel.queue_bind(queue, exchange, arguments=arguments)
    messages: dict[bytes, dict[str, Any] | None] = {
        b"pdf-report": {"format": "pdf", "type": "report"},
        b"pdf": {"format": "pdf"},
        b"log": {"type": "log", "extra": 1},
        b"zip-report": {"format": "zip", "type": "report"},
        b"no-headers": None,
    }
    for body, headers in messages.items():
        channel.basic_publish(exchange, "ignored", body, BasicProperties(headers=headers))
    assert drain(channel, q_all) == [b"pdf-report"]
    assert drain(channel, q_any) == [b"pdf-report", b"pdf", b"log"]

    # The built-in amq.match exchange routes the same way.
    channel.queue_bind(q_all, "amq.match", arguments={"x-match": "any", "n": 7})
    channel.basic_publish("amq.match", "", b"seven", BasicProperties(headers={"n": 7}))
    channel.basic_publish("amq.match", "", b"eight", BasicProperties(headers={"n": 8}))
    assert drain(channel, q_all) == [b"seven"]
    channel.queue_unbind(q_all, "amq.match", arguments={"x-match": "any", "n": 7})


def test_alternate_exchange(conn: pika.BlockingConnection) -> None:
    channel = conn.channel()
    channel.confirm_delivery()
    alternate, main = unique("ae"), unique("main")
    q_main, q_alt = unique("ae-main"), unique("ae-alt")
    channel.exchange_declare(alternate, "fanout", auto_delete=True)
    channel.exchange_declare(
        main, "direct", auto_delete=True, arguments={"alternate-exchange": alternate}
    )
    for queue, exchange, key in ((q_main, main, "known"), (q_alt, alternate, "")):
        channel.queue_declare(queue, auto_delete=True)
        channel.queue_bind(queue, exchange, routing_key=key)

    channel.basic_publish(main, "known", b"direct")
    channel.basic_publish(main, "unknown", b"diverted", mandatory=True)  # routed: no return
    assert drain(channel, q_main) == [b"direct"]
    assert drain(channel, q_alt) == [b"diverted"]

    dangling = unique("dangling")
    channel.exchange_declare(
        dangling, "direct", auto_delete=True, arguments={"alternate-exchange": unique("none")}
    )
    with pytest.raises(UnroutableError):
        channel.basic_publish(dangling, "unknown", b"lost", mandatory=True)
    channel.exchange_delete(dangling)


# -- connection-level --------------------------------------------------------------------------
def test_wrong_password_is_refused(shared_broker: BrokerProcess) -> None:
    for user, password in (("guest", "n0t-the-Pa55word"), ("nobody", "guest")):
        params = pika_params(shared_broker, credentials=pika.PlainCredentials(user, password))
        with pytest.raises(ProbableAuthenticationError) as info:
            pika.BlockingConnection(params)
        assert "403" in str(info.value) and "ACCESS_REFUSED" in str(info.value)
    # A mechanism the broker does not offer fails in the client before any credentials.
    params = pika_params(shared_broker, credentials=pika.credentials.ExternalCredentials())
    with pytest.raises(AuthenticationError):
        pika.BlockingConnection(params)
    failures = [e for e in events(shared_broker) if e["event"] == "authentication_failed"]
    assert len(failures) >= 2
    assert all("n0t-the-Pa55word" not in str(e) for e in failures)  # no password logged


def test_max_connections_is_enforced(start_broker: StartBroker) -> None:
    broker = start_broker("--max-connections=2")
    first, second = connect(broker), connect(broker)
    try:
        with pytest.raises(ProbableAccessDeniedError) as info:
            connect(broker)
        assert "530" in str(info.value)
        assert "NOT_ALLOWED - connection limit (2) reached" in str(info.value)
        first.close()
        third = connect(broker)  # a slot is free again
        third.channel().queue_declare("", exclusive=True)
        third.close()
    finally:
        for connection in (first, second):
            if connection.is_open:
                connection.close()
    refusals = [e for e in events(broker) if e.get("reply_code") == 530]
    assert [e["event"] for e in refusals] == ["protocol_error"]


def test_heartbeats_keep_a_live_client_and_drop_a_silent_one(start_broker: StartBroker) -> None:
    broker = start_broker()
    live = connect(broker, heartbeat=1)
    with RawClient(broker) as silent:
        silent.handshake(heartbeat=1)
        # The pika client sends heartbeats from process_data_events; the raw client only
        # reads. After 2 heartbeat intervals of silence the broker drops the raw client.
        received = []

        def pump(_left: float) -> None:
            live.process_data_events(time_limit=0.1)
            try:
                got = silent.read_frame(timeout=0.1)
            except TimeoutError:
                return
            if got is not None:
                received.append(got[1])

        poll_until(lambda: silent.eof, 6, "the broker to drop the silent client", between=pump)
        assert received, "the broker sent no heartbeat to the silent client"
        event = silent.wait_for_event("heartbeat_timeout")
        assert event["heartbeat"] == 1
        closed = silent.wait_for_event("connection_closed")
        assert "missed heartbeats" in closed["reason"]

        # The live client stayed idle (apart from heartbeats) for as long, and more.
        idle_until = time.monotonic() + 1.5
        while time.monotonic() < idle_until:
            live.process_data_events(time_limit=0.25)
    assert live.is_open
    channel = live.channel()
    assert channel.queue_declare("", exclusive=True).method.queue
    live.close()
    assert [e for e in events(broker) if e["event"] == "heartbeat_timeout"] == [event]
    opened = [e for e in events(broker) if e["event"] == "connection_opened"]
    assert sorted(e["heartbeat"] for e in opened) == [1, 1]
