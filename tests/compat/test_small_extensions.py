"""RabbitMQ's behaviour that clients' suites rely on (issue 14, the small ones), with pika and
aio-pika against a real qpidd: unbind from what is gone, the default exchange protected,
``x-death``'s ``original-expiration``, connection.update-secret, channel 65535 and ``user_id``
checked against the login."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import aio_pika
import pika
import pika.exceptions
import pytest

from tests.broker_process import BrokerProcess
from tests.e2e.support import unique

TIMEOUT = 15.0


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(TIMEOUT):
            await scenario()

    asyncio.run(bounded())


def closed_with(conn: pika.BlockingConnection, code: int, call: Callable[[], object]) -> str:
    """Run ``call`` on a channel of ``conn``; it must close the channel with ``code``."""
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        call()
    assert info.value.reply_code == code, info.value
    assert conn.is_open
    return str(info.value.reply_text)


def test_unbind_from_a_deleted_queue_or_exchange_is_done(conn: pika.BlockingConnection) -> None:
    channel = conn.channel()
    exchange, queue = unique("ex"), unique("q")
    channel.exchange_declare(exchange, "direct")
    channel.queue_declare(queue)
    channel.queue_bind(queue, exchange, "k")
    channel.queue_delete(queue)
    channel.queue_unbind(queue, exchange, "k")  # the queue is gone: unbind-ok
    channel.queue_declare(queue)
    channel.queue_bind(queue, exchange, "k")
    channel.exchange_delete(exchange)
    channel.queue_unbind(queue, exchange, "k")  # the exchange is gone: unbind-ok
    channel.queue_delete(queue)
    channel.queue_delete(queue)  # deleting what is gone: delete-ok, 0 messages
    channel.exchange_delete(exchange)
    assert channel.is_open


def test_aio_pika_rpc_cleanup_after_its_exclusive_queue_went(shared_broker: BrokerProcess) -> None:
    """aio-pika's RPC pattern: an exclusive reply queue bound to an exchange, unbound at the
    end, after the broker may already have deleted it."""

    async def scenario() -> None:
        connection = await aio_pika.connect(shared_broker.url)
        async with connection:
            channel = await connection.channel()
            exchange = await channel.declare_exchange(unique("rpc"), auto_delete=True)
            queue = await channel.declare_queue(exclusive=True, auto_delete=True)
            await queue.bind(exchange, "reply")
            await queue.delete()
            await queue.unbind(exchange, "reply")
            await exchange.delete()
            await queue.unbind(exchange, "reply")
            assert not channel.is_closed

    run(scenario)


def test_default_exchange_and_amq_names_are_protected(conn: pika.BlockingConnection) -> None:
    text = closed_with(conn, 403, lambda: conn.channel().exchange_declare("", "direct"))
    assert "default exchange" in text
    closed_with(conn, 403, lambda: conn.channel().exchange_declare("", passive=True))
    closed_with(conn, 403, lambda: conn.channel().exchange_declare("amq.mine", "direct"))
    closed_with(conn, 403, lambda: conn.channel().exchange_delete("amq.direct"))
    closed_with(conn, 403, lambda: conn.channel().exchange_delete(""))
    channel = conn.channel()
    channel.exchange_declare("amq.topic", "topic", durable=True)  # equivalent: declare-ok
    channel.exchange_declare("amq.fanout", passive=True)


def test_x_death_keeps_the_original_expiration(conn: pika.BlockingConnection) -> None:
    channel = conn.channel()
    dlx, dead, work = unique("dlx"), unique("dead"), unique("work")
    channel.exchange_declare(dlx, "fanout")
    channel.queue_declare(dead)
    channel.queue_bind(dead, dlx)
    channel.queue_declare(work, arguments={"x-dead-letter-exchange": dlx})
    channel.basic_publish(
        "", work, b"short-lived", pika.BasicProperties(expiration="50", headers={"app": 1})
    )
    got = None
    for _ in range(200):
        got = channel.basic_get(dead, auto_ack=True)
        if got[0] is not None:
            break
        conn.sleep(0.02)
    assert got is not None and got[0] is not None, "not dead-lettered"
    _method, props, body = got
    assert body == b"short-lived" and props.expiration is None
    (death,) = props.headers["x-death"]
    assert death["reason"] == "expired" and death["queue"] == work
    assert death["original-expiration"] == "50"
    assert death["count"] == 1 and death["exchange"] == "" and death["routing-keys"] == [work]
    assert props.headers["app"] == 1


def test_update_secret_pika_and_aiormq(
    conn: pika.BlockingConnection, shared_broker: BrokerProcess
) -> None:
    conn.update_secret("guest", "token refresh")
    channel = conn.channel()
    assert channel.queue_declare("", exclusive=True).method.queue

    async def scenario() -> None:
        connection = await aio_pika.connect(shared_broker.url)
        async with connection:
            await connection.update_secret("guest", reason="token refresh")
            channel = await connection.channel()
            queue = await channel.declare_queue(exclusive=True)
            assert queue.name

    run(scenario)


def test_channel_65535(shared_broker: BrokerProcess) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(shared_broker.url))
    try:
        channel = connection.channel(channel_number=65535)
        channel.queue_declare("", exclusive=True)
        assert channel.channel_number == 65535
    finally:
        connection.close()


def test_user_id_must_be_the_login(conn: pika.BlockingConnection) -> None:
    channel = conn.channel()
    queue = channel.queue_declare("", exclusive=True).method.queue
    channel.basic_publish("", queue, b"mine", pika.BasicProperties(user_id="guest"))
    method, props, _ = channel.basic_get(queue, auto_ack=True)
    assert method is not None and props.user_id == "guest"

    def impersonate() -> None:
        other = conn.channel()
        other.confirm_delivery()
        other.basic_publish("", queue, b"theirs", pika.BasicProperties(user_id="someone-else"))

    text = closed_with(conn, 406, impersonate)
    assert text == (
        "PRECONDITION_FAILED - user_id property set to 'someone-else' but authenticated user"
        " was 'guest'"
    )
    assert channel.queue_declare(queue, passive=True).method.message_count == 0
