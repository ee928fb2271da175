"""The sans-I/O connection driven frame by frame: handshake, framing errors, channels."""

from __future__ import annotations

import struct

import pytest
from pamqp import commands, frame

from broker.amqp import framing
from broker.amqp.context import HA_BACKUP_PROPERTY
from broker.amqp.state import ConnectionState
from broker.core.errors import ReplyCode
from broker.ha.names import BACKUP_PROPERTY
from tests.amqp.helpers import Client, FakeClock, make_context, open_client


def close_code(client: Client) -> int:
    close = client.expect(commands.Connection.Close)
    return int(close.reply_code)


def test_handshake_opens_and_offers_mechanisms() -> None:
    ctx = make_context()
    client = Client(ctx)
    client.send_bytes(framing.PROTOCOL_HEADER)
    start = client.expect(commands.Connection.Start)
    assert "PLAIN" in start.mechanisms and "AMQPLAIN" in start.mechanisms
    assert "ANONYMOUS" not in start.mechanisms
    assert start.server_properties["capabilities"]["publisher_confirms"] is True
    client.send(
        0,
        commands.Connection.StartOk(
            client_properties={"product": "x", "capabilities": {"a": True}},
            mechanism="PLAIN",
            response="\0guest\0guest",
        ),
    )
    tune = client.expect(commands.Connection.Tune)
    assert tune.frame_max == 131072 and tune.channel_max == 2047
    client.send(0, commands.Connection.TuneOk(channel_max=10, frame_max=8192, heartbeat=5))
    client.send(0, commands.Connection.Open(virtual_host="/"))
    client.expect(commands.Connection.OpenOk)
    assert client.conn.is_open
    assert client.conn.client_properties["product"] == "x"
    assert client.conn.capability("a")
    assert (client.conn.frame_max, client.conn.channel_max, client.conn.heartbeat) == (
        8192,
        10,
        5,
    )


def test_wrong_password_is_access_refused() -> None:
    client = Client(make_context())
    client.send_bytes(framing.PROTOCOL_HEADER)
    client.take()
    client.send(
        0,
        commands.Connection.StartOk(
            client_properties={}, mechanism="PLAIN", response="\0guest\0wrong"
        ),
    )
    assert close_code(client) == ReplyCode.ACCESS_REFUSED


def test_bad_protocol_header_gets_ours_and_close() -> None:
    client = Client(make_context())
    client.conn.receive_data(b"GET / HTTP/1.1\r\n")
    assert client.conn.data_to_send() == framing.PROTOCOL_HEADER
    assert client.conn.should_close


def test_unknown_vhost_not_allowed() -> None:
    client = Client(make_context())
    client.send_bytes(framing.PROTOCOL_HEADER)
    client.send(
        0,
        commands.Connection.StartOk(
            client_properties={}, mechanism="PLAIN", response="\0guest\0guest"
        ),
    )
    client.send(0, commands.Connection.TuneOk(channel_max=0, frame_max=0, heartbeat=0))
    client.send(0, commands.Connection.Open(virtual_host="/other"))
    assert close_code(client) == ReplyCode.NOT_ALLOWED


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        (struct.pack(">BHI", 1, 0, 200_000) + b"x", ReplyCode.FRAME_ERROR),  # oversized
        (struct.pack(">BHI", 1, 1, 4) + b"\x00\x14\x00\x0a" + b"\x00", ReplyCode.FRAME_ERROR),
        (struct.pack(">BHI", 9, 0, 0) + b"\xce", ReplyCode.FRAME_ERROR),  # unknown type
        (struct.pack(">BHI", 8, 3, 0) + b"\xce", ReplyCode.FRAME_ERROR),  # heartbeat on ch 3
        (struct.pack(">BHI", 1, 0, 4) + b"\x00\x63\x00\x01\xce", ReplyCode.COMMAND_INVALID),
        (struct.pack(">BHI", 1, 1, 5) + b"\x00\x32\x00\x0a\x00\xce", ReplyCode.SYNTAX_ERROR),
    ],
)
def test_malformed_frames_close_the_connection(payload: bytes, code: int) -> None:
    client = open_client()
    client.send_bytes(payload)
    assert close_code(client) == code
    assert client.conn.state is ConnectionState.CLOSING
    # the close handshake completes
    client.send(0, commands.Connection.CloseOk())
    assert client.conn.should_close


def test_partial_frames_wait_for_more_bytes() -> None:
    client = open_client()
    data = frame.marshal(commands.Queue.Declare(queue="q1"), 1)
    for i in range(len(data)):
        client.send_bytes(data[i : i + 1])
    assert client.expect(commands.Queue.DeclareOk).queue == "q1"


def test_channel_method_before_open_is_unexpected() -> None:
    client = Client(make_context())
    client.send_bytes(framing.PROTOCOL_HEADER)
    client.take()
    client.send(
        0,
        commands.Connection.StartOk(
            client_properties={}, mechanism="PLAIN", response="\0guest\0guest"
        ),
    )
    client.take()
    client.send(1, commands.Channel.Open())
    assert close_code(client) == ReplyCode.UNEXPECTED_FRAME


def test_method_on_unopened_channel_is_channel_error() -> None:
    client = open_client()
    client.send(5, commands.Queue.Declare(queue="q"))
    assert close_code(client) == ReplyCode.CHANNEL_ERROR


def test_channel_max_limits_open_channels_not_their_numbers() -> None:
    """As RabbitMQ: channel-max counts the open channels; a number is any of 1..65535."""
    client = open_client(make_context(channel_max=4))  # open_client opened channel 1
    for number in (65535, 7, 5):
        client.open_channel(number)
    client.send(2, commands.Channel.Open())  # a fifth
    assert close_code(client) == ReplyCode.NOT_ALLOWED


def test_an_ha_backup_link_gets_channel_max_65535() -> None:
    """A backup holds a channel per replicated queue on its link: 65535 is offered to it."""
    assert HA_BACKUP_PROPERTY == BACKUP_PROPERTY  # the name the backups send
    client = open_client(client_properties={BACKUP_PROPERTY: True})
    assert client.conn.channel_max == 65535
    client.open_channel(2048)
    client.open_channel(4000)


def test_reopening_an_open_channel_is_channel_error() -> None:
    client = open_client()
    client.send(1, commands.Channel.Open())
    assert close_code(client) == ReplyCode.CHANNEL_ERROR


def test_soft_error_closes_only_the_channel() -> None:
    client = open_client()
    client.send(1, commands.Queue.Declare(queue="missing", passive=True))
    close = client.expect(commands.Channel.Close, 1)
    assert close.reply_code == ReplyCode.NOT_FOUND
    assert "missing" in close.reply_text
    assert (close.class_id, close.method_id) == (50, 10)
    client.send(1, commands.Channel.CloseOk())
    assert client.conn.is_open
    client.open_channel(1)  # the number is free again
    client.send(1, commands.Queue.Declare(queue="q"))
    client.expect(commands.Queue.DeclareOk)


def test_both_sides_closing_a_channel_at_once_keep_the_connection() -> None:
    """The broker closes a channel (404) while the client closes it too (an HA backup
    stopping a queue stream as its queue is deleted): each answers the other's close, and
    the broker's channel ends at the client's close-ok of the broker's close. Before, the
    broker freed the channel at the client's close and took that close-ok for a method on
    a closed channel: 504, and the backup's whole link went down."""
    client = open_client()
    client.send(1, commands.Queue.Declare(queue="missing", passive=True))
    assert client.expect(commands.Channel.Close, 1).reply_code == ReplyCode.NOT_FOUND
    client.send(1, commands.Channel.Close(reply_code=200, reply_text="", class_id=0, method_id=0))
    client.expect(commands.Channel.CloseOk, 1)
    client.send(1, commands.Channel.CloseOk())  # the answer to the broker's close
    assert client.conn.is_open
    assert not [f for _, f in client.take() if isinstance(f, commands.Connection.Close)]
    client.open_channel(1)  # the number is free again
    client.send(1, commands.Queue.Declare(queue="q"))
    client.expect(commands.Queue.DeclareOk)


def test_content_header_without_publish_is_unexpected() -> None:
    client = open_client()
    from pamqp import header

    client.send(1, header.ContentHeader(0, 3, commands.Basic.Properties()))
    assert close_code(client) == ReplyCode.UNEXPECTED_FRAME


def test_method_between_publish_and_content_is_unexpected() -> None:
    client = open_client()
    client.send(1, commands.Basic.Publish(exchange="", routing_key="q"))
    client.send(1, commands.Queue.Declare(queue="q"))
    assert close_code(client) == ReplyCode.UNEXPECTED_FRAME


def test_publish_consume_ack_roundtrip() -> None:
    client = open_client()
    client.send(1, commands.Queue.Declare(queue="q"))
    client.take()
    client.publish(1, b"hello", routing_key="q")
    client.send(1, commands.Basic.Consume(queue="q", consumer_tag="c1"))
    frames = client.take()
    kinds = [type(f).__name__ for _, f in frames]
    assert kinds == ["ConsumeOk", "Deliver", "ContentHeader", "ContentBody"]
    deliver = frames[1][1]
    assert (deliver.consumer_tag, deliver.delivery_tag, deliver.redelivered) == ("c1", 1, False)
    assert frames[3][1].value == b"hello"
    queue = client.ctx.vhost.queues["q"]
    assert queue.unacked == 1
    client.send(1, commands.Basic.Ack(delivery_tag=1))
    assert queue.unacked == 0 and queue.acked_total == 1


def test_large_body_split_into_frame_max_pieces() -> None:
    client = open_client(frame_max=4096)
    client.send(1, commands.Queue.Declare(queue="q"))
    client.take()
    big = bytes(range(256)) * 40  # 10240 bytes
    data = frame.marshal(commands.Basic.Publish(exchange="", routing_key="q"), 1)
    from pamqp import body, header

    data += frame.marshal(header.ContentHeader(0, len(big), commands.Basic.Properties()), 1)
    for i in range(0, len(big), 4000):
        data += frame.marshal(body.ContentBody(big[i : i + 4000]), 1)
    client.send_bytes(data)
    client.send(1, commands.Basic.Get(queue="q", no_ack=True))
    frames = client.take()
    bodies = [f.value for _, f in frames if hasattr(f, "value") and isinstance(f.value, bytes)]
    assert b"".join(bodies) == big
    assert all(len(b) <= 4096 - 8 for b in bodies)


def test_body_larger_than_declared_is_frame_error() -> None:
    client = open_client()
    from pamqp import body, header

    data = frame.marshal(commands.Basic.Publish(exchange="", routing_key="q"), 1)
    data += frame.marshal(header.ContentHeader(0, 2, commands.Basic.Properties()), 1)
    data += frame.marshal(body.ContentBody(b"abc"), 1)
    client.send_bytes(data)
    assert close_code(client) == ReplyCode.FRAME_ERROR


def test_publish_to_missing_exchange_closes_channel_and_discards_content() -> None:
    client = open_client()
    client.publish(1, b"x", exchange="nope", routing_key="q")
    close = client.expect(commands.Channel.Close, 1)
    assert close.reply_code == ReplyCode.NOT_FOUND
    assert (close.class_id, close.method_id) == (60, 40)
    assert client.conn.is_open


def test_confirms_ack_and_mandatory_return() -> None:
    client = open_client()
    client.send(1, commands.Confirm.Select())
    client.expect(commands.Confirm.SelectOk)
    client.send(1, commands.Queue.Declare(queue="q"))
    client.take()
    client.publish(1, b"a", routing_key="q")
    client.publish(1, b"b", routing_key="nowhere", mandatory=True)
    frames = client.take()
    names = [type(f).__name__ for _, f in frames]
    assert names.index("Return") < max(i for i, n in enumerate(names) if n == "Ack")
    acks = [f for _, f in frames if isinstance(f, commands.Basic.Ack)]
    answered = set()
    for ack in acks:
        answered |= set(range(1, ack.delivery_tag + 1)) if ack.multiple else {ack.delivery_tag}
    assert answered == {1, 2}


def test_confirms_are_coalesced_per_read() -> None:
    client = open_client()
    client.send(1, commands.Confirm.Select())
    client.send(1, commands.Queue.Declare(queue="q"))
    client.take()
    data = b""
    from pamqp import body, header

    for i in range(50):
        data += frame.marshal(commands.Basic.Publish(exchange="", routing_key="q"), 1)
        data += frame.marshal(header.ContentHeader(0, 1, commands.Basic.Properties()), 1)
        data += frame.marshal(body.ContentBody(bytes([i])), 1)
    client.send_bytes(data)
    acks = [f for _, f in client.take() if isinstance(f, commands.Basic.Ack)]
    assert len(acks) == 1 and acks[0].multiple and acks[0].delivery_tag == 50


def test_reject_publish_overflow_nacks() -> None:
    client = open_client()
    client.send(1, commands.Confirm.Select())
    client.send(
        1,
        commands.Queue.Declare(
            queue="q", arguments={"x-max-length": 1, "x-overflow": "reject-publish"}
        ),
    )
    client.take()
    client.publish(1, b"a", routing_key="q")
    client.publish(1, b"b", routing_key="q")
    replies = [
        f for _, f in client.take() if isinstance(f, commands.Basic.Ack | commands.Basic.Nack)
    ]
    assert [(type(r).__name__, r.delivery_tag) for r in replies] == [("Ack", 1), ("Nack", 2)]


def test_prefetch_limits_unacked_deliveries() -> None:
    client = open_client()
    client.send(1, commands.Queue.Declare(queue="q"))
    for i in range(10):
        client.publish(1, bytes([i]), routing_key="q")
    client.send(1, commands.Basic.Qos(prefetch_count=3))
    client.send(1, commands.Basic.Consume(queue="q", consumer_tag="c"))
    delivers = [f for _, f in client.take() if isinstance(f, commands.Basic.Deliver)]
    assert [d.delivery_tag for d in delivers] == [1, 2, 3]
    client.send(1, commands.Basic.Ack(delivery_tag=2, multiple=True))
    delivers = [f for _, f in client.take() if isinstance(f, commands.Basic.Deliver)]
    assert [d.delivery_tag for d in delivers] == [4, 5]


def test_global_prefetch_is_per_channel() -> None:
    client = open_client()
    for q in ("a", "b"):
        client.send(1, commands.Queue.Declare(queue=q))
        for _ in range(5):
            client.publish(1, b"x", routing_key=q)
    client.send(1, commands.Basic.Qos(prefetch_count=4, global_=True))
    client.send(1, commands.Basic.Consume(queue="a", consumer_tag="ca"))
    client.send(1, commands.Basic.Consume(queue="b", consumer_tag="cb"))
    delivers = [f for _, f in client.take() if isinstance(f, commands.Basic.Deliver)]
    assert len(delivers) == 4


def test_unacked_requeued_redelivered_when_channel_closes() -> None:
    ctx = make_context()
    client = open_client(ctx)
    client.send(1, commands.Queue.Declare(queue="q"))
    client.publish(1, b"m1", routing_key="q")
    client.publish(1, b"m2", routing_key="q")
    client.send(1, commands.Basic.Consume(queue="q", consumer_tag="c"))
    client.take()
    client.send(
        1, commands.Channel.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0)
    )
    client.expect(commands.Channel.CloseOk)
    other = open_client(ctx)
    other.send(1, commands.Basic.Get(queue="q"))
    get_ok = other.expect(commands.Basic.GetOk)
    assert get_ok.redelivered is True
    assert get_ok.message_count == 1


def test_connection_lost_requeues_and_deletes_exclusive_queues() -> None:
    ctx = make_context()
    client = open_client(ctx)
    client.send(1, commands.Queue.Declare(queue="shared"))
    client.send(1, commands.Queue.Declare(queue="mine", exclusive=True))
    client.publish(1, b"m", routing_key="shared")
    client.send(1, commands.Basic.Consume(queue="shared"))
    client.take()
    assert ctx.vhost.queues["shared"].unacked == 1
    client.conn.connection_lost()
    assert "mine" not in ctx.vhost.queues
    assert ctx.vhost.queues["shared"].message_count == 1
    assert ctx.vhost.queues["shared"].unacked == 0
    assert client.conn.id not in ctx.connections


def test_exclusive_queue_locked_for_other_connections() -> None:
    ctx = make_context()
    a = open_client(ctx)
    a.send(1, commands.Queue.Declare(queue="x", exclusive=True))
    a.take()
    b = open_client(ctx)
    b.send(1, commands.Basic.Consume(queue="x"))
    assert b.expect(commands.Channel.Close).reply_code == ReplyCode.RESOURCE_LOCKED


def test_unknown_delivery_tag_is_precondition_failed() -> None:
    client = open_client()
    client.send(1, commands.Basic.Ack(delivery_tag=7))
    assert client.expect(commands.Channel.Close).reply_code == ReplyCode.PRECONDITION_FAILED


def test_nack_without_requeue_dead_letters() -> None:
    client = open_client()
    client.send(1, commands.Queue.Declare(queue="dead"))
    client.send(
        1,
        commands.Queue.Declare(
            queue="q",
            arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dead"},
        ),
    )
    client.publish(1, b"m", routing_key="q")
    client.send(1, commands.Basic.Get(queue="q"))
    get_ok = client.expect(commands.Basic.GetOk)
    client.send(1, commands.Basic.Nack(delivery_tag=get_ok.delivery_tag, requeue=False))
    client.send(1, commands.Basic.Get(queue="dead", no_ack=True))
    frames = client.take()
    header_frame = next(f for _, f in frames if type(f).__name__ == "ContentHeader")
    death = header_frame.properties.headers["x-death"][0]
    assert death["reason"] == "rejected" and death["queue"] == "q"


def test_transactions_apply_at_commit() -> None:
    ctx = make_context()
    client = open_client(ctx)
    client.send(1, commands.Queue.Declare(queue="q"))
    client.send(1, commands.Tx.Select())
    client.expect(commands.Tx.SelectOk)
    client.publish(1, b"a", routing_key="q")
    assert ctx.vhost.queues["q"].message_count == 0
    client.send(1, commands.Tx.Rollback())
    client.expect(commands.Tx.RollbackOk)
    client.publish(1, b"b", routing_key="q")
    client.send(1, commands.Tx.Commit())
    client.expect(commands.Tx.CommitOk)
    assert ctx.vhost.queues["q"].message_count == 1
    client.send(1, commands.Basic.Get(queue="q"))
    tag = client.expect(commands.Basic.GetOk).delivery_tag
    client.send(1, commands.Basic.Ack(delivery_tag=tag))
    assert ctx.vhost.queues["q"].unacked == 1  # not yet committed
    client.send(1, commands.Tx.Commit())
    assert ctx.vhost.queues["q"].unacked == 0


def test_confirm_and_tx_are_exclusive() -> None:
    client = open_client()
    client.send(1, commands.Tx.Select())
    client.send(1, commands.Confirm.Select())
    assert client.expect(commands.Channel.Close).reply_code == ReplyCode.PRECONDITION_FAILED


def test_queue_delete_notifies_consumers_that_asked() -> None:
    ctx = make_context()
    client = open_client(ctx)
    client.send(1, commands.Queue.Declare(queue="q"))
    client.send(1, commands.Basic.Consume(queue="q", consumer_tag="c"))
    client.take()
    client.send(1, commands.Queue.Delete(queue="q"))
    cancel = client.expect(commands.Basic.Cancel)
    assert cancel.consumer_tag == "c"


def test_heartbeat_sent_and_silent_peer_dropped() -> None:
    clock = FakeClock()
    ctx = make_context(clock)
    client = open_client(ctx, heartbeat=2)
    client.take()
    clock.now += 1.5
    client.conn.tick()
    assert client.conn.data_to_send() == framing.HEARTBEAT_FRAME
    clock.now += 3.0  # 4.5 s without anything from the client: more than 2 x 2 s
    client.conn.tick()
    assert not client.conn.should_close  # found silent: what waited is read first
    clock.now += 0.25  # the next tick, still nothing read
    client.conn.tick()
    assert client.conn.should_close


def test_handshake_timeout_drops_idle_socket() -> None:
    clock = FakeClock()
    ctx = make_context(clock)
    client = Client(ctx)
    client.send_bytes(b"AMQ")
    clock.now += 11
    client.conn.tick()
    assert client.conn.should_close


def test_max_connections_enforced() -> None:
    ctx = make_context(max_connections=1)
    open_client(ctx)
    client = Client(ctx)
    with pytest.raises(AssertionError):
        client.handshake()
    assert ctx.connections_refused_total == 1


def test_topic_and_headers_exchanges_route() -> None:
    client = open_client()
    client.send(1, commands.Queue.Declare(queue="t"))
    client.send(1, commands.Queue.Declare(queue="h"))
    client.send(1, commands.Queue.Bind(queue="t", exchange="amq.topic", routing_key="a.*.c"))
    client.send(
        1,
        commands.Queue.Bind(
            queue="h", exchange="amq.match", arguments={"x-match": "any", "k": "v"}
        ),
    )
    client.publish(1, b"1", exchange="amq.topic", routing_key="a.b.c")
    client.publish(
        1,
        b"2",
        exchange="amq.match",
        properties=commands.Basic.Properties(headers={"k": "v"}),
    )
    vhost = client.ctx.vhost
    assert vhost.queues["t"].message_count == 1
    assert vhost.queues["h"].message_count == 1


def test_recover_requeues_and_refuses_requeue_false() -> None:
    client = open_client()
    client.send(1, commands.Queue.Declare(queue="q"))
    client.publish(1, b"m", routing_key="q")
    client.send(1, commands.Basic.Consume(queue="q", consumer_tag="c"))
    client.take()
    client.send(1, commands.Basic.Recover(requeue=True))
    frames = client.take()
    delivers = [f for _, f in frames if isinstance(f, commands.Basic.Deliver)]
    assert any(isinstance(f, commands.Basic.RecoverOk) for _, f in frames)
    assert [d.redelivered for d in delivers] == [True]
    client.send(1, commands.Basic.Recover(requeue=False))
    assert close_code(client) == ReplyCode.NOT_IMPLEMENTED


def test_redeclare_with_other_exclusive_flag_is_resource_locked() -> None:
    client = open_client()
    client.send(1, commands.Queue.Declare(queue="q"))
    client.send(1, commands.Queue.Declare(queue="q", exclusive=True))
    assert client.expect(commands.Channel.Close).reply_code == ReplyCode.RESOURCE_LOCKED


def test_unexpected_exception_closes_only_that_connection_with_541() -> None:
    ctx = make_context()
    client = open_client(ctx)
    other = open_client(ctx)

    def boom(*args: object) -> None:
        raise RuntimeError("bug")

    publisher = client.conn.channels[1].publisher
    publisher.publish_method = boom  # type: ignore[method-assign,assignment]
    publisher.publish_whole = boom  # type: ignore[method-assign,assignment]
    publisher.publish_decoded = boom  # type: ignore[method-assign,assignment]
    client.publish(1, b"x", routing_key="q")
    assert close_code(client) == ReplyCode.INTERNAL_ERROR
    other.send(1, commands.Queue.Declare(queue="still-fine"))
    other.expect(commands.Queue.DeclareOk)


def _client_close(client: Client) -> None:
    client.send(
        0, commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0)
    )


def test_client_close_leaves_the_socket_for_the_client_to_close() -> None:
    """As RabbitMQ: close-ok tells the client it may close the socket, so the broker does
    not hang up first (aiormq takes an EOF that races its close-ok for a failure); what the
    client sends after its close is dropped; after close_timeout the broker hangs up."""
    clock = FakeClock()
    ctx = make_context(clock)
    client = open_client(ctx)
    client.take()
    _client_close(client)
    client.expect(commands.Connection.CloseOk)
    assert client.conn.state is ConnectionState.CLOSED and not client.conn.should_close
    client.send(2, commands.Channel.Open())
    assert client.take() == []  # nothing answers after close-ok
    clock.now += ctx.settings.close_timeout / 2
    client.conn.tick()
    assert not client.conn.should_close
    clock.now += ctx.settings.close_timeout / 2
    client.conn.tick()
    assert client.conn.should_close


def test_broker_shutdown_hangs_up_on_a_closed_connection_at_once() -> None:
    client = open_client()
    _client_close(client)
    client.expect(commands.Connection.CloseOk)
    client.conn.close(ReplyCode.CONNECTION_FORCED, "broker shutdown")
    assert client.conn.should_close and client.take() == []


def test_broker_initiated_close_hangs_up_on_close_ok() -> None:
    client = open_client()
    client.conn.close(ReplyCode.CONNECTION_FORCED, "broker shutdown")
    client.expect(commands.Connection.Close)
    client.send(0, commands.Connection.CloseOk())
    assert client.conn.should_close
