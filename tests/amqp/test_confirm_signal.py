"""A 0-9-1 channel tells its connection of settled confirms once until the connection takes
them (not at each publish), and again after a flush that kept them (an HA primary that may
not confirm), so that no confirm waits for a read that may never come. Sans-I/O."""

from __future__ import annotations

from typing import Any

from pamqp import commands

from broker.amqp.channel import Channel
from broker.amqp.connection import Connection
from broker.core.confirms import PublisherConfirms
from tests.amqp.helpers import Client, open_client
from tests.amqp10.test_admission import Admission


def _confirming() -> tuple[Client, list[Channel]]:
    """A client whose channel 1 is in confirm mode, and the list of the channels its
    connection is told of (each ``confirms_settled`` call)."""
    client = open_client()
    client.send(1, commands.Confirm.Select())
    client.expect(commands.Confirm.SelectOk)
    client.send(1, commands.Queue.Declare(queue="q"))
    client.expect(commands.Queue.DeclareOk)
    told: list[Channel] = []
    conn: Any = client.conn
    settled = conn.confirms_settled

    def counting(channel: Channel) -> None:
        told.append(channel)
        settled(channel)

    conn.confirms_settled = counting
    return client, told


def _acked(client: Client) -> list[tuple[int, bool]]:
    return [
        (int(m.delivery_tag), bool(m.multiple))
        for m in client.methods()
        if isinstance(m, commands.Basic.Ack)
    ]


def _confirms(conn: Connection) -> PublisherConfirms:
    confirms = conn.channels[1].publisher.confirms
    assert confirms is not None
    return confirms


def test_a_read_of_many_publishes_tells_the_connection_once() -> None:
    client, told = _confirming()
    batch = b"".join(_publish_bytes() for _ in range(100))
    client.send_bytes(batch)
    assert len(told) == 1
    assert _acked(client) == [(100, True)]
    client.send_bytes(b"".join(_publish_bytes() for _ in range(10)))  # taken: told again
    assert len(told) == 2
    assert _acked(client) == [(110, True)]


def test_confirms_settled_between_reads_are_told_once_until_taken() -> None:
    client, told = _confirming()
    conn = client.conn
    confirms = _confirms(conn)
    handles = [confirms.publish() for _ in range(5)]
    for handle in handles[:3]:
        handle.release()  # as a store's write or a backup's ack settles it, off any read
    assert len(told) == 1
    assert _acked(client) == [(3, True)]
    for handle in handles[3:]:
        handle.release()
    assert len(told) == 2
    assert _acked(client) == [(5, True)]


def test_a_flush_that_keeps_the_replies_lets_the_next_settle_ask_again() -> None:
    client, told = _confirming()
    conn = client.conn
    admission = Admission()
    conn.ctx.admission = admission
    confirms = _confirms(conn)
    first, second, third = (confirms.publish() for _ in range(3))
    admission.confirming = False  # the primary may not confirm: the flush keeps them
    first.release()
    assert len(told) == 1
    assert _acked(client) == []
    admission.confirming = True
    second.release()  # told again: a flush now sends both
    assert len(told) == 2
    assert _acked(client) == [(2, True)]
    third.release()
    assert _acked(client) == [(3, False)]


def test_a_closed_channel_is_not_told_of() -> None:
    client, told = _confirming()
    conn = client.conn
    confirms = _confirms(conn)
    handle = confirms.publish()
    client.send(
        1, commands.Channel.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0)
    )
    client.expect(commands.Channel.CloseOk)
    handle.release()
    assert told == []
    assert _acked(client) == []


def _publish_bytes() -> bytes:
    from pamqp import body, frame, header

    data = frame.marshal(commands.Basic.Publish(exchange="", routing_key="q"), 1)
    data += frame.marshal(header.ContentHeader(0, 3, commands.Basic.Properties()), 1)
    return data + frame.marshal(body.ContentBody(b"abc"), 1)
