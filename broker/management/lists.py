"""The management API's lists answered through one query shape (:mod:`.list_query`).

Each list (queues, exchanges, bindings, connections, channels, consumers) is a
:class:`ListKind`: its fields (what ``sort`` and ``columns`` may name) and the texts its
``name`` filter reads. :func:`list_response` is the one shell every list handler ends in:
the query checked first (400 naming the bad value), the rows built and the query run a
slice a turn of the event loop, the answer encoded in slices. Without query parameters the
answer is the list as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from aiohttp import web

from broker.management.errors import ApiError
from broker.management.list_query import ListQuery, QueryError, answer_steps, select_steps
from broker.management.responses import json_response_sliced, run_sliced
from common.slices import rows_in_slices

__all__ = [
    "BINDINGS",
    "CHANNELS",
    "CONNECTIONS",
    "CONSUMERS",
    "EXCHANGES",
    "QUEUES",
    "ListKind",
    "list_response",
    "parse_query",
]

T = TypeVar("T")
Row = Mapping[str, Any]


@dataclass(frozen=True)
class ListKind:
    """A list of the API: its name, the fields of its rows, what ``name`` filters on."""

    name: str
    fields: tuple[str, ...]
    names: Callable[[Row], Iterable[Any]]


def _name(row: Row) -> Iterable[Any]:
    return (row.get("name"),)


QUEUES = ListKind(
    "queues",
    (
        "name",
        "vhost",
        "durable",
        "auto_delete",
        "exclusive",
        "arguments",
        "messages",
        "messages_unacked",
        "consumers",
        "bytes",
        "enqueued_total",
        "delivered_total",
        "acked_total",
        "expired_total",
        "dropped_total",
        "rejected_publishes",
    ),
    _name,
)
EXCHANGES = ListKind(
    "exchanges",
    (
        "name",
        "vhost",
        "type",
        "durable",
        "auto_delete",
        "internal",
        "builtin",
        "arguments",
        "bindings",
        "routed_total",
        "unroutable_total",
    ),
    _name,
)
BINDINGS = ListKind(
    "bindings",
    (
        "source",
        "vhost",
        "destination",
        "destination_type",
        "routing_key",
        "arguments",
        "properties_key",
    ),
    lambda row: (row.get("source"), row.get("destination"), row.get("routing_key")),
)
CONNECTIONS = ListKind(
    "connections",
    (
        "id",
        "name",
        "peer",
        "user",
        "vhost",
        "state",
        "client_product",
        "client_version",
        "channels",
        "heartbeat",
        "frame_max",
        "messages_published",
        "messages_delivered",
        "recv_oct",
        "send_oct",
        "recv_oct_details",
        "send_oct_details",
        "protocol",
        "user_provided_name",
        "ssl",
        "ha_backup",
    ),
    lambda row: (row.get("name"), row.get("user"), row.get("user_provided_name")),
)
CHANNELS = ListKind(
    "channels",
    (
        "connection",
        "connection_name",
        "number",
        "name",
        "user",
        "vhost",
        "state",
        "prefetch_count",
        "global_prefetch_count",
        "consumer_count",
        "consumers",
        "messages_unacknowledged",
        "confirm",
        "messages_unconfirmed",
        "transactional",
        "messages_uncommitted",
        "acks_uncommitted",
        "flow",
        "replication_stream",
    ),
    _name,
)
CONSUMERS = ListKind(
    "consumers",
    (
        "consumer_tag",
        "queue",
        "vhost",
        "channel_details",
        "ack_required",
        "exclusive",
        "prefetch_count",
        "unacked",
    ),
    lambda row: (row.get("consumer_tag"), (row.get("queue") or {}).get("name")),
)


def parse_query(params: Mapping[str, str], kind: ListKind) -> ListQuery:
    """The list query of a request's parameters; 400 naming the bad value."""
    try:
        return ListQuery.parse(params, kind.fields)
    except QueryError as exc:
        raise ApiError(400, str(exc)) from None


def _same(row: Row) -> Row:
    return row


async def list_response(
    request: web.Request, kind: ListKind, items: Sequence[T], view: Callable[[T], Row]
) -> web.Response:
    """The answer to ``GET`` of a list: ``items`` (in the list's own order) as ``view``
    shows them, filtered, sorted, paged and cut to columns as the request asks."""
    query = parse_query(request.query, kind)
    rows = await run_sliced(rows_in_slices(items, view))
    return await respond(query, kind, rows)


async def respond(query: ListQuery, kind: ListKind, rows: Sequence[Row]) -> web.Response:
    """The answer for ``rows`` already built (:func:`list_response`)."""
    try:
        selection = await run_sliced(select_steps(rows, query, _same, kind.names))
    except QueryError as exc:
        raise ApiError(400, str(exc)) from None
    return await json_response_sliced(await run_sliced(answer_steps(selection, query)))
