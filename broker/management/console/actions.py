"""The endpoints the console's actions need beyond the CLI's: purge, test messages, users.

:Status: Beta

Contract
========

- ``DELETE /api/queues/{name}/contents``: purge the queue's ready messages (``queue.purge``;
  unacknowledged ones stay). Answers ``{"name", "messages_purged"}`` as purge-ok does: once
  every in-sync backup applied the purge (and the store has it); logs ``queue_purged``.
- ``POST /api/exchanges/{name}/publish`` ``{"routing_key": K, "payload": TEXT}``: publish
  one transient test message (no properties, UTF-8 body of at most :data:`MAX_PAYLOAD`
  bytes) as a client would (routing, alternate exchanges, limits). Answers
  ``{"routed": bool, "queues": n, "rejected": n}``; logs ``test_message_published``.
- ``POST /api/queues/{name}/get`` ``{"count": N, "requeue": bool}``: take up to N (1 to
  :data:`MAX_GET`) messages from the head as ``basic.get`` does; ``requeue`` true (the
  default) puts them back, marked redelivered, false removes them. Answers a list of
  ``{"payload", "payload_bytes", "payload_encoding", "routing_key", "exchange",
  "redelivered"}`` (payload as UTF-8 text, else base64); logs ``test_messages_got``.
- ``GET /api/users``: the users of the users file and their roles, no password hash;
  administrators only (403 otherwise, although it is a GET).

Purge, publish and get need the administrator's role (:mod:`broker.security.roles`:
every change does). On an HA backup they are refused with 409 naming the primary: a
backup's queues are the primary's copies. 404 for a missing queue or exchange, 400 for bad
input naming the field. Purge, get and publish act in vhost ``/``, or in the one
``?vhost=NAME`` names (404 if there is none).
"""

from __future__ import annotations

import base64
from http import HTTPStatus
from typing import Any

from aiohttp import web
from structlog.typing import FilteringBoundLogger

from broker.core.errors import AmqpError
from broker.core.message import Message
from broker.core.vhost import VHOST, VirtualHost
from broker.management.auth import current_user
from broker.management.errors import ApiError, amqp_api_error
from broker.management.managed import ManagedBroker, refuse_on_backup, replicated, vhosts_of
from broker.management.request_input import Body, read_json_object
from broker.security.roles import Role

__all__ = ["MAX_GET", "MAX_PAYLOAD", "ActionEndpoints"]

MAX_PAYLOAD = 64 * 1024
MAX_GET = 100


def _json(data: Any, status: int = 200) -> web.Response:
    from broker.management.responses import json_response

    return json_response(data, status)


def _count(body: Body) -> int:
    value = body.data.get("count", 1)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_GET:
        raise ApiError(400, f"field 'count' must be an integer from 1 to {MAX_GET}: {value!r}")
    return value


def _payload_view(body: bytes) -> tuple[str, str]:
    try:
        return body.decode("utf-8"), "string"
    except UnicodeDecodeError:
        return base64.b64encode(body).decode("ascii"), "base64"


class ActionEndpoints:
    """Purge, publish and get a test message, list users; bound to one broker."""

    def __init__(self, broker: ManagedBroker, log: FilteringBoundLogger) -> None:
        self.broker = broker
        self.log = log

    def routes(self) -> list[web.RouteDef]:
        return [
            web.delete("/api/queues/{name}/contents", self.purge),
            web.post("/api/exchanges/{name}/publish", self.publish),
            web.post("/api/queues/{name}/get", self.get),
            web.get("/api/users", self.users),
        ]

    def _vhost(self, request: web.Request) -> VirtualHost:
        """The vhost of ``?vhost=NAME`` (``/`` without it); 404 if there is none."""
        name = request.query.get("vhost", VHOST)
        vhost = vhosts_of(self.broker).get(name)
        if vhost is None:
            raise ApiError(HTTPStatus.NOT_FOUND, f"NOT_FOUND - no vhost '{name}'")
        return vhost

    def _not_backup(self) -> None:
        refuse_on_backup(self.broker)

    async def purge(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        self._not_backup()
        vhost = self._vhost(request)
        try:
            count = vhost.purge_queue(name)
        except AmqpError as exc:
            raise amqp_api_error(exc) from None
        purged = vhost.queues.get(name)
        await replicated(self.broker, () if purged is None else (purged,))  # as purge-ok
        self.log.info(
            "queue_purged", queue=name, messages=count, via="management", user=current_user.get()
        )
        return _json({"name": name, "messages_purged": count})

    async def publish(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        body = Body(await read_json_object(request), ("routing_key", "payload"))
        routing_key = body.string("routing_key", "")
        payload = body.string("payload", "").encode("utf-8")
        if len(payload) > MAX_PAYLOAD:
            raise ApiError(400, f"field 'payload' is longer than {MAX_PAYLOAD} bytes")
        if len(routing_key.encode("utf-8")) > 255:
            raise ApiError(400, "field 'routing_key' is longer than 255 bytes")
        self._not_backup()
        vhost = self._vhost(request)
        exchange_name = "" if name == "amq.default" else name
        try:
            exchange = vhost.check_publish(exchange_name)
            result = vhost.publish(exchange, Message(exchange_name, routing_key, body=payload))
        except AmqpError as exc:
            raise amqp_api_error(exc) from None
        self.log.info(
            "test_message_published",
            exchange=exchange_name,
            routing_key=routing_key,
            queues=result.queues,
            user=current_user.get(),
        )
        return _json(
            {"routed": result.routed, "queues": result.queues, "rejected": result.rejected}
        )

    async def get(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        body = Body(await read_json_object(request), ("count", "requeue"))
        count = _count(body)
        requeue = body.flag("requeue", True)
        self._not_backup()
        try:
            queue = self._vhost(request).queue(name)
        except AmqpError as exc:
            raise amqp_api_error(exc) from None
        taken = []
        for _ in range(count):
            entry = queue.get()
            if entry is None:
                break
            redelivered = entry.redelivered
            queue.delivered(entry, no_ack=not requeue)
            taken.append((entry, redelivered))
        if requeue and taken:
            queue.requeue([entry for entry, _ in taken])
            queue.dispatch()
        answer = []
        for entry, redelivered in taken:
            text, encoding = _payload_view(entry.message.body)
            answer.append(
                {
                    "payload": text,
                    "payload_bytes": len(entry.message.body),
                    "payload_encoding": encoding,
                    "routing_key": entry.message.routing_key,
                    "exchange": entry.message.exchange,
                    "redelivered": redelivered,
                }
            )
        self.log.info(
            "test_messages_got",
            queue=name,
            messages=len(answer),
            requeue=requeue,
            user=current_user.get(),
        )
        return _json(answer)

    async def users(self, request: web.Request) -> web.Response:
        user = current_user.get()
        authenticator = self.broker.context.authenticator
        if user is not None and Role.ADMINISTRATOR not in authenticator.roles(user):
            raise ApiError(403, f"user {user!r} may not list users: that needs administrator")
        database = getattr(authenticator, "users", None)
        names = sorted(database) if database is not None else []
        return _json(
            [
                {"name": name, "roles": sorted(role.value for role in authenticator.roles(name))}
                for name in names
            ]
        )
