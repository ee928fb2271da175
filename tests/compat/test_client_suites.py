"""Gaps the client libraries' own test suites found against qpidd where RabbitMQ 3.10.8
passes (issue 14; the runs are in docs/rabbitmq-compat.md), each with aiormq or pika over a
real socket to a real qpidd with default options, and what RabbitMQ 3.10.8 does where a
suite expects a newer RabbitMQ."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import aiormq
import aiormq.exceptions
import pika
import pika.exceptions
import pytest
from pamqp import commands, frame

from broker.ha.names import BACKUP_PROPERTY
from tests.broker_process import BrokerProcess
from tests.e2e.support import RawClient, unique

TIMEOUT = 60.0


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(TIMEOUT):
            await scenario()

    asyncio.run(bounded())


def test_channel_max_counts_open_channels(shared_broker: BrokerProcess) -> None:
    """aiormq's test_no_free_channels and test_bad_channel: channel-max is 2047 as RabbitMQ's
    and counts the channels open at once; the one past it closes the connection 530; a
    channel number is anything in 1..65535."""

    async def scenario() -> None:
        connection = await aiormq.connect(shared_broker.url)
        try:
            assert connection.connection_tune.channel_max == 2047
            high = await connection.channel(65535)
            await high.queue_declare(exclusive=True)
            await asyncio.gather(*(connection.channel(n) for n in range(1, 2047)))
            with pytest.raises(aiormq.exceptions.ConnectionNotAllowed) as info:
                await connection.channel()
            assert "channel_max (2047)" in str(info.value)
        finally:
            await connection.close()

    run(scenario)


def test_unknown_exchange_type_closes_the_connection_503(shared_broker: BrokerProcess) -> None:
    """pika's TestInvalidExchangeTypeRaisesConnectionClosed: RabbitMQ 3.10.8 closes the
    connection with 503 (the suite, written for a newer RabbitMQ, wants a channel close 406
    and fails against both); the same code and text here."""
    connection = pika.BlockingConnection(pika.URLParameters(shared_broker.url))
    try:
        channel = connection.channel()
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
            channel.exchange_declare(unique("ex"), exchange_type="ZZwwInvalid")
        assert info.value.reply_code == 503
        assert info.value.reply_text == "COMMAND_INVALID - unknown exchange type 'ZZwwInvalid'"
    finally:
        if connection.is_open:
            connection.close()


def test_an_ha_backup_link_is_offered_channel_max_65535(shared_broker: BrokerProcess) -> None:
    """A backup holds a channel per replicated queue on its link to the primary, so the
    connections flagged as HA backup links keep the protocol's 65535 (ordinary clients: 2047)."""

    async def scenario() -> None:
        link = await aiormq.connect(shared_broker.url, client_properties={BACKUP_PROPERTY: True})
        try:
            assert link.connection_tune.channel_max == 65535
            await asyncio.gather(*(link.channel(n) for n in range(1, 2100)))
        finally:
            await link.close()

    run(scenario)


def test_the_client_closes_the_socket_after_close_ok(shared_broker: BrokerProcess) -> None:
    """aio-pika's test_create_channels_during_reconnect: RabbitMQ 3.10.8 answers a client's
    connection.close with close-ok and leaves the socket for the client to close (close-ok
    tells its recipient it may close the socket); qpidd hung up at once, an EOF that aiormq
    can read before it has finished its own close. Now the broker waits, and hangs up by
    itself only after its close timeout (2 s), should the client never close."""
    with RawClient(shared_broker) as client:
        client.handshake()
        client.send_method(
            0, commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0)
        )
        client.expect(commands.Connection.CloseOk)
        with pytest.raises(TimeoutError):  # still open: the broker does not hang up first
            client.read_frame(timeout=0.5)
        start = time.monotonic()
        assert client.wait_eof(timeout=10.0) == []  # nothing more, then the broker's EOF
        assert time.monotonic() - start < 5.0
        closed = client.wait_for_event("connection_closed")
        assert closed["reason"] == "client closed: 200 bye"


def test_the_broker_says_it_is_qpidd(shared_broker: BrokerProcess) -> None:
    """amqplib's connect.test.js "serverProperties" asserts product 'RabbitMQ': the one test
    of its suite that passes against RabbitMQ 3.10.8 and not here, by design (listed in
    docs/rabbitmq-compat.md): the broker names itself, so a client or an operator can tell
    which broker it talks to; the capabilities it has are in the capabilities table."""

    async def scenario() -> None:
        connection = await aiormq.connect(shared_broker.url)
        try:
            properties = connection.server_properties
            assert properties["product"] == "qpidd"
            capabilities = properties["capabilities"]
            assert isinstance(capabilities, dict)
            assert capabilities["consumer_cancel_notify"] is True
        finally:
            await connection.close()

    run(scenario)


def test_crossing_channel_closes_wait_for_the_close_ok(shared_broker: BrokerProcess) -> None:
    """Found by the suites against an HA primary: a backup closed a stream's channel as the
    primary closed it (404, its queue deleted); the primary answered the backup's close and
    forgot the channel, so the backup's close-ok (and an ack sent before it) hit an unknown
    channel: 504 on the whole replication link, and the backup pending removal. As RabbitMQ,
    a channel whose close crossed the peer's answers it and waits for the close-ok."""
    with RawClient(shared_broker) as client:
        client.handshake()
        client.open_channel(1)
        missing = commands.Basic.Consume(queue=unique("gone"))
        client.send(frame.marshal(missing, 1) + frame.marshal(_close(), 1))
        assert client.expect(commands.Channel.Close).reply_code == 404
        client.expect(commands.Channel.CloseOk)  # the answer to our close
        client.send_method(1, commands.Basic.Ack(delivery_tag=0, multiple=True))  # ignored
        client.send_method(1, commands.Channel.CloseOk())
        client.open_channel(1)  # the connection is open and channel 1 free again


def _close() -> commands.Channel.Close:
    return commands.Channel.Close(reply_code=200, reply_text="", class_id=0, method_id=0)
