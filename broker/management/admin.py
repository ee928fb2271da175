"""The administrator's endpoints (seed 000's qpid-cluster row "cluster admin"):
``DELETE /api/connections/{id}`` closes one AMQP connection and ``POST /api/admin/stop``
stops this broker.

Contract
========

- ``DELETE /api/connections/{id}``: the connection (an id of ``GET /api/connections``) is
  sent connection.close 320 (CONNECTION_FORCED, "closed by the administrator"), as at a
  shutdown; a client reconnects through its URL list as after any fail-over. 400 for an id
  that is not a positive integer, 404 for no such connection. Answers the connection as
  ``GET /api/connections`` shows it; logs ``connection_closed_by_admin``.
- ``POST /api/admin/stop`` (body ``{"broker_id": ID}`` optional): the broker answers, then
  stops as on SIGTERM (stops accepting, closes every connection with 320, closes its data
  directory clean, exits 0). With ``broker_id`` the stop happens only if that is this
  broker's id (a cluster member's ``/api/ha`` ``broker_id``), else 409: a tool that
  resolved a member to this address never stops another broker. Logs
  ``broker_stop_requested``.
- Both need the management credentials when authentication is on (every path but
  ``/api/status`` and ``/metrics`` does); the events name the user.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from http import HTTPStatus
from typing import Any, Protocol, cast

from aiohttp import web
from structlog.typing import FilteringBoundLogger

from broker.core.errors import ReplyCode
from broker.management.auth import current_user
from broker.management.errors import ApiError
from broker.management.managed import ManagedBroker
from broker.management.metrics import ConnectionView
from broker.management.request_input import read_json_object
from broker.management.responses import json_response
from broker.management.views import connection_view

__all__ = ["AdminEndpoints", "stop_this_process"]


class ClosableConnection(ConnectionView, Protocol):
    """What closing needs of :class:`broker.amqp.connection.Connection`."""

    @property
    def name(self) -> str: ...

    def close(self, reply_code: ReplyCode, text: str) -> None: ...


def stop_this_process() -> None:
    """Stop as ``systemctl stop`` does: SIGTERM to this process (``broker.main`` stops the
    broker in order on it)."""
    os.kill(os.getpid(), signal.SIGTERM)


class AdminEndpoints:
    """The administrator's handlers, bound to one broker."""

    def __init__(
        self,
        broker: ManagedBroker,
        log: FilteringBoundLogger,
        stop: Callable[[], None] = stop_this_process,
    ) -> None:
        self.broker = broker
        self.log = log
        self._stop = stop

    def routes(self) -> list[web.RouteDef]:
        return [
            web.delete("/api/connections/{id}", self.disconnect),
            web.post("/api/admin/stop", self.stop),
        ]

    async def disconnect(self, request: web.Request) -> web.Response:
        text = request.match_info["id"]
        if not text.isdigit() or int(text) < 1:
            raise ApiError(
                HTTPStatus.BAD_REQUEST, f"a connection id is a positive integer, not {text!r}"
            )
        ctx = self.broker.context
        found = ctx.connections.get(int(text)) or ctx.connections_1_0.get(int(text))
        if found is None:
            raise ApiError(HTTPStatus.NOT_FOUND, f"no connection {text}")
        connection = cast(ClosableConnection, found)
        view = connection_view(connection)
        user = current_user.get()
        connection.close(
            ReplyCode.CONNECTION_FORCED, f"closed by the administrator ({user or 'anonymous'})"
        )
        self.log.info(
            "connection_closed_by_admin",
            connection=connection.name,
            peer=connection.peer,
            client_user=connection.user,
            user=user,
        )
        return json_response(view)

    async def stop(self, request: web.Request) -> web.StreamResponse:
        data = await read_json_object(request)
        unknown = sorted(set(data) - {"broker_id"})
        if unknown:
            raise ApiError(HTTPStatus.BAD_REQUEST, f"unknown field(s): {', '.join(unknown)}")
        expected = data.get("broker_id")
        if expected is not None and not isinstance(expected, str):
            raise ApiError(HTTPStatus.BAD_REQUEST, f"broker_id must be a string: {expected!r}")
        own = self._broker_id()
        if expected is not None and expected != own:
            raise ApiError(
                HTTPStatus.CONFLICT,
                f"this broker is {own or 'not a cluster member'}, not {expected}: not stopped",
            )
        self.log.info("broker_stop_requested", user=current_user.get(), broker_id=own)
        answer: dict[str, Any] = {"stopping": True, "broker_id": own, "pid": os.getpid()}
        response = json_response(answer)
        await response.prepare(request)
        await response.write_eof()  # the answer is out before the broker stops
        self._stop()
        return response

    def _broker_id(self) -> str | None:
        ha = getattr(self.broker, "ha", None)
        broker_id = getattr(ha, "broker_id", None)
        return broker_id if isinstance(broker_id, str) else None
