"""The backup applies the primary's configuration stream: snapshot, events, leftovers."""

from __future__ import annotations

import pytest

from broker.core.message import Message
from broker.core.vhost import VirtualHost
from broker.ha.broker_replicator import BrokerReplicator
from broker.ha.primary import Primary, StandaloneBackups
from broker.ha.replicate_level import ReplicateLevel
from broker.ha.streams import PrimaryStreams
from broker.ha.wire import decode_config_event, encode_config_event


def streams(default: ReplicateLevel = ReplicateLevel.ALL) -> PrimaryStreams:
    vhost = VirtualHost()
    primary = Primary(vhost, replicate_default=default, clock=lambda: 0.0, auto_delete_grace=1.0)
    return PrimaryStreams(primary, StandaloneBackups(primary))


def over_the_wire(event: dict[str, object]) -> dict[str, object]:
    return decode_config_event(encode_config_event(event))


def configuration(vhost: VirtualHost) -> tuple[object, ...]:
    return (
        sorted((q.name, q.durable, sorted(q.arguments.items())) for q in vhost.queues.values()),
        sorted((e.name, e.type) for e in vhost.exchanges.values()),
        sorted((b.exchange, b.queue.name, b.routing_key) for b in vhost.bindings()),
    )


def test_snapshot_mirrors_the_replicated_configuration() -> None:
    primary = streams()
    pv = primary.vhost
    pv.declare_queue("orders", durable=True, arguments={"x-message-ttl": 1000})
    pv.declare_queue("config-only", arguments={"qpid.replicate": "configuration"})
    pv.declare_queue("local", arguments={"qpid.replicate": "none"})
    pv.declare_queue("")  # server-named
    pv.declare_exchange("events", "topic", durable=True)
    pv.bind("orders", "events", "order.#")
    pv.bind("orders", "amq.topic", "x")  # to a standard exchange: with its queue (format 4)
    pv.bind("local", "amq.direct", "z")  # its queue is not replicated: neither is it
    pv.bind("local", "events", "y")  # to an unreplicated queue: not replicated

    backup = VirtualHost()
    replicator = BrokerReplicator(backup)
    changes = replicator.apply(over_the_wire(primary.snapshot()))
    expected = VirtualHost()
    for q in pv.queues.values():
        if q.name != "local":
            expected.declare_queue(
                q.name, durable=q.durable, arguments=q.arguments, replicated=True
            )
    expected.declare_exchange("events", "topic", durable=True)
    expected.bind("orders", "events", "order.#")
    expected.bind("orders", "amq.topic", "x")
    assert configuration(backup) == configuration(expected)
    assert sorted(changes.subscribe) == sorted(
        n for n in pv.queues if n not in ("local", "config-only")
    )


def test_standard_exchange_bindings_follow_the_snapshot_and_the_events() -> None:
    """A binding to amq.topic is sent at the snapshot and as it changes on a link of format
    4; a leftover one is removed at the next snapshot; a format-3 link is sent none."""
    primary = streams()
    pv = primary.vhost
    pv.declare_queue("orders", durable=True)
    pv.bind("orders", "amq.topic", "order.#")
    backup = VirtualHost()
    replicator = BrokerReplicator(backup)
    replicator.apply(over_the_wire(primary.snapshot()))
    assert [(b.exchange, b.routing_key) for b in backup.bindings()] == [("amq.topic", "order.#")]
    message = Message("amq.topic", "order.1", b"\x00\x00", b"")
    routed = backup.route(backup.exchanges["amq.topic"], message)
    assert routed == [backup.queues["orders"]]

    pv.unbind("orders", "amq.topic", "order.#")  # while the backup was away
    backup.bind("orders", "amq.fanout", "", replicated=True)  # another leftover
    replicator.apply(over_the_wire(primary.snapshot()))
    assert backup.bindings() == []

    old_link = over_the_wire(primary.snapshot(standard_exchanges=False))
    pv.bind("orders", "amq.topic", "order.#")
    assert over_the_wire(primary.snapshot(standard_exchanges=False)) == old_link


def test_leftovers_are_deleted_and_events_applied() -> None:
    primary = streams()
    backup = VirtualHost()
    backup.declare_queue("stale")
    backup.declare_exchange("stale-x", "fanout")
    replicator = BrokerReplicator(backup)
    replicator.apply(over_the_wire(primary.snapshot()))
    assert "stale" not in backup.queues and "stale-x" not in backup.exchanges

    changes = replicator.apply(
        over_the_wire(
            {
                "type": "queue-declared",
                "queue": {"name": "q", "replicate": "all", "durable": False, "arguments": {}},
            }
        )
    )
    assert changes.subscribe == ["q"] and "q" in backup.queues
    changes = replicator.apply(over_the_wire({"type": "queue-deleted", "name": "q"}))
    assert changes.unsubscribe == ["q"] and "q" not in backup.queues


def test_a_queue_declared_again_is_another_queue() -> None:
    """A queue deleted and declared again on the primary while the backup was away (or
    before a restart) has a new uuid: the backup drops its copy, whose replication ids
    name the old queue's messages, and replicates the new one from the start."""
    backup = VirtualHost()
    replicator = BrokerReplicator(backup)

    def declared(uuid: str) -> list[str]:
        config = {"name": "q", "replicate": "all", "durable": True, "arguments": {}, "uuid": uuid}
        event: dict[str, object] = {"type": "queue-declared", "queue": config}
        return replicator.apply(over_the_wire(event)).subscribe

    assert declared("a" * 32) == ["q"]
    old = backup.queues["q"]
    old.enqueue(Message("", "q", b"\x00\x00", b"old"), 5)
    assert declared("a" * 32) == [] and backup.queues["q"] is old  # the same queue: kept
    assert declared("b" * 32) == ["q"]
    new = backup.queues["q"]
    assert new is not old and new.uuid == "b" * 32 and new.message_count == 0


def test_bad_events_are_value_errors() -> None:
    replicator = BrokerReplicator(VirtualHost())
    with pytest.raises(ValueError, match="unknown configuration event"):
        replicator.apply({"type": "nonsense"})
    with pytest.raises(ValueError, match="malformed queue-declared"):
        replicator.apply({"type": "queue-declared"})
