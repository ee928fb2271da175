"""The ACL endpoints: ``GET /api/acl`` (the file, its rules and groups, when it was loaded)
and ``POST /api/acl/reload`` (read the file again; ``qpid-ha acl reload``); the users file's
``POST /api/users/reload`` (``qpid-ha users reload``).

Handlers only translate HTTP into calls on the broker's
:class:`~broker.broker_security.BrokerSecurity`. A reload refused (no ACL file, or
a bad one: the running ACL stays) is a 409 naming the file and line; so is a users file
reload refused. Reading needs the
monitoring role, reloading the administrator's (:mod:`broker.security.roles`).
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from aiohttp import web
from structlog.typing import FilteringBoundLogger

from broker.management.auth import current_user
from broker.management.errors import ApiError
from broker.management.managed import ManagedBroker
from broker.management.request_input import Body, read_json_object
from broker.management.responses import json_response


class AclEndpoints:
    def __init__(self, broker: ManagedBroker, log: FilteringBoundLogger) -> None:
        self.broker = broker
        self.log = log

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/api/acl", self.get_acl),
            web.post("/api/acl/reload", self.reload),
            web.post("/api/users/reload", self.reload_users),
        ]

    def _security(self) -> Any:
        security = getattr(self.broker, "security", None)
        if security is None:
            raise ApiError(HTTPStatus.NOT_FOUND, "this broker has no security settings")
        return security

    async def get_acl(self, request: web.Request) -> web.Response:
        return json_response(self._security().status())

    async def reload(self, request: web.Request) -> web.Response:
        Body(await read_json_object(request), ())
        security = self._security()
        from broker.broker_security import ReloadError

        try:
            status = security.reload(f"management ({current_user.get()})")
        except ReloadError as exc:
            raise ApiError(HTTPStatus.CONFLICT, str(exc)) from None
        return json_response(status)

    async def reload_users(self, request: web.Request) -> web.Response:
        Body(await read_json_object(request), ())
        security = self._security()
        from broker.broker_security import ReloadError

        try:
            status = security.reload_users(f"management ({current_user.get()})")
        except ReloadError as exc:
            raise ApiError(HTTPStatus.CONFLICT, str(exc)) from None
        return json_response(status)
