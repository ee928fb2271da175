"""What a restart brings back, end to end (real qpidd processes, pika): durable exchanges,
queues, bindings and persistent messages on durable queues; never transient ones, exclusive
queues or what was deleted, unbound, purged or acked. ``/api/status`` tells how the store
was left: ``empty``, ``clean`` after SIGTERM, ``dirty`` after SIGKILL."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable
from typing import Any

import pika
import pytest

from tests.broker_process import BrokerProcess
from tests.store.store_brokers import (
    PERSISTENT,
    TRANSIENT,
    StoreBrokers,
    connect,
    drain,
    status,
)

RICH = pika.BasicProperties(
    delivery_mode=2,
    content_type="text/plain",
    content_encoding="utf-8",
    headers={"n": 1, "nested": {"list": [1, "two", True]}},
    priority=3,
    correlation_id="c1",
    reply_to="r",
    expiration="600000",
    message_id="m1",
    timestamp=12345,
    type="t",
    user_id="guest",
    app_id="app",
)


def _exists(broker: BrokerProcess, declare: Callable[[Any], Any]) -> bool:
    """Does a passive declare succeed? (a 404 closes the channel: one connection each)"""
    connection = connect(broker)
    try:
        declare(connection.channel())
        return True
    except pika.exceptions.ChannelClosedByBroker as exc:
        assert exc.reply_code == 404
        return False
    finally:
        if connection.is_open:
            connection.close()


def _queue(broker: BrokerProcess, name: str) -> bool:
    return _exists(broker, lambda channel: channel.queue_declare(name, passive=True))


def _exchange(broker: BrokerProcess, name: str) -> bool:
    return _exists(broker, lambda channel: channel.exchange_declare(name, passive=True))


def _routes(channel: Any, exchange: str, key: str) -> bool:
    """Publish a persistent probe with mandatory set; False when it came back unroutable."""
    try:
        channel.basic_publish(exchange, key, b"probe", PERSISTENT, mandatory=True)
        return True
    except pika.exceptions.UnroutableError:
        return False


def _setup(broker: BrokerProcess) -> tuple[pika.BlockingConnection, str]:
    """Declare, bind, publish, delete, purge and ack; returns the connection that holds the
    exclusive queue (the caller stops the broker with it open) and a server-named durable
    queue's name."""
    connection = connect(broker)
    channel = connection.channel()
    channel.confirm_delivery()
    channel.exchange_declare("dx", "topic", durable=True)
    channel.exchange_declare("tx", "fanout", durable=False)
    channel.exchange_declare("gone_x", "direct", durable=True)
    channel.exchange_declare("gone_x", "direct", durable=True)  # redeclare: still one
    channel.exchange_delete("gone_x")
    channel.queue_declare("dq", durable=True)
    channel.queue_declare("dq2", durable=True)
    channel.queue_declare("tq", durable=False)
    channel.queue_declare("xq", durable=True, exclusive=True)
    channel.queue_declare("gone_q", durable=True)
    channel.queue_delete("gone_q")
    channel.queue_bind("dq", "dx", "a.#")
    channel.queue_bind("dq", "amq.direct", "k")
    channel.queue_bind("dq", "dx", "unbound.#")
    channel.queue_unbind("dq", "dx", "unbound.#")
    channel.queue_bind("dq2", "tx")  # a durable queue on a transient exchange
    channel.queue_bind("tq", "dx", "a.#")  # a transient queue on a durable exchange
    channel.queue_bind("xq", "dx", "a.#")
    for i in range(6):
        properties = PERSISTENT if i % 2 == 0 else TRANSIENT
        channel.basic_publish("", "dq", b"m%d" % i, properties)  # m0 m2 m4 persistent
    channel.basic_publish("dx", "a.b", b"routed", PERSISTENT)  # to dq, tq and xq
    # Deleting an exchange takes its bindings: not back when one of that name returns.
    channel.exchange_declare("rx", "direct", durable=True)
    channel.queue_bind("dq", "rx", "r")
    channel.exchange_delete("rx")
    channel.exchange_declare("rx", "direct", durable=True)
    # An auto-delete exchange goes with its last binding.
    channel.exchange_declare("ad", "direct", durable=True, auto_delete=True)
    channel.queue_bind("dq", "ad", "x")
    channel.queue_unbind("dq", "ad", "x")
    # Binding arguments are kept (headers exchange).
    channel.exchange_declare("hx", "headers", durable=True)
    channel.queue_bind("dq", "hx", "", arguments={"x-match": "all", "color": "blue"})
    # A message on two durable queues and a transient one, acked on one.
    channel.exchange_declare("fan", "fanout", durable=True)
    for name, durable in (("fa", True), ("fb", True), ("ft", False)):
        channel.queue_declare(name, durable=durable)
        channel.queue_bind(name, "fan")
    channel.basic_publish("fan", "", b"fanned", PERSISTENT)
    method, _properties, _body = channel.basic_get("fa", auto_ack=False)
    channel.basic_ack(method.delivery_tag)
    generated = channel.queue_declare("", durable=True).method.queue  # server-named
    channel.basic_publish("", generated, b"to amq.gen", PERSISTENT)
    # Priority order, every property and a length limit's drops survive as well.
    channel.queue_declare("pq", durable=True, arguments={"x-max-priority": 10})
    for body, priority in ((b"low", 1), (b"high", 9), (b"mid", 5), (b"high2", 9)):
        channel.basic_publish(
            "", "pq", body, pika.BasicProperties(delivery_mode=2, priority=priority)
        )
    channel.queue_declare("rich", durable=True)
    channel.basic_publish("", "rich", b"rich", RICH)
    channel.queue_declare("limited", durable=True, arguments={"x-max-length": 3})
    for i in range(6):
        channel.basic_publish("", "limited", b"%d" % i, PERSISTENT)
    channel.queue_declare("purged", durable=True)
    for i in range(5):
        channel.basic_publish("", "purged", b"old%d" % i, PERSISTENT)
    channel.queue_purge("purged")
    channel.basic_publish("", "purged", b"new", PERSISTENT)
    channel.queue_declare("acked", durable=True)
    for i in range(3):
        channel.basic_publish("", "acked", b"a%d" % i, PERSISTENT)
    method, _properties, _body = channel.basic_get("acked", auto_ack=False)
    channel.basic_ack(method.delivery_tag)
    method, _properties, body = channel.basic_get("acked", auto_ack=False)
    assert body == b"a1"  # delivered, never acked: redelivered after the restart
    return connection, generated


def test_durable_objects_come_back_transient_ones_do_not_and_store_status_tells(
    brokers: StoreBrokers,
) -> None:
    broker = brokers.start()
    assert status(broker)["store_status"] == "empty"
    holder, generated = _setup(broker)
    assert broker.stop() == 0  # SIGTERM: a clean stop, with the exclusive queue's owner on
    with contextlib.suppress(pika.exceptions.AMQPError):
        holder.close()

    broker = brokers.start()
    assert status(broker)["store_status"] == "clean"
    assert _exchange(broker, "dx")
    assert not _exchange(broker, "tx")
    assert not _exchange(broker, "gone_x")
    assert _queue(broker, "dq")
    assert _queue(broker, "dq2")
    assert not _queue(broker, "tq")
    assert not _queue(broker, "xq")
    assert not _queue(broker, "gone_q")
    assert _exchange(broker, "rx")
    assert not _exchange(broker, "ad")
    assert not _queue(broker, "ft")
    connection = connect(broker)
    channel = connection.channel()
    counts = {
        name: channel.queue_declare(name, passive=True).method.message_count
        for name in ("dq", "dq2", "purged", "acked", "fa", "fb", generated)
    }
    assert counts == {
        "dq": 4,
        "dq2": 0,
        "purged": 1,
        "acked": 2,
        "fa": 0,
        "fb": 1,
        generated: 1,
    }
    channel.confirm_delivery()
    assert _routes(channel, "dx", "a.c")  # dq's binding is back
    assert _routes(channel, "amq.direct", "k")  # a binding on a built-in exchange too
    assert not _routes(channel, "dx", "unbound.x")  # unbound stays unbound
    assert not _routes(channel, "rx", "r")  # went with the exchange deleted before
    blue = pika.BasicProperties(delivery_mode=2, headers={"color": "blue"})
    channel.basic_publish("hx", "", b"blue", blue, mandatory=True)
    with pytest.raises(pika.exceptions.UnroutableError):
        red = pika.BasicProperties(delivery_mode=2, headers={"color": "red"})
        channel.basic_publish("hx", "", b"red", red, mandatory=True)
    # Changes after a recovery are stored as well.
    channel.queue_unbind("dq", "amq.direct", "k")
    channel.queue_delete("dq2")
    channel.basic_publish("", "purged", b"newer", PERSISTENT)
    channel.queue_purge("purged")  # purge-ok: on disk, the crash comes at once
    channel.basic_publish("", "purged", b"newest", PERSISTENT)
    connection.close()
    assert broker.stop(signal.SIGKILL) == -signal.SIGKILL

    broker = brokers.start()
    assert status(broker)["store_status"] == "dirty"
    assert not _queue(broker, "dq2")
    connection = connect(broker)
    channel = connection.channel()
    channel.confirm_delivery()
    assert not _routes(channel, "amq.direct", "k")
    dq = drain(channel, "dq")
    assert [body for body, _, _ in dq] == [
        b"m0",
        b"m2",
        b"m4",
        b"routed",
        b"probe",
        b"probe",
        b"blue",
    ]
    assert all(redelivered for _, redelivered, _ in dq)  # after a crash: all of them
    assert [properties.delivery_mode for _, _, properties in dq] == [2] * 7
    assert [body for body, _, _ in drain(channel, "purged")] == [b"newest"]
    assert [body for body, _, _ in drain(channel, "pq")] == [b"high", b"high2", b"mid", b"low"]
    assert [body for body, _, _ in drain(channel, "limited")] == [b"3", b"4", b"5"]
    ((_body, _redelivered, properties),) = drain(channel, "rich")
    assert properties == RICH
    acked = [(body, redelivered) for body, redelivered, _ in drain(channel, "acked")]
    assert acked == [(b"a1", True), (b"a2", True)]  # after a crash: all of them
    connection.close()
