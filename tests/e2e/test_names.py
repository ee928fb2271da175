"""Queue and exchange names as RabbitMQ takes them (issue 24, item 3), with pika.

Any UTF-8 of 1-255 bytes is a name; ``amq.*`` is refused with 403 where RabbitMQ refuses it;
a passive declare of a missing name is 404 whatever its characters (the existence check
comes first). Each name goes through declare, bind, publish, basic.get (whose get-ok names
the exchange), a mandatory publish's basic.return and delete.
"""

from __future__ import annotations

import pika
import pytest

from tests.broker_process import BrokerProcess
from tests.e2e.support import connect

#: Names RabbitMQ accepts that pamqp's own pattern (and our old check) refused.
NAMES = [
    "t.a=b",
    "t.é",
    "t.a*b",
    "/",
    "%",
    "<img src=x onerror=alert(1)>",
    "t.\u2603 snow",
    "é" * 127,  # 254 bytes
    "x" * 255,
]


@pytest.mark.parametrize("name", NAMES, ids=range(len(NAMES)))
def test_any_utf8_name_up_to_255_bytes_is_a_queue_and_an_exchange(
    shared_broker: BrokerProcess, name: str
) -> None:
    connection = connect(shared_broker)
    try:
        channel = connection.channel()
        ok = channel.queue_declare(name)
        assert ok.method.queue == name
        channel.exchange_declare(name, "topic")
        channel.queue_bind(name, name, "k.#")
        channel.confirm_delivery()
        channel.basic_publish(name, "k.1", b"one")
        method, _props, body = channel.basic_get(name, auto_ack=True)
        assert method is not None and body == b"one"
        assert method.exchange == name and method.routing_key == "k.1"
        with pytest.raises(pika.exceptions.UnroutableError) as unroutable:
            channel.basic_publish(name, "nowhere", b"two", mandatory=True)
        assert [m.method.exchange for m in unroutable.value.messages] == [name]
        channel.queue_declare(name, passive=True)
        channel.queue_delete(name)
        channel.exchange_delete(name)
    finally:
        connection.close()


@pytest.mark.parametrize("name", ["t.a=b", "t.é", "t.a*b", "amq.nothing", "x" * 255])
def test_a_passive_declare_of_a_missing_name_is_not_found(
    shared_broker: BrokerProcess, name: str
) -> None:
    connection = connect(shared_broker)
    try:
        for passive in (
            lambda ch: ch.queue_declare(name, passive=True),
            lambda ch: ch.exchange_declare(name, passive=True),
        ):
            channel = connection.channel()
            with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
                passive(channel)
            assert closed.value.reply_code == 404, closed.value
    finally:
        connection.close()


def test_amq_names_are_refused_as_rabbitmq_refuses_them(shared_broker: BrokerProcess) -> None:
    connection = connect(shared_broker)
    try:
        for declare in (
            lambda ch: ch.queue_declare("amq.mine"),
            lambda ch: ch.exchange_declare("amq.mine", "direct"),
        ):
            channel = connection.channel()
            with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
                declare(channel)
            assert closed.value.reply_code == 403, closed.value
            assert "amq." in closed.value.reply_text
        # the built-in ones exist: a passive declare finds them
        connection.channel().exchange_declare("amq.topic", passive=True)
    finally:
        connection.close()
