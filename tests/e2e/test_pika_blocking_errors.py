"""pika BlockingConnection: exclusive queues, missing queues/exchanges, inequivalent redeclares."""

from __future__ import annotations

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker

from tests.broker_process import BrokerProcess
from tests.e2e.support import connect, unique


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
