"""The replicated configuration as the configuration stream's events show it (sans-I/O).

Each queue, exchange and binding becomes the object a configuration event carries
(:func:`queue_config`, :func:`exchange_config`, :func:`binding_config`); a snapshot is all
of the replicated ones (:func:`snapshot_steps`), built in slices: at 10,000 queues the
whole snapshot at once was one step of the loop of 35-75 ms of CPU (issue 25).

THREAD UNSAFE: read on the primary's event loop.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Any, Protocol

from broker.core.exchange import EXCHANGE, Binding, Exchange
from broker.core.field_table_codec import Encoded
from broker.core.queue import Queue
from broker.core.vhost import VHOST, VirtualHost
from broker.ha.replicate_level import ReplicateLevel
from common.slices import SLICE, Steps, rows_in_slices

#: Objects a slice when their rows were encoded ahead (a look-up each, no row made).
ENCODED_SLICE = 4 * SLICE


class EncodedRows(Protocol):
    """Rows encoded ahead (:class:`~broker.ha.snapshot_rows.SnapshotRows`): a snapshot
    joins them instead of making and encoding them (None: not encodable, the row made
    here, whose encoding then says why)."""

    def queue_row(self, queue: Queue, level: ReplicateLevel) -> Encoded | None: ...

    def binding_row(self, binding: Binding) -> Encoded | None: ...


def in_vhost(config: dict[str, Any], vhost: str) -> dict[str, Any]:
    """An event's object, with its vhost unless it is ``/`` (the events of a broker
    without vhosts)."""
    if vhost != VHOST:
        config["vhost"] = vhost
    return config


def queue_config(queue: Queue, level: ReplicateLevel) -> dict[str, Any]:
    return in_vhost(queue_fields(queue, level), queue.vhost)


def queue_fields(queue: Queue, level: ReplicateLevel) -> dict[str, Any]:
    return {
        "name": queue.name,
        "replicate": level.value,
        "durable": queue.durable,
        "auto_delete": queue.auto_delete,
        "exclusive": queue.exclusive_owner is not None,
        "arguments": dict(queue.arguments),
        "uuid": queue.uuid,
    }


def exchange_config(exchange: Exchange) -> dict[str, Any]:
    config = {
        "name": exchange.name,
        "type": exchange.type,
        "durable": exchange.durable,
        "auto_delete": exchange.auto_delete,
        "internal": exchange.internal,
        "arguments": dict(exchange.arguments),
    }
    return in_vhost(config, exchange.vhost)


def binding_config(binding: Binding) -> dict[str, Any]:
    """A binding: ``queue`` names a queue destination; an exchange-to-exchange binding
    names its ``destination`` with ``destination_type`` ``exchange`` instead."""
    config: dict[str, Any] = {
        "exchange": binding.exchange,
        "routing_key": binding.routing_key,
        "arguments": dict(binding.arguments),
    }
    if binding.to_exchange:
        config["destination"] = binding.destination.name
        config["destination_type"] = EXCHANGE
    else:
        config["queue"] = binding.destination.name
    return in_vhost(config, binding.destination.vhost)


def snapshot_steps(
    vhosts: Sequence[VirtualHost],
    queue_level: Callable[[Queue], ReplicateLevel],
    exchange_level: Callable[[Exchange], ReplicateLevel],
    binding_replicated: Callable[[Binding], bool],
    size: int = SLICE,
    encoded: EncodedRows | None = None,
) -> Steps[dict[str, Any]]:
    """The snapshot event of what ``vhosts`` replicate, as of this call: the queues,
    exchanges and bindings are listed now, each row is read when its slice (``size``
    objects) runs. A configuration stream pushes every change from the same moment, after
    the snapshot: an object changed or deleted meanwhile is shown as it is then, and its
    change or deletion follows the snapshot, so the backup ends where the primary is.

    ``encoded``: the queues' and bindings' rows as :class:`Encoded` items where it has them
    (for the link's encoder that made them: the same bytes), :data:`ENCODED_SLICE` objects
    a slice.

    The queues are listed busiest first (most messages enqueued, then in the order they
    were made): a member linking to a new primary subscribes the queues it heard traffic
    on as soon as their rows are decoded, before the rest of the snapshot
    (:meth:`~broker.ha.queue_subscriptions.QueueSubscriptions.config_field_decoded`)."""
    queues = [q for vhost in vhosts for q in vhost.queues.values()]
    queues.sort(key=_enqueued, reverse=True)  # stable: equal ones in their order
    exchanges = [e for vhost in vhosts for e in vhost.exchanges.values()]
    bindings = [b for vhost in vhosts for b in vhost.bindings()]
    names = [v.name for v in vhosts if v.name != VHOST]
    return _snapshot_rows(
        queues,
        exchanges,
        bindings,
        names if len(vhosts) > 1 else None,
        size if encoded is None else max(size, ENCODED_SLICE),
        queue_level,
        exchange_level,
        binding_replicated,
        encoded,
    )


_enqueued = attrgetter("enqueued_total")

#: Queues a snapshot's head lists at most (:func:`snapshot_head`).
HEAD_QUEUES = 128


def snapshot_head(
    vhosts: Sequence[VirtualHost],
    queue_level: Callable[[Queue], ReplicateLevel],
    limit: int = HEAD_QUEUES,
    encoded: EncodedRows | None = None,
) -> dict[str, Any] | None:
    """The ``snapshot-head`` event (replication format 4): the rows of the busiest queues
    the snapshot made at the same moment lists first (of the ``limit`` busiest with a
    message enqueued, those replicated with level ``all``), sent before the snapshot in an
    event of its own; None when there is none. The snapshot is made, encoded, sent and
    decoded whole before a member reads its first row (10,000 queues: 1.8 MB, ~25 ms of
    the new primary's CPU, issue 25); a member subscribes the queues of the head it heard
    traffic on as soon as the head is decoded, by the rule it applies to the snapshot's
    rows (:meth:`~broker.ha.queue_subscriptions.QueueSubscriptions.config_field_decoded`),
    and applies nothing else of it: the snapshot that follows lists the same objects and
    is what the member applies. Read now, in one step (a heap's pass over the queues)."""
    queues = (q for vhost in vhosts for q in vhost.queues.values() if q.enqueued_total)
    rows: list[dict[str, Any] | Encoded] = []
    for queue in heapq.nlargest(limit, queues, key=_enqueued):
        level = queue_level(queue)
        if level is not ReplicateLevel.ALL:
            continue
        row = None if encoded is None else encoded.queue_row(queue, level)
        rows.append(queue_config(queue, level) if row is None else row)
    return {"type": "snapshot-head", "queues": rows} if rows else None


def _snapshot_rows(
    queues: list[Queue],
    exchanges: list[Exchange],
    bindings: list[Binding],
    vhost_names: list[str] | None,
    size: int,
    queue_level: Callable[[Queue], ReplicateLevel],
    exchange_level: Callable[[Exchange], ReplicateLevel],
    binding_replicated: Callable[[Binding], bool],
    encoded: EncodedRows | None = None,
) -> Steps[dict[str, Any]]:
    def queue_row(queue: Queue) -> dict[str, Any] | Encoded | None:
        level = queue_level(queue)
        if level is ReplicateLevel.NONE:
            return None
        row = None if encoded is None else encoded.queue_row(queue, level)
        return queue_config(queue, level) if row is None else row

    def exchange_row(exchange: Exchange) -> dict[str, Any] | None:
        replicated = exchange_level(exchange) is not ReplicateLevel.NONE
        return exchange_config(exchange) if replicated else None

    def binding_row(binding: Binding) -> dict[str, Any] | Encoded | None:
        if not binding_replicated(binding):
            return None
        row = None if encoded is None else encoded.binding_row(binding)
        return binding_config(binding) if row is None else row

    queue_rows = yield from rows_in_slices(queues, queue_row, size)
    exchange_rows = yield from rows_in_slices(exchanges, exchange_row, size)
    binding_rows = yield from rows_in_slices(bindings, binding_row, size)
    snapshot: dict[str, Any] = {
        "type": "snapshot",
        "queues": [row for row in queue_rows if row is not None],
        "exchanges": [row for row in exchange_rows if row is not None],
        "bindings": [row for row in binding_rows if row is not None],
    }
    if vhost_names is not None:  # as a broker without vhosts sends it when there are none
        snapshot["vhosts"] = vhost_names
    return snapshot
