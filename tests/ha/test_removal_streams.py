"""purge-ok and the commit-ok of acknowledgements over a real (sans-I/O) AMQP connection:
they wait for the backup's acknowledgement of the queue stream's batch with the dequeues
(issue 10; docs/ha-design.md, "What each answer waits for")."""

from __future__ import annotations

from typing import Any

from pamqp import commands

from broker.ha.primary import PrimaryListener
from broker.ha.wire import Dequeue, decode_batch, decode_config_event
from tests.amqp.helpers import Client, open_client
from tests.ha.test_streams import BACKUP_PROPS, bodies_of, delivery_tags, primary_context

CONFIG, QUEUE = 1, 2  # the backup's channels


def _backup(ctx: Any) -> Client:
    """A backup with its configuration stream and q's stream open, both acknowledged."""
    backup = open_client(ctx, client_properties=BACKUP_PROPS)
    backup.open_channel(QUEUE)
    backup.send(CONFIG, commands.Basic.Qos(prefetch_count=100))
    backup.send(CONFIG, commands.Basic.Consume(queue="qpid.ha-config", consumer_tag="cfg"))
    backup.send(QUEUE, commands.Basic.Qos(prefetch_count=100))
    backup.send(QUEUE, commands.Basic.Consume(queue="qpid.ha-queue:q", consumer_tag="q"))
    _quiet(backup)
    return backup


def _quiet(backup: Client) -> None:
    """Acknowledge until nothing more comes (a queue ready sends membership, ...)."""
    while _ack_all(backup):
        pass


def _ack_all(backup: Client) -> list[Any]:
    """Acknowledge everything delivered on both streams; the events delivered."""
    frames = backup.take()
    events: list[Any] = []
    for channel in (CONFIG, QUEUE):
        mine = [(c, f) for c, f in frames if c == channel]
        tags = delivery_tags(mine)
        for body in bodies_of(mine):
            events += [decode_config_event(body)] if channel == CONFIG else decode_batch(body)
        if tags:
            backup.send(channel, commands.Basic.Ack(delivery_tag=max(tags), multiple=True))
    return events


def _replies(client: Client, kind: type) -> list[Any]:
    return [f for _, f in client.take() if isinstance(f, kind)]


def test_purge_ok_waits_for_the_batch_with_the_dequeues() -> None:
    ctx, _ = primary_context()
    backup = _backup(ctx)
    client = open_client(ctx)
    for i in range(3):
        client.publish(1, bytes([i]), routing_key="q")
    _quiet(backup)  # the backup holds the three messages
    client.send(1, commands.Queue.Purge(queue="q"))
    assert _replies(client, commands.Queue.PurgeOk) == []  # before: purge-ok at once
    frames = backup.take()
    events = [e for body in bodies_of(frames) for e in decode_batch(body)]
    dequeued = [list(e.ids) for e in events if isinstance(e, Dequeue)]
    assert len(dequeued) == len(events)  # the batch carries the dequeues only
    assert dequeued == [[1, 2, 3]]
    backup.send(QUEUE, commands.Basic.Ack(delivery_tag=max(delivery_tags(frames))))
    assert [ok.message_count for ok in _replies(client, commands.Queue.PurgeOk)] == [3]
    client.send(1, commands.Queue.Purge(queue="q"))  # nothing owed: at once
    assert [ok.message_count for ok in _replies(client, commands.Queue.PurgeOk)] == [0]


def test_purge_ok_then_delete_waits_for_the_deletion_event() -> None:
    ctx, driver = primary_context()
    # As HaBroker does at promotion, before any stream: the guards hear of a deletion first.
    assert driver.primary is not None
    ctx.vhost.listeners.insert(0, PrimaryListener(driver.primary, lambda _key: None))
    backup = _backup(ctx)
    client = open_client(ctx)
    client.publish(1, b"m", routing_key="q")
    _quiet(backup)
    client.send(1, commands.Queue.Purge(queue="q"))
    backup.take()  # the dequeue batch is never acknowledged: the queue goes first
    other = open_client(ctx)
    other.send(1, commands.Queue.Delete(queue="q"))
    assert _replies(client, commands.Queue.PurgeOk) == []
    frames = [(c, f) for c, f in backup.take() if c == CONFIG]
    assert [decode_config_event(b)["type"] for b in bodies_of(frames)] == ["queue-deleted"]
    backup.send(CONFIG, commands.Basic.Ack(delivery_tag=max(delivery_tags(frames))))
    assert len(_replies(client, commands.Queue.PurgeOk)) == 1
    assert len(_replies(other, commands.Queue.DeleteOk)) == 1


def test_commit_ok_of_acknowledgements_waits_for_their_dequeues() -> None:
    ctx, _ = primary_context()
    backup = _backup(ctx)
    client = open_client(ctx)
    for i in range(2):
        client.publish(1, bytes([i]), routing_key="q")
    _quiet(backup)
    client.send(1, commands.Tx.Select())
    client.send(1, commands.Basic.Get(queue="q"))
    client.send(1, commands.Basic.Get(queue="q"))
    tags = [f.delivery_tag for f in _replies(client, commands.Basic.GetOk)]
    assert tags == [1, 2]
    client.send(1, commands.Basic.Ack(delivery_tag=2, multiple=True))
    client.send(1, commands.Tx.Commit())
    assert _replies(client, commands.Tx.CommitOk) == []  # before: commit-ok at once
    events = _ack_all(backup)
    assert [list(e.ids) for e in events if isinstance(e, Dequeue)] == [[1, 2]]
    assert len(_replies(client, commands.Tx.CommitOk)) == 1


def test_a_transaction_without_acknowledgements_does_not_wait_for_dequeues() -> None:
    ctx, _ = primary_context()
    _backup(ctx)
    client = open_client(ctx)
    client.send(1, commands.Tx.Select())
    client.send(1, commands.Tx.Commit())
    assert len(_replies(client, commands.Tx.CommitOk)) == 1


def test_purge_ok_waits_for_an_expected_backup_until_its_handshake() -> None:
    ctx, _driver = primary_context(expected={"b1": "h1:5672"})
    client = open_client(ctx)
    client.send(1, commands.Queue.Purge(queue="q"))
    assert _replies(client, commands.Queue.PurgeOk) == []  # b1 is expected back
    _backup(ctx)  # its snapshot and its first batch (the handshake) acknowledged
    assert len(_replies(client, commands.Queue.PurgeOk)) == 1
