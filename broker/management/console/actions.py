"""The endpoints the console's actions need beyond the CLI's: purge, test messages.

:Status: Beta

Contract
========

- ``DELETE /api/queues/{name}/contents``: purge the queue's ready messages (``queue.purge``;
  unacknowledged ones stay). Answers ``{"name", "messages_purged"}`` as purge-ok does: once
  every in-sync backup applied the purge (and the store has it); logs ``queue_purged``.
- ``POST /api/exchanges/{name}/publish`` ``{"routing_key": K, "payload": TEXT,
  "payload_encoding": "string"|"base64", "properties": {...}}``: publish one message (a
  body of at most :data:`MAX_PAYLOAD` bytes; RabbitMQ's properties, headers included:
  :mod:`broker.management.message_properties`) as a client would (routing, alternate
  exchanges, limits). Answers ``{"routed": bool, "queues": n, "rejected": n}``; logs
  ``test_message_published``.
- ``POST /api/queues/{name}/get`` ``{"count": N, "ackmode": MODE}``: take up to N (1 to
  :data:`MAX_GET`) messages from the head as ``basic.get`` does; RabbitMQ's ackmode:
  ``ack_requeue_true`` (the default) and ``reject_requeue_true`` put them back, marked
  redelivered, ``ack_requeue_false`` removes them, ``reject_requeue_false`` rejects them
  (dead-lettered where the queue says so). ``{"requeue": bool}`` is the older form
  (true: ``ack_requeue_true``, false: ``ack_requeue_false``). Answers a list of
  ``{"payload", "payload_bytes", "payload_encoding", "routing_key", "exchange",
  "redelivered", "message_count", "properties"}`` (payload as UTF-8 text, else base64;
  ``message_count`` the messages left after it, as get-ok says); logs
  ``test_messages_got``.
(``GET /api/users`` and the other users' endpoints: :mod:`broker.management.users`.)

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
from broker.management.message_properties import (
    ACK_MODES,
    properties_from_json,
    properties_to_json,
)
from broker.management.request_input import Body, read_json_object

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


def _payload(body: Body) -> bytes:
    """The body to publish: the payload as UTF-8, or decoded from base64."""
    text = body.string("payload", "")
    encoding = body.string("payload_encoding", "string")
    if encoding == "string":
        payload = text.encode("utf-8")
    elif encoding == "base64":
        try:
            payload = base64.b64decode(text, validate=True)
        except ValueError:
            raise ApiError(400, "field 'payload' is not base64") from None
    else:
        raise ApiError(400, f"field 'payload_encoding' must be string or base64: {encoding!r}")
    if len(payload) > MAX_PAYLOAD:
        raise ApiError(400, f"field 'payload' is longer than {MAX_PAYLOAD} bytes")
    return payload


def _ack_mode(body: Body) -> tuple[bool, bool]:
    """(requeue, reject) of a get: RabbitMQ's ackmode, else the older requeue flag."""
    mode = body.data.get("ackmode")
    if mode is None:
        return body.flag("requeue", True), False
    if mode not in ACK_MODES:
        raise ApiError(400, f"field 'ackmode' must be one of {', '.join(ACK_MODES)}: {mode!r}")
    return ACK_MODES[mode]


def _payload_view(body: bytes) -> tuple[str, str]:
    try:
        return body.decode("utf-8"), "string"
    except UnicodeDecodeError:
        return base64.b64encode(body).decode("ascii"), "base64"


class ActionEndpoints:
    """Purge, publish and get a test message; bound to one broker."""

    def __init__(self, broker: ManagedBroker, log: FilteringBoundLogger) -> None:
        self.broker = broker
        self.log = log

    def routes(self) -> list[web.RouteDef]:
        return [
            web.delete("/api/queues/{name}/contents", self.purge),
            web.post("/api/exchanges/{name}/publish", self.publish),
            web.post("/api/queues/{name}/get", self.get),
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
        body = Body(
            await read_json_object(request),
            ("routing_key", "payload", "payload_encoding", "properties"),
        )
        routing_key = body.string("routing_key", "")
        payload = _payload(body)
        raw_properties = properties_from_json(body.data.get("properties"))
        if len(routing_key.encode("utf-8")) > 255:
            raise ApiError(400, "field 'routing_key' is longer than 255 bytes")
        self._not_backup()
        vhost = self._vhost(request)
        exchange_name = "" if name == "amq.default" else name
        try:
            exchange = vhost.check_publish(exchange_name)
            result = vhost.publish(
                exchange, Message(exchange_name, routing_key, raw_properties, payload)
            )
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
        body = Body(await read_json_object(request), ("count", "requeue", "ackmode"))
        count = _count(body)
        requeue, reject = _ack_mode(body)
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
            queue.delivered(entry, no_ack=not requeue and not reject)
            taken.append((entry, redelivered, queue.message_count))
        if requeue and taken:
            queue.requeue([entry for entry, _, _ in taken])
            queue.dispatch()
        elif reject:
            for entry, _, _ in taken:
                queue.reject(entry, requeue=False)  # dead-lettered where the queue says
        answer = []
        for entry, redelivered, left in taken:
            text, encoding = _payload_view(entry.message.body)
            answer.append(
                {
                    "payload": text,
                    "payload_bytes": len(entry.message.body),
                    "payload_encoding": encoding,
                    "routing_key": entry.message.routing_key,
                    "exchange": entry.message.exchange,
                    "redelivered": redelivered,
                    "message_count": left,
                    "properties": properties_to_json(entry.message.properties_raw),
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
