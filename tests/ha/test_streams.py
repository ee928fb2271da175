"""The primary's replication streams over a real (sans-I/O) AMQP connection."""

from __future__ import annotations

from typing import Any

from pamqp import commands

from broker.amqp.context import BrokerContext
from broker.core.errors import ReplyCode
from broker.ha.delivery_watermark import WINDOW
from broker.ha.id_set import IdSet
from broker.ha.role_events import Tick
from broker.ha.state import HaState
from broker.ha.streams import PrimaryStreams
from broker.ha.wire import (
    Dequeue,
    Enqueue,
    QueueCaughtUp,
    Watermark,
    decode_batch,
    decode_config_event,
)
from tests.amqp.helpers import Client, make_context, open_client
from tests.ha.role_driver import RoleDriver

BACKUP_PROPS = {
    "qpid.ha-backup": True,
    "qpid.ha-broker-id": "b1",
    "qpid.ha-url": "h1:5672",
    "qpid.ha-replication-formats": "1-1",
}


def primary_context(expected: dict[str, str] | None = None) -> tuple[BrokerContext, RoleDriver]:
    ctx = make_context()
    ctx.vhost.declare_queue("q")
    driver = RoleDriver(ctx.vhost, ctx.clock, backup_timeout=10.0)
    primary = driver.promote(expected or {})
    ctx.streams = ctx.barrier = PrimaryStreams(primary, driver)
    return ctx, driver


def bodies(client: Client) -> list[bytes]:
    return bodies_of(client.take())


def bodies_of(frames: list[tuple[int, Any]]) -> list[bytes]:
    return [f.value for _, f in frames if type(f).__name__ == "ContentBody"]


def delivery_tags(frames: list[tuple[int, Any]]) -> list[int]:
    return [f.delivery_tag or 0 for _, f in frames if isinstance(f, commands.Basic.Deliver)]


def test_config_stream_sends_snapshot_then_changes() -> None:
    ctx, _ = primary_context()
    ctx.vhost.declare_queue("local", arguments={"qpid.replicate": "none"})
    backup = open_client(ctx, client_properties=BACKUP_PROPS)
    backup.send(1, commands.Basic.Consume(queue="qpid.ha-config", consumer_tag="cfg"))
    snapshot = decode_config_event(bodies(backup)[0])
    assert snapshot["type"] == "snapshot"
    assert [q["name"] for q in snapshot["queues"]] == ["q"]  # "local" is not replicated
    assert snapshot["exchanges"] == []  # built-ins never
    ctx.vhost.declare_queue("new")
    event = decode_config_event(bodies(backup)[0])
    assert event["type"] == "queue-declared" and event["queue"]["name"] == "new"


def test_client_connections_may_not_open_streams() -> None:
    ctx, _ = primary_context()
    client = open_client(ctx)
    client.send(1, commands.Basic.Consume(queue="qpid.ha-config"))
    assert client.expect(commands.Channel.Close).reply_code == ReplyCode.ACCESS_REFUSED


def test_confirm_waits_for_the_backup_ack() -> None:
    ctx, primary = primary_context()
    backup = open_client(ctx, client_properties=BACKUP_PROPS)
    backup.send(1, commands.Basic.Qos(prefetch_count=4))
    backup.send(1, commands.Basic.Consume(queue="qpid.ha-queue:q", consumer_tag="q"))
    frames = backup.take()
    first = decode_batch(next(f.value for _, f in frames if type(f).__name__ == "ContentBody"))
    # empty queue: caught up at once; the delivery watermark covers a window (the backup
    # joined: deliveries wait for its acknowledgement of it)
    assert first == [Watermark(WINDOW), QueueCaughtUp()]
    backup.send(1, commands.Basic.Ack(delivery_tag=delivery_tags(frames)[0]))
    assert primary.role.backups["b1"].ready

    publisher = open_client(ctx)
    publisher.send(1, commands.Confirm.Select())
    publisher.take()
    publisher.publish(1, b"hello", routing_key="q")
    assert not any(isinstance(f, commands.Basic.Ack) for _, f in publisher.take())

    frames = backup.take()
    events = decode_batch(next(f.value for _, f in frames if type(f).__name__ == "ContentBody"))
    assert len(events) == 1 and isinstance(events[0], Enqueue)
    assert (events[0].id, events[0].body, events[0].routing_key) == (1, b"hello", "q")
    backup.send(1, commands.Basic.Ack(delivery_tag=delivery_tags(frames)[0]))
    acks = [f for _, f in publisher.take() if isinstance(f, commands.Basic.Ack)]
    assert [a.delivery_tag for a in acks] == [1]


def test_reconnect_handshake_over_the_link() -> None:
    ctx, _ = primary_context()
    publisher = open_client(ctx)
    for i in range(3):
        publisher.publish(1, bytes([i]), routing_key="q")
    publisher.send(1, commands.Basic.Get(queue="q", no_ack=True))  # id 1 consumed
    backup = open_client(ctx, client_properties=BACKUP_PROPS)
    held = IdSet([1, 2])  # the backup still has 1, and 2
    backup.send(
        1,
        commands.Basic.Consume(
            queue="qpid.ha-queue:q", arguments={"qpid.ha-ids": bytearray(held.encode())}
        ),
    )
    events = decode_batch(bodies(backup)[0])
    enqueued = [e.id for e in events if isinstance(e, Enqueue)]
    dequeued = [list(e.ids) for e in events if isinstance(e, Dequeue)]
    assert enqueued == [3] and dequeued == [[1]]


def test_link_loss_releases_held_confirms_once_removed_and_recovery_ends() -> None:
    ctx, primary = primary_context(expected={"b1": "h1:5672"})
    states = [primary.state]
    backup = open_client(ctx, client_properties=BACKUP_PROPS)
    backup.send(1, commands.Basic.Consume(queue="qpid.ha-queue:q"))
    publisher = open_client(ctx)
    publisher.send(1, commands.Confirm.Select())
    publisher.publish(1, b"x", routing_key="q")
    assert not any(isinstance(f, commands.Basic.Ack) for _, f in publisher.take())
    backup.conn.connection_lost()
    # b1 was expected: in the in-sync set, so held until its removal is committed.
    assert not any(isinstance(f, commands.Basic.Ack) for _, f in publisher.take())
    primary.commit_in_sync(set())
    acks = [f for _, f in publisher.take() if isinstance(f, commands.Basic.Ack)]
    assert [a.delivery_tag for a in acks] == [1]
    states.append(primary.state)
    assert states == [HaState.RECOVERING, HaState.ACTIVE]  # the only expected backup left


def test_queue_stream_needs_level_all() -> None:
    ctx, _ = primary_context()
    ctx.vhost.declare_queue("conf", arguments={"qpid.replicate": "configuration"})
    backup = open_client(ctx, client_properties=BACKUP_PROPS)
    backup.send(1, commands.Basic.Consume(queue="qpid.ha-queue:conf"))
    assert backup.expect(commands.Channel.Close).reply_code == ReplyCode.PRECONDITION_FAILED


def declare_ok(client: Client) -> list[commands.Queue.DeclareOk]:
    return [f for _, f in client.take() if isinstance(f, commands.Queue.DeclareOk)]


def test_declare_ok_waits_until_the_backup_has_the_queue() -> None:
    ctx, _ = primary_context()
    backup = open_client(ctx, client_properties=BACKUP_PROPS)
    backup.send(1, commands.Basic.Consume(queue="qpid.ha-config", consumer_tag="cfg"))
    snapshot = backup.take()
    client = open_client(ctx)
    client.send(1, commands.Queue.Declare(queue="orders", durable=True))
    assert declare_ok(client) == []  # the backup has not acknowledged the snapshot yet
    backup.send(1, commands.Basic.Ack(delivery_tag=delivery_tags(snapshot)[0]))
    assert declare_ok(client) == []  # nor the queue-declared event
    frames = backup.take()
    assert decode_config_event(bodies_of(frames)[0])["type"] == "queue-declared"
    backup.send(1, commands.Basic.Ack(delivery_tag=delivery_tags(frames)[0]))
    assert [ok.queue for ok in declare_ok(client)] == ["orders"]
    client.send(1, commands.Queue.Declare(queue="orders", passive=True))
    assert [ok.queue for ok in declare_ok(client)] == ["orders"]  # nothing new: at once


def test_declare_ok_waits_for_a_gone_in_sync_backup_until_its_removal() -> None:
    ctx, driver = primary_context(expected={"b1": "h1:5672"})  # expected: in sync
    client = open_client(ctx)
    client.send(1, commands.Queue.Declare(queue="orders"))
    assert declare_ok(client) == []  # b1 is expected back: its snapshot will have it
    driver.handle(Tick(ctx.clock() + 10.0))  # ha-backup-timeout: b1 waits for removal
    assert declare_ok(client) == [] and driver.role.pending_removal() == ["b1"]
    driver.commit_in_sync(set())  # b1 left the set: released
    assert [ok.queue for ok in declare_ok(client)] == ["orders"]


def test_a_new_config_stream_snapshot_releases_the_older_holds() -> None:
    ctx, _ = primary_context(expected={"b1": "h1:5672"})
    client = open_client(ctx)
    client.send(1, commands.Queue.Declare(queue="orders"))
    assert declare_ok(client) == []
    backup = open_client(ctx, client_properties=BACKUP_PROPS)
    backup.send(1, commands.Basic.Consume(queue="qpid.ha-config", consumer_tag="cfg"))
    frames = backup.take()
    snapshot = decode_config_event(bodies_of(frames)[0])
    assert "orders" in [q["name"] for q in snapshot["queues"]]
    backup.send(1, commands.Basic.Ack(delivery_tag=delivery_tags(frames)[0]))
    assert [ok.queue for ok in declare_ok(client)] == ["orders"]


def test_bind_and_delete_replies_wait_too() -> None:
    ctx, _ = primary_context()
    backup = open_client(ctx, client_properties=BACKUP_PROPS)
    backup.send(1, commands.Basic.Qos(prefetch_count=100))
    backup.send(1, commands.Basic.Consume(queue="qpid.ha-config", consumer_tag="cfg"))
    client = open_client(ctx)
    client.send(1, commands.Exchange.Declare(exchange="ex", exchange_type="direct"))
    client.send(1, commands.Queue.Bind(queue="q", exchange="ex", routing_key="k"))
    client.send(1, commands.Queue.Delete(queue="q"))
    kinds = (commands.Exchange.DeclareOk, commands.Queue.BindOk, commands.Queue.DeleteOk)
    assert [f for _, f in client.take() if isinstance(f, kinds)] == []
    frames = backup.take()
    backup.send(1, commands.Basic.Ack(delivery_tag=max(delivery_tags(frames)), multiple=True))
    replies = [type(f) for _, f in client.take() if isinstance(f, kinds)]
    assert replies == list(kinds)


def test_tx_commit_ok_waits_until_the_backup_has_every_message() -> None:
    ctx, _ = primary_context()
    backup = open_client(ctx, client_properties=BACKUP_PROPS)
    backup.send(1, commands.Basic.Qos(prefetch_count=4))
    backup.send(1, commands.Basic.Consume(queue="qpid.ha-queue:q", consumer_tag="q"))
    frames = backup.take()
    backup.send(1, commands.Basic.Ack(delivery_tag=delivery_tags(frames)[0]))  # QueueCaughtUp
    client = open_client(ctx)
    client.send(1, commands.Tx.Select())
    client.take()
    client.publish(1, b"one", routing_key="q")
    client.publish(1, b"two", routing_key="q")
    client.send(1, commands.Tx.Commit())
    assert not any(isinstance(f, commands.Tx.CommitOk) for _, f in client.take())
    frames = backup.take()
    events = [e for body in bodies_of(frames) for e in decode_batch(body)]
    assert [e.body for e in events if isinstance(e, Enqueue)] == [b"one", b"two"]
    backup.send(1, commands.Basic.Ack(delivery_tag=max(delivery_tags(frames)), multiple=True))
    assert [type(f) for _, f in client.take()] == [commands.Tx.CommitOk]


def test_a_config_stream_opened_later_gets_the_last_membership_after_its_snapshot() -> None:
    ctx, _ = primary_context()
    streams = ctx.streams
    assert isinstance(streams, PrimaryStreams)
    members = [{"id": "b2", "url": "h2:5672", "state": "ready"}]
    streams.broadcast({"type": "membership", "members": members})  # before b1 connected
    backup = open_client(ctx, client_properties=BACKUP_PROPS)
    backup.send(1, commands.Basic.Qos(prefetch_count=10))
    backup.send(1, commands.Basic.Consume(queue="qpid.ha-config", consumer_tag="cfg"))
    events = [decode_config_event(body) for body in bodies(backup)]
    assert [e["type"] for e in events] == ["snapshot", "membership"]
    assert events[1]["members"] == members
