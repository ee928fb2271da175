"""kombu on its default py-amqp transport against a real qpidd (PLAIN and AMQPLAIN logins)."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from typing import Any

import amqp  # type: ignore[import-untyped]
import pytest
from kombu.connection import Connection
from kombu.entity import Exchange, Queue
from kombu.messaging import Consumer, Producer

from common.polling import poll_until
from tests.broker_process import BrokerProcess
from tests.e2e.support import events, unique


def kombu_url(broker: BrokerProcess, password: str = "guest") -> str:
    return f"amqp://guest:{password}@127.0.0.1:{broker.port}//"


@pytest.fixture
def connection(shared_broker: BrokerProcess) -> Iterator[Connection]:
    with Connection(kombu_url(shared_broker), connect_timeout=5) as conn:
        conn.connect()
        yield conn


def drain_until(connection: Connection, predicate: Any, timeout: float = 5.0) -> None:
    """Process kombu's I/O until ``predicate()`` holds, failing after ``timeout``."""

    def drain(left: float) -> None:
        with contextlib.suppress(TimeoutError):
            connection.drain_events(timeout=min(left, 0.5))

    poll_until(predicate, timeout, between=drain)


def test_producer_and_consumer_with_exchange_and_queue(connection: Connection) -> None:
    exchange = Exchange(unique("kombu-ex"), type="direct", durable=False, auto_delete=True)
    queue = Queue(unique("kombu-q"), exchange, routing_key="task", durable=False)
    channel = connection.channel()
    producer = Producer(channel, exchange=exchange, serializer="json")
    for i in range(5):
        producer.publish(
            {"n": i},
            routing_key="task",
            declare=[queue],
            headers={"attempt": i},
            correlation_id=f"c{i}",
        )

    received: list[tuple[Any, dict[str, Any]]] = []

    def on_message(body: Any, message: Any) -> None:
        received.append((body, dict(message.headers)))
        assert message.properties["correlation_id"] == f"c{body['n']}"
        assert message.delivery_info["routing_key"] == "task"
        message.ack()

    with Consumer(channel, queues=[queue], callbacks=[on_message], accept=["json"]):
        drain_until(connection, lambda: len(received) == 5)
        # Nothing more to come: drain_events times out.
        with pytest.raises(socket.timeout):
            connection.drain_events(timeout=0.2)
    assert received == [({"n": i}, {"attempt": i}) for i in range(5)]
    assert queue(channel).queue_declare(passive=True).message_count == 0
    queue(channel).delete()
    channel.close()


def test_simple_queue_put_and_get(connection: Connection) -> None:
    name = unique("simple")
    simple = connection.SimpleQueue(name)
    try:
        simple.put({"hello": "world"})
        simple.put("second", headers={"h": 1})
        first = simple.get(block=True, timeout=5)
        assert first.payload == {"hello": "world"}
        first.ack()
        second = simple.get(block=True, timeout=5)
        assert second.payload == "second" and second.headers == {"h": 1}
        second.ack()
        with pytest.raises(simple.Empty):
            simple.get(block=True, timeout=0.2)
        assert simple.qsize() == 0
    finally:
        simple.close()  # cancels its consumer first: deleting under it would cancel it
        channel = connection.channel()
        simple.queue(channel).delete()
        channel.close()


def test_simple_queue_get_nowait(connection: Connection) -> None:
    name = unique("simple-nowait")
    simple = connection.SimpleQueue(name, no_ack=True)
    try:
        with pytest.raises(simple.Empty):
            simple.get_nowait()
        simple.put({"n": 1})
        assert simple.get_nowait().payload == {"n": 1}
    finally:
        simple.close()
        channel = connection.channel()
        simple.queue(channel).delete()
        channel.close()


def test_rejected_message_is_redelivered(connection: Connection) -> None:
    queue = Queue(unique("kombu-requeue"), durable=False)
    channel = connection.channel()
    Producer(channel, serializer="json").publish("again", routing_key=queue.name, declare=[queue])
    seen: list[bool] = []

    def on_message(body: Any, message: Any) -> None:
        seen.append(bool(message.delivery_info["redelivered"]))
        if len(seen) == 1:
            message.requeue()
        else:
            message.ack()

    with Consumer(channel, queues=[queue], callbacks=[on_message], accept=["json"]):
        drain_until(connection, lambda: len(seen) == 2)
    assert seen == [False, True]
    queue(channel).delete()
    channel.close()


def test_confirm_publish_and_nack(shared_broker: BrokerProcess) -> None:
    url = kombu_url(shared_broker)
    with Connection(url, transport_options={"confirm_publish": True}) as conn:
        channel = conn.channel()
        queue = Queue(
            unique("kombu-full"),
            durable=False,
            queue_arguments={"x-max-length": 1, "x-overflow": "reject-publish"},
        )
        producer = Producer(channel)
        producer.publish("fits", routing_key=queue.name, declare=[queue])
        with pytest.raises(amqp.exceptions.MessageNacked):
            producer.publish("refused", routing_key=queue.name)
        assert queue(channel).queue_declare(passive=True).message_count == 1
        queue(channel).delete()


def test_amqplain_login(shared_broker: BrokerProcess) -> None:
    url = kombu_url(shared_broker)
    with Connection(url, login_method="AMQPLAIN", connect_timeout=5) as conn:
        simple = conn.SimpleQueue(unique("amqplain"), no_ack=True)
        try:
            simple.put("via AMQPLAIN")
            assert simple.get(timeout=5).payload == "via AMQPLAIN"
        finally:
            simple.close()
            channel = conn.channel()
            simple.queue(channel).delete()
            channel.close()


def test_wrong_password_is_access_refused(shared_broker: BrokerProcess) -> None:
    for method in ("PLAIN", "AMQPLAIN"):
        url = kombu_url(shared_broker, password="bad")
        with Connection(url, login_method=method, connect_timeout=5) as conn:
            with pytest.raises(amqp.exceptions.AccessRefused) as info:
                conn.connect()
            assert info.value.reply_code == 403
    failures = [e for e in events(shared_broker) if e["event"] == "authentication_failed"]
    assert [e["mechanism"] for e in failures] == ["PLAIN", "AMQPLAIN"]
