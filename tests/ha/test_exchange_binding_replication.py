"""Exchange-to-exchange bindings in the HA configuration stream: a client's exchange.bind
and exchange.unbind on a (sans-I/O) primary reach a backup's broker replicator as events
and in snapshots, and the backup then routes as the primary does."""

from __future__ import annotations

from typing import Any

from pamqp import commands

from broker.core.vhost import VirtualHost
from broker.ha.broker_replicator import BrokerReplicator
from broker.ha.wire import decode_config_event
from tests.amqp.helpers import Client, open_client
from tests.core.fakes import message
from tests.ha.test_streams import BACKUP_PROPS, delivery_tags, primary_context


def routes(vhost: VirtualHost, exchange: str, key: str) -> list[str]:
    return sorted(q.name for q in vhost.route(vhost.exchange(exchange), message("m", key)))


def apply_all(backup: Client, replicator: BrokerReplicator) -> list[dict[str, Any]]:
    frames = backup.take()
    events = [decode_config_event(f.value) for _, f in frames if type(f).__name__ == "ContentBody"]
    for event in events:
        replicator.apply(event)
    for tag in delivery_tags(frames):
        backup.send(1, commands.Basic.Ack(delivery_tag=tag))
    return events


def test_exchange_bindings_replicate_as_events_and_in_snapshots() -> None:
    ctx, _ = primary_context()
    backup = open_client(ctx, client_properties=BACKUP_PROPS)
    backup.send(1, commands.Basic.Consume(queue="qpid.ha-config", consumer_tag="cfg"))
    backup_vhost = VirtualHost()
    replicator = BrokerReplicator(backup_vhost)
    apply_all(backup, replicator)

    client = open_client(ctx)
    client.send(1, commands.Exchange.Declare(exchange="front", exchange_type="topic"))
    client.send(1, commands.Exchange.Declare(exchange="back", exchange_type="fanout"))
    client.send(1, commands.Queue.Bind(queue="q", exchange="back"))
    client.send(1, commands.Exchange.Bind(destination="back", source="front", routing_key="a.*"))
    client.send(
        1, commands.Exchange.Bind(destination="amq.fanout", source="front", routing_key="b")
    )
    events = apply_all(backup, replicator)
    bound = [e["binding"] for e in events if e["type"] == "bound"]
    assert {"destination": "back", "destination_type": "exchange"}.items() <= bound[1].items()
    assert bound[2]["destination"] == "amq.fanout"  # a built-in destination: every broker has it
    client.expect(commands.Exchange.BindOk)  # once the backup acknowledged the events
    assert routes(backup_vhost, "front", "a.x") == routes(ctx.vhost, "front", "a.x") == ["q"]

    # a second backup joins: the snapshot carries the exchange bindings
    late = VirtualHost()
    BrokerReplicator(late).apply(ctx.streams.snapshot())  # type: ignore[union-attr]
    assert routes(late, "front", "a.x") == ["q"]
    assert len(late.exchange("front").bindings) == 2

    client.send(1, commands.Exchange.Unbind(destination="back", source="front", routing_key="a.*"))
    apply_all(backup, replicator)
    client.expect(commands.Exchange.UnbindOk)
    assert routes(backup_vhost, "front", "a.x") == []
    assert [b.destination.name for b in backup_vhost.bindings() if b.exchange == "front"] == [
        "amq.fanout"
    ]
    # deleting the destination on the primary removes the binding on the backup too
    client.send(1, commands.Exchange.Bind(destination="back", source="front", routing_key="c"))
    client.send(1, commands.Exchange.Delete(exchange="back"))
    apply_all(backup, replicator)
    assert "back" not in backup_vhost.exchanges
    assert [b.destination.name for b in backup_vhost.bindings()] == ["amq.fanout"]


def test_snapshot_removes_leftover_exchange_bindings() -> None:
    backup = VirtualHost()
    replicator = BrokerReplicator(backup)
    stale = {
        "type": "snapshot",
        "queues": [],
        "exchanges": [
            {"name": "a", "type": "direct", "arguments": {}},
            {"name": "b", "type": "direct", "arguments": {}},
        ],
        "bindings": [
            {
                "exchange": "a",
                "destination": "b",
                "destination_type": "exchange",
                "routing_key": "k",
                "arguments": {},
            }
        ],
    }
    replicator.apply(stale)
    assert [b.key for b in backup.bindings()] == [("exchange", "b", "k", ())]
    fresh = dict(stale, bindings=[])
    replicator.apply(fresh)
    assert backup.bindings() == []
    assert backup.exchange("a").exchange_destinations == 0
