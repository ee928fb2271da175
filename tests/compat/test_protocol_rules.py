"""The drop-in rules at the protocol edge, sans I/O (a scripted client on a broker
Connection, no sockets): update-secret's place in the handshake, user_id, the reply
consumer's rules and its unlisted queue's lifetime, exchange.bind on a channel."""

from __future__ import annotations

from pamqp import commands

from broker.core.errors import ReplyCode
from tests.amqp.helpers import Client, make_context, open_client


def test_update_secret_only_on_an_open_connection() -> None:
    client = open_client()
    client.send(0, commands.Connection.UpdateSecret(new_secret="guest", reason="refresh"))
    client.expect(commands.Connection.UpdateSecretOk)
    assert client.conn.is_open

    early = Client(make_context())
    early.send_bytes(b"AMQP\x00\x00\x09\x01")
    early.take()
    early.send(0, commands.Connection.UpdateSecret(new_secret="x", reason="too early"))
    close = early.expect(commands.Connection.Close)
    assert close.reply_code == ReplyCode.UNEXPECTED_FRAME


def test_user_id_other_than_the_login_closes_the_channel_only() -> None:
    client = open_client()
    client.send(1, commands.Queue.Declare(queue="q"))
    client.take()
    client.publish(1, b"ok", routing_key="q", properties=commands.Basic.Properties(user_id="guest"))
    client.publish(1, b"no", routing_key="q", properties=commands.Basic.Properties(user_id="eve"))
    close = client.expect(commands.Channel.Close)
    assert close.reply_code == ReplyCode.PRECONDITION_FAILED
    assert (close.class_id, close.method_id) == (60, 40)
    assert client.conn.is_open
    assert client.ctx.vhost.queues["q"].message_count == 1


def test_reply_consumer_rules_and_lifetime() -> None:
    ctx = make_context()
    client = open_client(ctx)
    client.send(1, commands.Basic.Consume(queue="amq.rabbitmq.reply-to", no_ack=False))
    assert client.expect(commands.Channel.Close).reply_code == ReplyCode.PRECONDITION_FAILED
    client.send(1, commands.Channel.CloseOk())
    client.open_channel(2)
    client.send(2, commands.Basic.Consume(queue="amq.rabbitmq.reply-to", no_ack=True))
    client.expect(commands.Basic.ConsumeOk)
    (name,) = ctx.vhost.replies.queues
    assert name.startswith("amq.rabbitmq.reply-to.") and name not in ctx.vhost.queues
    client.send(2, commands.Queue.Declare(queue=name, passive=True))
    assert client.expect(commands.Queue.DeclareOk).queue == name
    client.send(2, commands.Basic.Consume(queue="amq.rabbitmq.reply-to", no_ack=True))
    close = client.expect(commands.Channel.Close)
    assert "reply consumer already set" in close.reply_text
    assert not ctx.vhost.replies.queues  # the channel closed: its reply name is gone
    # a reply to a name no longer in use is unroutable: returned when mandatory
    client.send(2, commands.Channel.CloseOk())
    client.open_channel(3)
    client.publish(3, b"late", routing_key=name, mandatory=True)
    assert client.expect(commands.Basic.Return).reply_code == ReplyCode.NO_ROUTE


def test_exchange_bind_replies_and_errors_on_a_channel() -> None:
    client = open_client()
    client.send(1, commands.Exchange.Declare(exchange="a", exchange_type="fanout"))
    client.send(1, commands.Exchange.Declare(exchange="b", exchange_type="fanout"))
    client.send(1, commands.Exchange.Bind(destination="b", source="a"))
    client.expect(commands.Exchange.BindOk)
    client.send(1, commands.Exchange.Bind(destination="b", source="a", nowait=True))
    client.send(1, commands.Exchange.Unbind(destination="b", source="a"))
    client.expect(commands.Exchange.UnbindOk)
    client.send(1, commands.Exchange.Bind(destination="b", source="nope"))
    close = client.expect(commands.Channel.Close)
    assert close.reply_code == ReplyCode.NOT_FOUND
    assert (close.class_id, close.method_id) == (40, 30)
