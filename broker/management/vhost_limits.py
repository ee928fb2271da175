"""Virtual host limits, as RabbitMQ's management API has them (issue 30).

Contract
========

The limits are RabbitMQ's ``max-connections`` and ``max-queues``
(:mod:`broker.core.vhost_limits`: what the primary refuses, in RabbitMQ's codes and words).

- ``GET /api/vhost-limits``: every vhost with a limit, ``[{"vhost", "value": {name: N}}]``;
  ``GET /api/vhost-limits/{vhost}`` that vhost's (an empty list: none; 404 no such vhost).
  Any management user may read them.
- ``PUT /api/vhost-limits/{vhost}/{name}``: body ``{"value": N}`` (an integer; negative: no
  limit, 0: none allowed); administrator. 201 set, 200 replaced, 400 naming a bad name or
  value, 404 no such vhost.
- ``DELETE /api/vhost-limits/{vhost}/{name}``: clears it; 404 when there is none.

Changes are 409 on a backup (made on the primary) and answered once every in-sync backup has
them: the limits travel with the cluster's users (replication format 4's ``users`` event)
and are kept in the data directory with them. Events ``vhost_limit_set``,
``vhost_limit_cleared``. A definitions file's vhost ``limits`` import and export here too
(:mod:`broker.management.definitions_api`).
"""

from __future__ import annotations

from http import HTTPStatus

from aiohttp import web
from structlog.typing import FilteringBoundLogger

from broker.core.vhost_limits import check_limit
from broker.management.auth import current_user
from broker.management.errors import ApiError
from broker.management.managed import ManagedBroker, refuse_on_backup, replicated, vhosts_of
from broker.management.request_input import Body, read_json_object
from broker.management.responses import json_response
from broker.security.cluster_users import ClusterUsers
from broker.security.roles import Role

__all__ = ["VhostLimitEndpoints"]


class VhostLimitEndpoints:
    """The vhost-limits handlers, bound to one broker."""

    def __init__(self, broker: ManagedBroker, log: FilteringBoundLogger) -> None:
        self.broker = broker
        self.log = log

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/api/vhost-limits", self.list_limits),
            web.get("/api/vhost-limits/{vhost}", self.vhost_limits),
            web.put("/api/vhost-limits/{vhost}/{name}", self.put_limit),
            web.delete("/api/vhost-limits/{vhost}/{name}", self.delete_limit),
        ]

    @property
    def cluster(self) -> ClusterUsers:
        return self.broker.context.authenticator.cluster_users

    def _vhost(self, request: web.Request) -> str:
        vhost = request.match_info["vhost"]
        if vhosts_of(self.broker).get(vhost) is None:
            raise ApiError(HTTPStatus.NOT_FOUND, f"NOT_FOUND - no vhost '{vhost}'")
        return vhost

    def _changing(self) -> None:
        user = current_user.get()
        authenticator = self.broker.context.authenticator
        if user is not None and Role.ADMINISTRATOR not in authenticator.roles(user):
            raise ApiError(
                HTTPStatus.FORBIDDEN,
                f"user {user!r} may not change vhost limits: that needs administrator",
            )
        refuse_on_backup(self.broker)

    async def list_limits(self, request: web.Request) -> web.Response:
        rows = self.cluster.limits.all()
        return json_response([{"vhost": v, "value": limits} for v, limits in rows.items()])

    async def vhost_limits(self, request: web.Request) -> web.Response:
        vhost = self._vhost(request)
        limits = self.cluster.limits.of(vhost)
        return json_response([{"vhost": vhost, "value": limits}] if limits else [])

    async def put_limit(self, request: web.Request) -> web.Response:
        body = Body(await read_json_object(request), ("value",))
        self._changing()
        vhost, name = self._vhost(request), request.match_info["name"]
        if "value" not in body.data:
            raise ApiError(HTTPStatus.BAD_REQUEST, "field 'value' is required")
        try:
            name, value = check_limit(name, body.data["value"])
        except ValueError as exc:
            raise ApiError(HTTPStatus.BAD_REQUEST, str(exc)) from None
        created = name not in self.cluster.limits.of(vhost)
        self.cluster.set_limit(vhost, name, value)
        await replicated(self.broker)
        self.log.info("vhost_limit_set", vhost=vhost, name=name, value=value,
                      user=current_user.get())  # fmt: skip
        answer = {"vhost": vhost, "name": name, "value": value}
        return json_response(answer, 201 if created else 200)

    async def delete_limit(self, request: web.Request) -> web.Response:
        self._changing()
        vhost, name = self._vhost(request), request.match_info["name"]
        try:
            self.cluster.clear_limit(vhost, name)
        except KeyError:
            raise ApiError(
                HTTPStatus.NOT_FOUND, f"NOT_FOUND - no limit '{name}' on vhost '{vhost}'"
            ) from None
        await replicated(self.broker)
        self.log.info("vhost_limit_cleared", vhost=vhost, name=name, user=current_user.get())
        return json_response({"vhost": vhost, "name": name})
