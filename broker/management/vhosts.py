"""The virtual host endpoints, as RabbitMQ's management API has them.

Contract
========

- ``GET /api/vhosts``: every vhost, ``/`` first then by name, each as
  :func:`vhost_view` shows it (``name``, ``queues``, ``exchanges``, ``messages``,
  ``connections``); ``GET /api/vhosts/{name}`` one of them (404 if there is none). The
  name is URL-encoded in a path: ``/`` is ``%2F``.
- ``PUT /api/vhosts/{name}`` (no body, or a JSON object, whose fields are ignored as
  RabbitMQ's ``description`` and ``tags`` would be): creates the vhost with its built-in
  exchanges; 201 with the view when created, 200 when it existed. 400 for a bad name
  (empty, over 255 bytes, a NUL).
- ``DELETE /api/vhosts/{name}``: deletes the vhost, its queues (and their messages),
  exchanges and bindings; its AMQP connections are closed with 320 CONNECTION_FORCED.
  Answers ``{"name", "connections_closed"}``. 404 for no such vhost, 403 for ``/`` (this
  broker's replication and store hang off it).
- PUT and DELETE need the administrator role (a change); on a backup of an HA cluster
  they are 409: vhosts are made on the primary and replicated.

The broker logs ``vhost_created`` and ``vhost_deleted`` (broker.server) whoever asks.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from aiohttp import web
from structlog.typing import FilteringBoundLogger

from broker.core.errors import AmqpError
from broker.core.vhost import VHOST, VirtualHost
from broker.core.vhosts import check_vhost_name
from broker.management.errors import ApiError, amqp_api_error
from broker.management.managed import ManagedBroker, refuse_on_backup, replicated, vhosts_of
from broker.management.responses import json_response


def vhost_view(vhost: VirtualHost, connections: int) -> dict[str, Any]:
    return {
        "name": vhost.name,
        "queues": len(vhost.queues),
        "exchanges": len(vhost.exchanges),
        "messages": sum(q.message_count for q in vhost.queues.values()),
        "connections": connections,
    }


class VhostEndpoints:
    """The vhost handlers, bound to one broker."""

    def __init__(self, broker: ManagedBroker, log: FilteringBoundLogger) -> None:
        self.broker = broker
        self.log = log

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/api/vhosts", self.list_vhosts),
            web.get("/api/vhosts/{name}", self.get_vhost),
            web.put("/api/vhosts/{name}", self.put_vhost),
            web.delete("/api/vhosts/{name}", self.delete_vhost),
        ]

    def _connections(self, vhost: VirtualHost) -> int:
        """Open connections of either protocol to ``vhost``."""
        ctx = self.broker.context
        return sum(
            1
            for c in (*ctx.connections.values(), *ctx.connections_1_0.values())
            if getattr(c, "vhost", None) is vhost and getattr(c, "is_open", False)
        )

    def _view(self, vhost: VirtualHost) -> dict[str, Any]:
        return vhost_view(vhost, self._connections(vhost))

    def _find(self, name: str) -> VirtualHost:
        vhost = vhosts_of(self.broker).get(name)
        if vhost is None:
            raise ApiError(HTTPStatus.NOT_FOUND, f"NOT_FOUND - no vhost '{name}'")
        return vhost

    def _on_primary(self) -> None:
        refuse_on_backup(self.broker)

    async def list_vhosts(self, request: web.Request) -> web.Response:
        vhosts = sorted(vhosts_of(self.broker), key=lambda v: (v.name != VHOST, v.name))
        return json_response([self._view(v) for v in vhosts])

    async def get_vhost(self, request: web.Request) -> web.Response:
        return json_response(self._view(self._find(request.match_info["name"])))

    async def put_vhost(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if request.can_read_body:
            try:
                body = await request.json()
            except ValueError:
                raise ApiError(HTTPStatus.BAD_REQUEST, "the body is not JSON") from None
            if not isinstance(body, dict):
                raise ApiError(HTTPStatus.BAD_REQUEST, "the body must be a JSON object")
        try:
            check_vhost_name(name)
        except ValueError as exc:
            raise ApiError(HTTPStatus.BAD_REQUEST, str(exc)) from None
        self._on_primary()
        vhost, created = vhosts_of(self.broker).create(name)
        await replicated(self.broker)
        return json_response(self._view(vhost), 201 if created else 200)

    async def delete_vhost(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        self._on_primary()
        vhost = self._find(name)
        connections = self._connections(vhost)
        try:
            vhosts_of(self.broker).delete(name)
        except AmqpError as exc:
            raise amqp_api_error(exc) from None
        await replicated(self.broker)
        return json_response({"name": name, "connections_closed": connections})
