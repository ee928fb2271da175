"""The channels of the AMQP connections: ``GET /api/channels`` and
``GET /api/connections/{id}/channels`` (RabbitMQ's endpoints of those names).

Contract
========

- ``GET /api/channels``: every channel of every connection, by connection id then number
  (the list query of :mod:`broker.management.list_query`: filter, sort, page, columns);
  ``GET /api/connections/{id}/channels``: one connection's (400 for an id that is not a
  positive integer, 404 for no such connection). Read permission (the monitoring role).
- Each channel (:func:`channel_view`), with RabbitMQ's names where it has one:
  ``connection`` (id), ``connection_name``, ``number``, ``name``
  (``"<connection name> (<number>)"``), ``user``, ``vhost``, ``state``,
  ``prefetch_count`` (basic.qos per consumer, RabbitMQ's meaning of ``global=false``),
  ``global_prefetch_count`` (the channel's limit), ``consumer_count``, ``consumers``
  (``consumer_tag``, ``queue``, ``ack_required``, ``prefetch_count``, ``unacked``,
  ``exclusive``), ``messages_unacknowledged`` (delivered, not acknowledged),
  ``confirm`` (confirm mode), ``messages_unconfirmed`` (published in confirm mode, not
  settled yet), ``transactional`` (tx mode), ``messages_uncommitted`` and
  ``acks_uncommitted`` (held by the open transaction), ``flow`` (false: channel.flow
  stopped deliveries), ``replication_stream`` (an HA backup's stream on the primary).
- ``GET /api/consumers``: every consumer of every channel (:func:`consumer_views`:
  ``consumer_tag``, ``queue`` ``{name, vhost}``, ``vhost``, ``channel_details``
  ``{connection, connection_name, number, name, user}``, ``ack_required``, ``exclusive``,
  ``prefetch_count``, ``unacked``), with the same list query; ``name`` filters on the tag
  and the queue's name.
- Pure views, nothing changed; the web console shows them when a connection is opened.
- At scale (a primary's backups' links hold a channel per queue: 20,000 at 10,000 queues
  with two backups): a page of ``GET /api/channels`` in the list's own order builds only
  its rows (a filter reads only the names); a sort builds every row, a slice a turn; one
  connection's channels are built and encoded a slice a turn.
"""

from __future__ import annotations

from collections.abc import Mapping
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, cast

from aiohttp import web

from broker.management.errors import ApiError
from broker.management.list_query import QueryError, Selection, answer_steps, select_steps
from broker.management.lists import CHANNELS, CONSUMERS, parse_query, respond
from broker.management.managed import ManagedBroker
from broker.management.responses import json_response_sliced, run_sliced
from common.slices import rows_in_slices

if TYPE_CHECKING:
    from broker.amqp.channel import Channel
    from broker.amqp.connection import Connection

__all__ = ["ChannelEndpoints", "channel_view", "consumer_views"]


def channel_name(connection: Connection, number: int) -> str:
    """A channel's name (RabbitMQ's: its connection's and its number)."""
    return f"{connection.name} ({number})"


def channel_view(connection: Connection, channel: Channel) -> dict[str, Any]:
    deliveries, publisher = channel.deliveries, channel.publisher
    confirms, tx = publisher.confirms, publisher.tx
    return {
        "connection": connection.id,
        "connection_name": connection.name,
        "number": channel.number,
        "name": channel_name(connection, channel.number),
        "user": connection.user,
        "vhost": getattr(channel.vhost, "name", "/"),
        "state": channel.state.value,
        "prefetch_count": deliveries.consumer_prefetch,
        "global_prefetch_count": deliveries.prefetch_global,
        "consumer_count": len(deliveries.consumers),
        "consumers": [
            {
                "consumer_tag": consumer.tag,
                "queue": consumer.queue.name,
                "ack_required": not consumer.no_ack,
                "prefetch_count": consumer.prefetch,
                "unacked": consumer.unacked,
                "exclusive": consumer.exclusive,
            }
            for consumer in deliveries.consumers.values()
        ],
        "messages_unacknowledged": len(deliveries.unacked),
        "confirm": confirms is not None,
        "messages_unconfirmed": 0 if confirms is None else confirms.outstanding,
        "transactional": tx is not None,
        "messages_uncommitted": 0 if tx is None else len(tx.publishes),
        "acks_uncommitted": 0 if tx is None else len(tx.settlements),
        "flow": channel.flow_active,
        "replication_stream": deliveries.stream is not None,
    }


def consumer_views(channel: dict[str, Any]) -> list[dict[str, Any]]:
    """The consumers of a channel's view, each as ``GET /api/consumers`` shows it
    (RabbitMQ's fields: ``queue`` and ``channel_details`` are objects)."""
    details = {
        "connection": channel["connection"],
        "connection_name": channel["connection_name"],
        "number": channel["number"],
        "name": channel["name"],
        "user": channel["user"],
    }
    return [
        {
            "consumer_tag": consumer["consumer_tag"],
            "queue": {"name": consumer["queue"], "vhost": channel["vhost"]},
            "vhost": channel["vhost"],
            "channel_details": details,
            "ack_required": consumer["ack_required"],
            "exclusive": consumer["exclusive"],
            "prefetch_count": consumer["prefetch_count"],
            "unacked": consumer["unacked"],
        }
        for consumer in channel["consumers"]
    ]


class ChannelEndpoints:
    """The channel handlers, bound to one broker."""

    def __init__(self, broker: ManagedBroker) -> None:
        self.broker = broker

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/api/channels", self.list_channels),
            web.get("/api/connections/{id}/channels", self.connection_channels),
            web.get("/api/consumers", self.list_consumers),
        ]

    def _connections(self) -> list[Connection]:
        connections = self.broker.context.connections
        return [cast("Connection", connections[key]) for key in sorted(connections)]

    @staticmethod
    def _views(connection: Connection) -> list[dict[str, Any]]:
        return [
            channel_view(connection, connection.channels[number])
            for number in sorted(connection.channels)
        ]

    async def _channels(self) -> list[dict[str, Any]]:
        views = await run_sliced(rows_in_slices(self._connections(), self._views))
        return [v for per_connection in views for v in per_connection]

    @staticmethod
    def _refs(connection: Connection) -> list[tuple[Connection, int]]:
        return [(connection, number) for number in sorted(connection.channels)]

    async def list_channels(self, request: web.Request) -> web.Response:
        query = parse_query(request.query, CHANNELS)
        if query.sort is not None:  # a sort may read any field: every row
            return await respond(query, CHANNELS, await self._channels())
        # the list's own order: the page is chosen from (connection, number) and names,
        # and only its rows are built
        refs = await run_sliced(rows_in_slices(self._connections(), self._refs))
        listed = [ref for per_connection in refs for ref in per_connection]
        try:
            chosen = await run_sliced(select_steps(listed, query, _named, CHANNELS.names))
        except QueryError as exc:
            raise ApiError(400, str(exc)) from None
        rows: list[Mapping[str, Any]] = [
            channel_view(connection, connection.channels[number])
            for connection, number in chosen.items
            if number in connection.channels  # closed meanwhile: left out
        ]
        counts = chosen.counts()
        selection = Selection(
            rows, counts["total_count"], counts["filtered_count"], chosen.page, chosen.page_size
        )
        return await json_response_sliced(await run_sliced(answer_steps(selection, query)))

    async def list_consumers(self, request: web.Request) -> web.Response:
        query = parse_query(request.query, CONSUMERS)
        channels = await self._channels()
        rows = await run_sliced(rows_in_slices(channels, consumer_views))
        return await respond(query, CONSUMERS, [c for per_channel in rows for c in per_channel])

    async def connection_channels(self, request: web.Request) -> web.Response:
        text = request.match_info["id"]
        if not text.isdigit() or int(text) < 1:
            raise ApiError(
                HTTPStatus.BAD_REQUEST, f"a connection id is a positive integer, not {text!r}"
            )
        found = self.broker.context.connections.get(int(text))
        if found is None:
            raise ApiError(HTTPStatus.NOT_FOUND, f"no connection {text}")
        connection = cast("Connection", found)
        refs = self._refs(connection)  # a backup's link: a channel per replicated queue
        views = await run_sliced(rows_in_slices(refs, _view_of))
        return await json_response_sliced([view for view in views if view is not None])


def _named(ref: tuple[Connection, int]) -> dict[str, Any]:
    """What a filter on channels reads of one: its name."""
    return {"name": channel_name(*ref)}


def _view_of(ref: tuple[Connection, int]) -> dict[str, Any] | None:
    """A channel's view, None when it closed meanwhile."""
    connection, number = ref
    channel = connection.channels.get(number)
    return None if channel is None else channel_view(connection, channel)
