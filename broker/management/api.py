"""The management HTTP API (aiohttp): status, queues, exchanges, bindings, connections, metrics.

Handlers only translate HTTP into calls on the core (:class:`~broker.core.vhost.VirtualHost`)
and back; they keep no protocol state. An :class:`~broker.core.errors.AmqpError` raised by
the core becomes an HTTP error (:func:`http_status`) whose body carries the AMQP reply text,
bad input is a 400 naming the field, and nothing ever answers with a traceback: every error
is a JSON object ``{"error": ..., "reason": ...}``.

When the broker runs with authentication on (``options.auth``), every request except
``GET /api/status`` and ``GET /metrics`` (health checks and scrapers) needs HTTP Basic
credentials, checked with the broker's SASL authenticator as a PLAIN response.

See ``docs/management.md`` for the endpoints with examples.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import math
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from datetime import date, datetime
from decimal import Decimal
from http import HTTPStatus
from typing import Any, Protocol

from aiohttp import web

from broker import __version__
from broker.core.errors import AmqpError, ReplyCode
from broker.core.exchange import Binding, Exchange
from broker.core.queue import Queue
from broker.management.metrics import (
    CONTENT_TYPE,
    BrokerView,
    ConnectionView,
    ContextView,
    OptionsView,
    render_metrics,
)
from broker.security.sasl import AuthenticationError
from common.log import get_logger

#: Paths served without credentials even when authentication is on.
OPEN_PATHS = frozenset({"/api/status", "/metrics"})

#: How the default exchange (named "") is addressed in a path, as in RabbitMQ.
DEFAULT_EXCHANGE_ALIAS = "amq.default"

#: AMQP short strings (queue and exchange names) hold at most 255 bytes.
MAX_NAME_BYTES = 255

REALM = "qpidd"

#: The authenticated user of the request being handled (None with authentication off).
#: aiohttp runs each request in its own task, so the value set by the middleware is seen
#: by the handler only.
current_user: ContextVar[str | None] = ContextVar("management_user", default=None)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


# -- what the API needs of a broker, beyond what the metrics read -------------------------
class Authenticator(Protocol):
    """:class:`broker.security.sasl.Authenticator`: the user name, or AuthenticationError."""

    def authenticate(self, mechanism: str, response: bytes, /) -> str: ...


class ManagedContext(ContextView, Protocol):
    @property
    def authenticator(self) -> Authenticator: ...


class ManagedOptions(OptionsView, Protocol):
    @property
    def auth(self) -> bool: ...


class ManagedBroker(BrokerView, Protocol):
    """What the management API reads of :class:`broker.server.Broker`."""

    mgmt_port: int

    @property
    def options(self) -> ManagedOptions: ...

    @property
    def context(self) -> ManagedContext: ...

    @property
    def amqp_port(self) -> int: ...

    @property
    def store_status(self) -> str: ...


# -- errors ------------------------------------------------------------------------------
class ApiError(Exception):
    """An HTTP error answered as JSON ``{"error": ..., "reason": ...}``."""

    def __init__(
        self,
        status: int,
        reason: str,
        *,
        headers: Mapping[str, str] | None = None,
        reply_code: int | None = None,
    ) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.headers = dict(headers or {})
        self.reply_code = reply_code


#: AMQP reply code -> HTTP status; any other code is 400.
_STATUS_OF_CODE = {
    ReplyCode.NOT_FOUND: 404,
    ReplyCode.ACCESS_REFUSED: 403,
    ReplyCode.RESOURCE_LOCKED: 409,
    ReplyCode.PRECONDITION_FAILED: 400,
    ReplyCode.NOT_ALLOWED: 403,
    ReplyCode.NOT_IMPLEMENTED: 501,
    ReplyCode.INTERNAL_ERROR: 500,
}


def http_status(error: AmqpError, *, precondition: int = 400) -> int:
    """The HTTP status for an AMQP error; ``precondition`` is used for 406.

    406 PRECONDITION_FAILED is a 400 for a declare (inequivalent or invalid arguments)
    and a 409 for a delete whose if-unused / if-empty condition does not hold.
    """
    if error.reply_code == ReplyCode.PRECONDITION_FAILED:
        return precondition
    return _STATUS_OF_CODE.get(error.reply_code, 400)


def amqp_api_error(error: AmqpError, *, precondition: int = 400) -> ApiError:
    return ApiError(
        http_status(error, precondition=precondition),
        f"{error.reply_code.name} - {error.reply_text}",
        reply_code=int(error.reply_code),
    )


def _error_slug(status: int) -> str:
    try:
        return HTTPStatus(status).phrase.lower().replace(" ", "_").replace("-", "_")
    except ValueError:
        return "error"


# -- JSON --------------------------------------------------------------------------------
def _json_default(value: Any) -> Any:
    """JSON for what AMQP field tables may hold besides JSON's own types."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, set | frozenset):
        return list(value)
    return str(value)


def dumps(data: Any) -> str:
    return json.dumps(data, default=_json_default, ensure_ascii=False)


def json_response(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status, dumps=dumps)


def error_response(
    status: int,
    reason: str,
    *,
    headers: Mapping[str, str] | None = None,
    reply_code: int | None = None,
) -> web.Response:
    body: dict[str, Any] = {"error": _error_slug(status), "reason": reason}
    if reply_code is not None:
        body["reply_code"] = reply_code
    response = json_response(body, status)
    for key, value in (headers or {}).items():
        response.headers[key] = value
    return response


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text} is out of range")
    return value


async def read_json_object(request: web.Request) -> dict[str, Any]:
    """The request body as a JSON object; an absent or blank body is ``{}``."""
    raw = await request.read()
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw, parse_constant=_reject_constant, parse_float=_finite_float)
    except (ValueError, RecursionError) as exc:
        raise ApiError(400, f"request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ApiError(400, f"request body must be a JSON object, got {_type_name(data)}")
    return data


class Body:
    """Typed access to the fields of a JSON request body, with 400s that name the field."""

    def __init__(self, data: dict[str, Any], allowed: tuple[str, ...]) -> None:
        unknown = sorted(set(data) - set(allowed))
        if unknown:
            raise ApiError(
                400,
                f"unknown field '{unknown[0]}' in request body (expected {', '.join(allowed)})",
            )
        self.data = data

    def flag(self, name: str, default: bool = False) -> bool:
        value = self.data.get(name, default)
        if not isinstance(value, bool):
            raise ApiError(400, f"field '{name}' must be a boolean, got {_type_name(value)}")
        return value

    def string(self, name: str, default: str | None = None) -> str:
        value = self.data.get(name, default)
        if value is None:
            raise ApiError(400, f"field '{name}' is required")
        if not isinstance(value, str):
            raise ApiError(400, f"field '{name}' must be a string, got {_type_name(value)}")
        return value

    def table(self, name: str) -> dict[str, Any]:
        value = self.data.get(name)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise ApiError(400, f"field '{name}' must be an object, got {_type_name(value)}")
        return value


_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off", ""})


def query_flag(request: web.Request, name: str) -> bool:
    value = request.query.get(name)
    if value is None:
        return False
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ApiError(400, f"query parameter '{name}' must be true or false, got {value!r}")


def check_name(kind: str, name: str) -> str:
    if len(name.encode("utf-8")) > MAX_NAME_BYTES:
        raise ApiError(400, f"{kind} name is longer than {MAX_NAME_BYTES} bytes")
    return name


# -- views -------------------------------------------------------------------------------
#: The longest lease a cluster manager may grant at once (seconds).
MAX_LEASE = 3600.0


def _lease_seconds(data: dict[str, Any]) -> float | None:
    lease = data.get("lease")
    if lease is None:
        return None
    if (
        isinstance(lease, bool)
        or not isinstance(lease, int | float)
        or not math.isfinite(lease)
        or not 0 < lease <= MAX_LEASE
    ):
        raise ApiError(
            HTTPStatus.BAD_REQUEST,
            f"lease must be seconds, more than 0 and at most {MAX_LEASE:g}: {lease!r}",
        )
    return float(lease)


def queue_view(queue: Queue) -> dict[str, Any]:
    return {
        "name": queue.name,
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


def binding_view(binding: Binding) -> dict[str, Any]:
    return {
        "source": binding.exchange,
        "destination": binding.queue.name,
        "destination_type": "queue",
        "routing_key": binding.routing_key,
        "arguments": binding.arguments,
    }


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    return str(value)


def connection_view(connection: ConnectionView) -> dict[str, Any]:
    props = connection.client_properties
    state = connection.state
    return {
        "id": connection.id,
        "name": connection.name,
        "peer": connection.peer,
        "user": connection.user,
        "state": state.value if isinstance(state.value, str) else state.name.lower(),
        "client_product": _text(props.get("product")),
        "client_version": _text(props.get("version")),
        "channels": len(connection.channels),
        "heartbeat": connection.heartbeat,
        "frame_max": connection.frame_max,
        "messages_published": connection.messages_published,
        "messages_delivered": connection.messages_delivered,
    }


# -- handlers ----------------------------------------------------------------------------
class ManagementApi:
    """The request handlers, bound to one broker."""

    def __init__(self, broker: ManagedBroker) -> None:
        self.broker = broker
        self.log = get_logger("management")

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/api/status", self.status),
            web.get("/api/queues", self.list_queues),
            web.get("/api/queues/{name}", self.get_queue),
            web.put("/api/queues/{name}", self.put_queue),
            web.delete("/api/queues/{name}", self.delete_queue),
            web.get("/api/exchanges", self.list_exchanges),
            web.get("/api/exchanges/{name}", self.get_exchange),
            web.put("/api/exchanges/{name}", self.put_exchange),
            web.delete("/api/exchanges/{name}", self.delete_exchange),
            web.get("/api/bindings", self.list_bindings),
            web.get("/api/connections", self.list_connections),
            web.get("/metrics", self.metrics),
            web.get("/api/ha", self.get_ha),
            web.post("/api/ha/promote", self.promote),
            web.post("/api/ha/lease", self.lease),
            web.get("/api/ha/replications", self.list_replications),
            web.post("/api/ha/replicate", self.replicate),
        ]

    # middlewares ------------------------------------------------------------------------
    @web.middleware
    async def errors(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Every error as JSON; never a traceback."""
        try:
            return await handler(request)
        except ApiError as exc:
            return error_response(
                exc.status, exc.reason, headers=exc.headers, reply_code=exc.reply_code
            )
        except AmqpError as exc:
            error = amqp_api_error(exc)
            return error_response(error.status, error.reason, reply_code=error.reply_code)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            headers = {k: v for k, v in exc.headers.items() if k.lower() in ("allow",)}
            reason = exc.reason
            if exc.status == 404:
                reason = f"no such resource: {request.method} {request.path}"
            elif exc.status == 405:
                reason = f"method {request.method} not allowed on {request.path}"
            return error_response(exc.status, reason, headers=headers)
        except asyncio.CancelledError:
            raise
        except Exception:
            self.log.exception(
                "management_request_failed", method=request.method, path=request.path
            )
            return error_response(500, "internal error (see the broker log)")

    @web.middleware
    async def authentication(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """HTTP Basic, checked by the broker's authenticator, when ``options.auth`` is on."""
        user = None
        if self.broker.options.auth and request.path not in OPEN_PATHS:
            user = self._authenticate(request.headers.get("Authorization"))
        token = current_user.set(user)
        try:
            return await handler(request)
        finally:
            current_user.reset(token)

    def _authenticate(self, header: str | None) -> str:
        challenge = {"WWW-Authenticate": f'Basic realm="{REALM}", charset="UTF-8"'}
        if not header:
            raise ApiError(401, "authentication required", headers=challenge)
        scheme, _, encoded = header.strip().partition(" ")
        if scheme.lower() != "basic":
            raise ApiError(401, "only HTTP Basic authentication is supported", headers=challenge)
        try:
            decoded = base64.b64decode(encoded.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise ApiError(401, "malformed Basic credentials", headers=challenge) from None
        user, colon, password = decoded.partition(b":")
        if not colon:
            raise ApiError(401, "malformed Basic credentials", headers=challenge)
        try:
            return self.broker.context.authenticator.authenticate(
                "PLAIN", b"\0" + user + b"\0" + password
            )
        except AuthenticationError:
            self.log.info("management_auth_failed", user=user.decode("utf-8", "replace"))
            raise ApiError(401, "invalid credentials", headers=challenge) from None

    # status and metrics -----------------------------------------------------------------
    async def status(self, request: web.Request) -> web.Response:
        broker = self.broker
        return json_response(
            {
                "node": broker.options.node_name,
                "version": __version__,
                "pid": os.getpid(),
                "uptime": round(max(0.0, time.time() - broker.started_at), 3),
                "ha_state": broker.ha_state,
                "store_status": broker.store_status,
                "amqp_port": broker.amqp_port,
                "connections": len(broker.context.connections),
                "queues": len(broker.vhost.queues),
                "exchanges": len(broker.vhost.exchanges),
            }
        )

    async def metrics(self, request: web.Request) -> web.Response:
        text = render_metrics(self.broker)
        return web.Response(body=text.encode("utf-8"), headers={"Content-Type": CONTENT_TYPE})

    # HA ---------------------------------------------------------------------------------
    def _ha(self) -> Any:
        ha = getattr(self.broker, "ha", None)
        if ha is None:
            raise ApiError(HTTPStatus.NOT_FOUND, "this broker is not an HA cluster member")
        return ha

    async def get_ha(self, request: web.Request) -> web.Response:
        return json_response(self._ha().status())

    async def promote(self, request: web.Request) -> web.Response:
        """POST /api/ha/promote {"cluster_manager": true, "epoch": N}: cluster managers only."""
        ha = self._ha()
        data = await read_json_object(request)
        unknown = sorted(set(data) - {"cluster_manager", "epoch", "lease"})
        if unknown:
            raise ApiError(HTTPStatus.BAD_REQUEST, f"unknown field(s): {', '.join(unknown)}")
        if data.get("cluster_manager") is not True:
            raise ApiError(
                HTTPStatus.FORBIDDEN,
                "promote is a cluster-manager command: only the cluster manager may promote"
                " (send cluster_manager: true)",
            )
        epoch = data.get("epoch")
        if epoch is not None and (
            isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0
        ):
            raise ApiError(
                HTTPStatus.BAD_REQUEST, f"epoch must be a non-negative integer: {epoch!r}"
            )
        lease = _lease_seconds(data)
        from broker.ha.ha_broker import PromoteError

        try:
            state = await ha.promote(epoch)
            if lease is not None:
                ha.grant_lease(lease)
        except PromoteError as exc:
            raise ApiError(HTTPStatus.CONFLICT, str(exc)) from exc
        self.log.info("ha_promote_requested", user=current_user.get(), epoch=ha.epoch)
        return json_response({"state": state.value, "epoch": ha.epoch})

    async def lease(self, request: web.Request) -> web.Response:
        """POST /api/ha/lease {"cluster_manager": true, "lease": seconds}: renew the primary's
        lease (cluster managers only); a primary whose lease runs out fences itself."""
        ha = self._ha()
        data = await read_json_object(request)
        unknown = sorted(set(data) - {"cluster_manager", "lease"})
        if unknown:
            raise ApiError(HTTPStatus.BAD_REQUEST, f"unknown field(s): {', '.join(unknown)}")
        if data.get("cluster_manager") is not True:
            raise ApiError(
                HTTPStatus.FORBIDDEN,
                "the lease is a cluster-manager command (send cluster_manager: true)",
            )
        lease = _lease_seconds(data)
        if lease is None:
            raise ApiError(HTTPStatus.BAD_REQUEST, "lease (seconds) is required")
        from broker.ha.ha_broker import PromoteError

        try:
            ha.grant_lease(lease)
        except PromoteError as exc:
            raise ApiError(HTTPStatus.CONFLICT, str(exc)) from exc
        return json_response({"state": ha.state.value, "lease": lease})

    async def list_replications(self, request: web.Request) -> web.Response:
        replications = getattr(self.broker, "replications", {})
        return json_response([r.status() for _, r in sorted(replications.items())])

    async def replicate(self, request: web.Request) -> web.Response:
        """POST /api/ha/replicate {"queue": Q, "broker": "host:port"} (ha-queue-replication)."""
        body = Body(await read_json_object(request), ("queue", "broker"))
        queue = check_name("queue", body.string("queue"))
        remote = body.string("broker")
        start = getattr(self.broker, "replicate", None)
        if start is None:
            raise ApiError(HTTPStatus.NOT_FOUND, "this broker cannot replicate queues")
        try:
            replication = await start(queue, remote)
        except ValueError as exc:
            raise ApiError(HTTPStatus.BAD_REQUEST, str(exc)) from exc
        return json_response(replication.status(), 201)

    # queues -----------------------------------------------------------------------------
    async def list_queues(self, request: web.Request) -> web.Response:
        queues = sorted(self.broker.vhost.queues.values(), key=lambda q: q.name)
        return json_response([queue_view(q) for q in queues])

    async def get_queue(self, request: web.Request) -> web.Response:
        return json_response(queue_view(self.broker.vhost.queue(request.match_info["name"])))

    async def put_queue(self, request: web.Request) -> web.Response:
        name = check_name("queue", request.match_info["name"])
        body = Body(await read_json_object(request), ("durable", "auto_delete", "arguments"))
        durable = body.flag("durable")
        auto_delete = body.flag("auto_delete")
        arguments = body.table("arguments")
        vhost = self.broker.vhost
        existed = name in vhost.queues
        queue = vhost.declare_queue(
            name, durable=durable, auto_delete=auto_delete, arguments=arguments
        )
        if not existed:
            self.log.info(
                "queue_declared",
                queue=name,
                durable=durable,
                auto_delete=auto_delete,
                via="management",
                user=current_user.get(),
            )
        return json_response(queue_view(queue), 200 if existed else 201)

    async def delete_queue(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if_unused = query_flag(request, "if_unused")
        if_empty = query_flag(request, "if_empty")
        vhost = self.broker.vhost
        if name not in vhost.queues:
            raise ApiError(404, f"NOT_FOUND - no queue '{name}' in vhost '{vhost.name}'")
        try:
            count = vhost.delete_queue(name, if_unused=if_unused, if_empty=if_empty)
        except AmqpError as exc:
            raise amqp_api_error(exc, precondition=409) from None
        self.log.info(
            "queue_deleted",
            queue=name,
            messages=count,
            via="management",
            user=current_user.get(),
        )
        return json_response({"name": name, "messages_deleted": count})

    # exchanges --------------------------------------------------------------------------
    @staticmethod
    def _exchange_name(request: web.Request) -> str:
        name = request.match_info["name"]
        return "" if name == DEFAULT_EXCHANGE_ALIAS else name

    async def list_exchanges(self, request: web.Request) -> web.Response:
        exchanges = sorted(self.broker.vhost.exchanges.values(), key=lambda e: e.name)
        return json_response([exchange_view(e) for e in exchanges])

    async def get_exchange(self, request: web.Request) -> web.Response:
        return json_response(
            exchange_view(self.broker.vhost.exchange(self._exchange_name(request)))
        )

    async def put_exchange(self, request: web.Request) -> web.Response:
        name = check_name("exchange", self._exchange_name(request))
        body = Body(
            await read_json_object(request),
            ("type", "durable", "auto_delete", "internal", "arguments"),
        )
        type_ = body.string("type")
        durable = body.flag("durable")
        auto_delete = body.flag("auto_delete")
        internal = body.flag("internal")
        arguments = body.table("arguments")
        vhost = self.broker.vhost
        existed = name in vhost.exchanges
        exchange = vhost.declare_exchange(
            name,
            type_,
            durable=durable,
            auto_delete=auto_delete,
            internal=internal,
            arguments=arguments,
        )
        if not existed:
            self.log.info(
                "exchange_declared",
                exchange=name,
                type=type_,
                durable=durable,
                via="management",
                user=current_user.get(),
            )
        return json_response(exchange_view(exchange), 200 if existed else 201)

    async def delete_exchange(self, request: web.Request) -> web.Response:
        name = self._exchange_name(request)
        if_unused = query_flag(request, "if_unused")
        vhost = self.broker.vhost
        if name not in vhost.exchanges:
            raise ApiError(404, f"NOT_FOUND - no exchange '{name}' in vhost '{vhost.name}'")
        try:
            vhost.delete_exchange(name, if_unused=if_unused)
        except AmqpError as exc:
            raise amqp_api_error(exc, precondition=409) from None
        self.log.info("exchange_deleted", exchange=name, via="management", user=current_user.get())
        return json_response({"name": name})

    # bindings and connections -----------------------------------------------------------
    async def list_bindings(self, request: web.Request) -> web.Response:
        bindings = sorted(
            self.broker.vhost.bindings(),
            key=lambda b: (b.exchange, b.queue.name, b.routing_key),
        )
        return json_response([binding_view(b) for b in bindings])

    async def list_connections(self, request: web.Request) -> web.Response:
        connections = sorted(self.broker.context.connections.values(), key=lambda c: c.id)
        return json_response([connection_view(c) for c in connections])


# -- application -------------------------------------------------------------------------
def create_app(broker: ManagedBroker) -> web.Application:
    """The management application for ``broker`` (also used by tests with a TestServer)."""
    api = ManagementApi(broker)
    app = web.Application(middlewares=[api.errors, api.authentication])
    app.add_routes(api.routes())
    return app


async def start_management(broker: ManagedBroker, interface: str, port: int) -> web.AppRunner:
    """Serve the management API on ``interface:port``; return the runner to clean up.

    With ``port`` 0 the system picks a free port, written back to ``broker.mgmt_port``.
    """
    runner = web.AppRunner(create_app(broker), access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, interface or None, port)
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    for address in runner.addresses:
        if isinstance(address, tuple) and len(address) >= 2:
            broker.mgmt_port = int(address[1])
            break
    return runner
