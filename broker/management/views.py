"""The JSON shapes of the core's objects as the management API shows them.

Pure functions from a core object (a queue, an exchange, a binding, an AMQP connection)
to a JSON-ready dict; no I/O, nothing changed. The keys are the API's contract
(``docs/management.md``): adding one is compatible, renaming or removing one is not.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from broker.core.exchange import Binding, Exchange
from broker.core.queue import Queue
from broker.ha.names import BACKUP_PROPERTY, URL_PROPERTY
from broker.management.metrics import ConnectionView


def queue_view(queue: Queue) -> dict[str, Any]:
    return {
        "name": queue.name,
        "vhost": queue.vhost,
        "durable": queue.durable,
        "auto_delete": queue.auto_delete,
        "exclusive": queue.exclusive_owner is not None,
        "arguments": queue.arguments,
        "messages": queue.message_count,
        "messages_unacked": queue.unacked,
        "consumers": queue.consumer_count,
        "bytes": queue.bytes,
        "enqueued_total": queue.enqueued_total,
        "delivered_total": queue.delivered_total,
        "acked_total": queue.acked_total,
        "expired_total": queue.expired_total,
        "dropped_total": queue.dropped_total,
        "rejected_publishes": queue.rejected_publishes,
    }


def exchange_view(exchange: Exchange) -> dict[str, Any]:
    return {
        "name": exchange.name,
        "vhost": exchange.vhost,
        "type": exchange.type,
        "durable": exchange.durable,
        "auto_delete": exchange.auto_delete,
        "internal": exchange.internal,
        "builtin": exchange.builtin,
        "arguments": exchange.arguments,
        "bindings": len(exchange.bindings),
        "routed_total": exchange.routed_total,
        "unroutable_total": exchange.unroutable_total,
    }


def properties_key(routing_key: str, arguments: dict[str, Any]) -> str:
    """What names a binding among those of one source and destination in a path, as
    RabbitMQ's ``properties_key``: the routing key (``~`` when it is empty) when the binding
    has no arguments, else the key, ``~`` and a digest of the arguments (the first 10
    characters of the URL-safe base64 of their canonical JSON's SHA-256)."""
    if not arguments:
        return routing_key or "~"
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"), default=repr)
    digest = hashlib.sha256(canonical.encode("utf-8")).digest()
    return f"{routing_key}~{base64.urlsafe_b64encode(digest).decode('ascii')[:10]}"


def binding_view(binding: Binding) -> dict[str, Any]:
    return {
        "source": binding.exchange,
        "vhost": binding.destination.vhost,
        "destination": binding.destination.name,
        "destination_type": binding.destination_type,
        "routing_key": binding.routing_key,
        "arguments": binding.arguments,
        "properties_key": properties_key(binding.routing_key, binding.arguments),
    }


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    return str(value)


#: A connection's byte rates before the console's sampler read it twice.
NO_RATES: Mapping[str, float] = {"recv_oct_rate": 0.0, "send_oct_rate": 0.0}


def connection_view(
    connection: ConnectionView, rates: Mapping[str, float] = NO_RATES
) -> dict[str, Any]:
    """A connection as ``GET /api/connections`` lists it; ``rates``: its bytes per second
    at the console sampler's last tick (:meth:`Samples.connection_rates_of
    <broker.management.console.samples.Samples.connection_rates_of>`)."""
    props = connection.client_properties
    state = connection.state
    return {
        "id": connection.id,
        "name": connection.name,
        "peer": connection.peer,
        "user": connection.user,
        "vhost": getattr(getattr(connection, "vhost", None), "name", "/"),
        "state": state.value if isinstance(state.value, str) else state.name.lower(),
        "client_product": _text(props.get("product")),
        "client_version": _text(props.get("version")),
        "channels": len(connection.channels),
        "heartbeat": connection.heartbeat,
        "frame_max": connection.frame_max,
        "messages_published": connection.messages_published,
        "messages_delivered": connection.messages_delivered,
        # RabbitMQ's: bytes received and sent, and their rates (per second)
        "recv_oct": connection.recv_oct,
        "send_oct": connection.send_oct,
        "recv_oct_details": {"rate": rates["recv_oct_rate"]},
        "send_oct_details": {"rate": rates["send_oct_rate"]},
        "protocol": connection.protocol,
        # RabbitMQ's names: the client's own name for it (pika's connection_name), and
        # whether it came over TLS
        "user_provided_name": _text(props.get("connection_name")),
        "ssl": bool(getattr(connection, "encrypted", False)),
        # an HA backup's replication link, not a client (closing it makes that backup
        # relink and catch up): the backup's address, else None
        "ha_backup": _text(props.get(URL_PROPERTY) or "?") if props.get(BACKUP_PROPERTY) else None,
    }
