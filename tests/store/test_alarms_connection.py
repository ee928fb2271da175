"""connection.blocked/unblocked on the sans-I/O connection (RabbitMQ's blocking rules)."""

from __future__ import annotations

from pamqp import commands

from broker.amqp import framing
from tests.amqp.helpers import Client, FakeClock, make_context, open_client

BLOCKED = {"connection.blocked": True, "publisher_confirms": True}


def test_a_publishing_connection_is_told_and_no_longer_read() -> None:
    client = open_client(capabilities=BLOCKED)
    client.publish(1, b"before", routing_key="nowhere")
    client.take()
    client.conn.publishers_blocked("low on memory")
    blocked = client.expect(commands.Connection.Blocked)
    assert blocked.reason == "low on memory"
    assert client.conn.reading_paused
    client.conn.publishers_blocked(None)
    client.expect(commands.Connection.Unblocked)
    assert not client.conn.reading_paused


def test_a_connection_that_has_not_published_is_blocked_on_its_first_publish() -> None:
    ctx = make_context()
    client = open_client(ctx, capabilities=BLOCKED)
    client.conn.publishers_blocked("low on disk")
    assert client.methods() == []  # a consumer-only connection goes on being read
    assert not client.conn.reading_paused
    client.publish(1, b"first", routing_key="nowhere")
    blocked = client.expect(commands.Connection.Blocked)
    assert blocked.reason == "low on disk"
    assert client.conn.reading_paused


def test_a_connection_opened_during_an_alarm_is_blocked_when_it_publishes() -> None:
    ctx = make_context()
    ctx.publish_alarm = "low on memory"
    client = open_client(ctx, capabilities=BLOCKED)
    client.publish(1, b"x", routing_key="nowhere")
    assert client.expect(commands.Connection.Blocked).reason == "low on memory"


def test_a_client_without_the_capability_is_paused_without_notice() -> None:
    client = open_client(capabilities={"consumer_cancel_notify": True})
    client.publish(1, b"x", routing_key="nowhere")
    client.take()
    client.conn.publishers_blocked("low on memory")
    assert client.methods() == []
    assert client.conn.reading_paused
    client.conn.publishers_blocked(None)
    assert client.methods() == []
    assert not client.conn.reading_paused


def test_a_blocked_connection_is_not_timed_out_for_silent_heartbeats() -> None:
    clock = FakeClock()
    client = open_client(make_context(clock), capabilities=BLOCKED, heartbeat=10)
    client.publish(1, b"x", routing_key="nowhere")
    client.conn.publishers_blocked("low on memory")
    clock.now += 60  # the socket is not read, so the client's heartbeats are not seen
    client.conn.tick()
    assert not client.conn.should_close
    client.conn.publishers_blocked(None)
    client.conn.tick()
    assert not client.conn.should_close
    clock.now += 25
    client.conn.tick()  # found silent: what waited in the socket is read first
    clock.now += 0.25  # the next tick, still nothing read: silent
    client.conn.tick()
    assert client.conn.should_close


def test_the_broker_advertises_the_capability() -> None:
    client = Client(make_context())
    client.send_bytes(framing.PROTOCOL_HEADER)
    start = client.expect(commands.Connection.Start)
    assert start.server_properties["capabilities"]["connection.blocked"] is True
