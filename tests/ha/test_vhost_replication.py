"""Virtual hosts on the configuration stream, sans I/O: the snapshot and each event carry
the vhost; a backup creates and deletes vhosts; queues of the same name in two vhosts are
two replicated queues (keyed by vhost and name)."""

from __future__ import annotations

from typing import Any

from broker.core.vhosts import VirtualHosts, queue_key
from broker.ha.broker_replicator import BrokerReplicator
from broker.ha.primary import Primary, StandaloneBackups
from broker.ha.replicate_level import ReplicateLevel
from broker.ha.streams import PrimaryStreams
from broker.ha.wire import decode_config_event, encode_config_event


def over_the_wire(event: dict[str, Any]) -> dict[str, Any]:
    return decode_config_event(encode_config_event(event))


def primary_streams() -> PrimaryStreams:
    vhosts = VirtualHosts()
    primary = Primary(
        vhosts, replicate_default=ReplicateLevel.ALL, clock=lambda: 0.0, auto_delete_grace=1.0
    )
    return PrimaryStreams(primary, StandaloneBackups(primary))


def shape(vhosts: VirtualHosts) -> dict[str, Any]:
    return {
        v.name: (
            sorted(v.queues),
            sorted(n for n, e in v.exchanges.items() if not e.builtin),
            sorted((b.exchange, b.destination.name) for b in v.bindings()),
        )
        for v in vhosts
    }


def test_a_snapshot_recreates_every_vhost_and_drops_the_backups_leftovers() -> None:
    streams = primary_streams()
    primary = streams.vhosts
    for name in ("a", "b"):
        vhost, _ = primary.create(name)
        vhost.declare_queue("q", durable=True)
        vhost.declare_exchange("x", "direct")
        vhost.bind("q", "x", "k")
    primary.default.declare_queue("q")
    backup = VirtualHosts()
    leftover, _ = backup.create("leftover")
    leftover.declare_queue("old")
    replicator = BrokerReplicator(backup)
    changes = replicator.apply(over_the_wire(streams.snapshot()))
    assert shape(backup) == shape(primary)
    assert sorted(changes.subscribe) == sorted(["q", queue_key("a", "q"), queue_key("b", "q")])
    assert sorted(replicator.replicators) == sorted(changes.subscribe)
    assert replicator.replicators[queue_key("a", "q")].queue is backup.queue(queue_key("a", "q"))


def test_events_create_and_delete_vhosts_and_their_objects_on_the_backup() -> None:
    streams = primary_streams()
    events: list[dict[str, Any]] = []

    # the stream's listener methods produce the events; collect them through push
    from broker.ha.streams import ConfigStream

    stream = ConfigStream.__new__(ConfigStream)
    stream.streams = streams
    stream.carries_standard_bindings = True
    setattr(stream, "push", events.append)  # noqa: B010 (the events, not the wire)
    streams.vhosts.listeners.append(stream)
    streams.vhosts.vhost_listeners.append(stream)
    primary = streams.vhosts
    vhost, _ = primary.create("c")
    vhost.declare_exchange("x", "fanout")
    vhost.declare_queue("q")
    vhost.bind("q", "x", "")
    backup = VirtualHosts()
    replicator = BrokerReplicator(backup)
    subscribed = [k for e in events for k in replicator.apply(over_the_wire(e)).subscribe]
    assert shape(backup) == shape(primary) and subscribed == [queue_key("c", "q")]
    events.clear()
    primary.delete("c")
    assert [e["type"] for e in events] == ["queue-deleted", "exchange-deleted", "vhost-deleted"]
    dropped = [k for e in events for k in replicator.apply(over_the_wire(e)).unsubscribe]
    assert dropped == [queue_key("c", "q")] and backup.names() == ["/"]
    assert replicator.replicators == {}
