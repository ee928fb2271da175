"""The management HTTP API (aiohttp): the application, its route table and its middlewares.

Handlers only translate HTTP into calls on the core (:class:`~broker.core.vhost.VirtualHost`)
and back; they keep no protocol state. An :class:`~broker.core.errors.AmqpError` raised by
the core becomes an HTTP error (:func:`~broker.management.errors.http_status`) whose body
carries the AMQP reply text, bad input is a 400 naming the field, and nothing ever answers
with a traceback: every error is a JSON object ``{"error": ..., "reason": ...}``.

When the broker runs with authentication on (``options.auth``), every request except
``GET /api/status`` and ``GET /metrics`` (health checks and scrapers) needs HTTP Basic
credentials, checked with the broker's SASL authenticator as a PLAIN response.

This module only assembles the app: the route table (:meth:`ManagementApi.routes`, every
endpoint in one place), the error middleware (outermost), the guard that refuses changes
asked by another site's page (:mod:`broker.management.origin_guard`) and the
authentication middleware (:mod:`broker.management.auth`), and the server
(:func:`start_management`). The handlers live by concept:
:mod:`~broker.management.status` (status, metrics),
:mod:`~broker.management.objects` (queues, exchanges, bindings, connections),
:mod:`~broker.management.bindings` (add and remove a binding, a queue's bindings),
:mod:`~broker.management.channels` (the connections' channels and consumers),
:mod:`~broker.management.vhosts` (virtual hosts),
:mod:`~broker.management.users` (users and permissions),
:mod:`~broker.management.definitions_api` (definitions export and import),
:mod:`~broker.management.ha` (HA role, promote, lease, queue replication) and
:mod:`~broker.management.admin` (close a connection, stop the broker); the JSON shapes
in :mod:`~broker.management.views`, every list's filter, sort and pages in
:mod:`~broker.management.lists` (over :mod:`~broker.management.list_query`), request parsing in
:mod:`~broker.management.request_input`, errors in :mod:`~broker.management.errors`.

See ``docs/management.md`` for the endpoints with examples.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from broker.core.errors import AmqpError
from broker.listen import open_sockets
from broker.management.acl import AclEndpoints
from broker.management.admin import AdminEndpoints
from broker.management.auth import BasicAuth, Handler
from broker.management.bindings import BindingEndpoints
from broker.management.channels import ChannelEndpoints
from broker.management.console import Console
from broker.management.definitions_api import DefinitionsEndpoints
from broker.management.errors import (
    UNROUTED,
    ApiError,
    amqp_api_error,
    error_response,
    routing_reason,
    unrouted,
)
from broker.management.ha import HaEndpoints
from broker.management.http_log import http_logger
from broker.management.managed import ManagedBroker
from broker.management.objects import ObjectEndpoints
from broker.management.origin_guard import OriginGuard
from broker.management.status import StatusEndpoints
from broker.management.store_backup import StoreBackupEndpoints
from broker.management.users import UserEndpoints
from broker.management.vhost_limits import VhostLimitEndpoints
from broker.management.vhosts import VhostEndpoints
from common.log import get_logger


class ManagementApi:
    """The request handlers and middlewares, bound to one broker."""

    def __init__(self, broker: ManagedBroker) -> None:
        self.broker = broker
        self.log = get_logger("management")
        self.console = Console(broker, self.log)  # the web console, docs/console.md
        self.origin_guard = OriginGuard(self.log)  # no change asked by another site's page
        self.auth = BasicAuth(broker, self.log, sessions=self.console)
        self.overview = StatusEndpoints(broker)
        samples = self.console.live.samples  # the connections' byte rates
        self.objects = ObjectEndpoints(broker, self.log, samples.connection_rates_of)
        self.bindings = BindingEndpoints(broker, self.log)
        self.vhosts = VhostEndpoints(broker, self.log)
        self.users = UserEndpoints(broker, self.log)
        self.vhost_limits = VhostLimitEndpoints(broker, self.log)
        self.definitions = DefinitionsEndpoints(broker, self.log)
        self.ha = HaEndpoints(broker, self.log)
        self.console.live.managed_by = lambda: self.ha.promote_guard.managed_by
        self.acl = AclEndpoints(broker, self.log)
        self.admin = AdminEndpoints(broker, self.log)
        self.channels = ChannelEndpoints(broker)
        self.store_backup = StoreBackupEndpoints(broker, get_logger("store"))

    def routes(self) -> list[web.RouteDef]:
        overview, objects, ha = self.overview, self.objects, self.ha
        return [
            web.get("/api/status", overview.status),
            web.get("/api/queues", objects.list_queues),
            web.get("/api/queues/{name}", objects.get_queue),
            web.put("/api/queues/{name}", objects.put_queue),
            web.delete("/api/queues/{name}", objects.delete_queue),
            web.get("/api/exchanges", objects.list_exchanges),
            web.get("/api/exchanges/{name}", objects.get_exchange),
            web.put("/api/exchanges/{name}", objects.put_exchange),
            web.delete("/api/exchanges/{name}", objects.delete_exchange),
            *self.vhosts.routes(),  # GET /api/vhosts[/{name}], PUT and DELETE /api/vhosts/{name}
            *self.users.routes(),  # /api/users[/{name}], /api/permissions[/{vhost}/{user}]
            *self.vhost_limits.routes(),  # /api/vhost-limits[/{vhost}[/{name}]]
            *self.definitions.routes(),  # GET, POST /api/definitions[/{vhost}]
            web.get("/api/bindings", objects.list_bindings),
            *self.bindings.routes(),  # POST, DELETE /api/bindings/{vhost}/e/{source}/q/...
            web.get("/api/connections", objects.list_connections),
            *self.channels.routes(),  # GET /api/channels, /api/connections/{id}/channels
            web.get("/metrics", overview.metrics),
            web.get("/api/ha", ha.get_ha),
            web.post("/api/ha/promote", ha.promote),
            web.post("/api/ha/lease", ha.lease),
            web.post("/api/ha/in-sync", ha.in_sync),
            web.post("/api/ha/members", ha.members),
            web.post("/api/ha/shutdown", ha.shutdown),
            web.get("/api/ha/replications", ha.list_replications),
            web.post("/api/ha/replicate", ha.replicate),
            *self.acl.routes(),  # GET /api/acl, POST /api/acl/reload
            *self.admin.routes(),  # DELETE /api/connections/{id}, POST /api/admin/stop
            *self.store_backup.routes(),  # POST /api/store/backup (a hot backup, streamed)
            *self.console.routes(),  # /console/..., /api/console/live, purge, get, publish
            # After the console's /api/queues/{name}/contents and .../publish, which they
            # would take: an object in a vhost other than "/" (RabbitMQ's paths).
            web.get("/api/queues/{vhost}/{name}", objects.get_queue),
            web.put("/api/queues/{vhost}/{name}", objects.put_queue),
            web.delete("/api/queues/{vhost}/{name}", objects.delete_queue),
            web.get("/api/exchanges/{vhost}/{name}", objects.get_exchange),
            web.put("/api/exchanges/{vhost}/{name}", objects.put_exchange),
            web.delete("/api/exchanges/{vhost}/{name}", objects.delete_exchange),
            web.route("*", UNROUTED, unrouted),  # last: 404 or 405, answered without a cycle
        ]

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
            # aiohttp's router's own (for a target UNROUTED misses: "OPTIONS *") stays
            # with the request (its match info); its traceback's frames hold the request
            exc.__traceback__ = None
            headers = {k: v for k, v in exc.headers.items() if k.lower() in ("allow",)}
            reason = exc.reason
            if exc.status in (404, 405):
                reason = routing_reason(request, exc.status)
            return error_response(exc.status, reason, headers=headers)
        except asyncio.CancelledError:
            raise
        except Exception:
            self.log.exception(
                "management_request_failed", method=request.method, path=request.path
            )
            return error_response(500, "internal error (see the broker log)")


def create_app(broker: ManagedBroker) -> web.Application:
    """The management application for ``broker`` (also used by tests with a TestServer)."""
    api = ManagementApi(broker)
    app = web.Application(
        middlewares=[api.errors, api.origin_guard.middleware, api.auth.middleware]
    )
    app.add_routes(api.routes())
    api.console.attach(app)
    return app


async def start_management(broker: ManagedBroker, interface: str, port: int) -> web.AppRunner:
    """Serve the management API on ``interface:port`` (each address of a comma-separated
    list); return the runner to clean up.

    :raises broker.listen.ListenError: an address could not be bound.

    With ``port`` 0 the system picks a free port, written back to ``broker.mgmt_port``.
    """
    runner = web.AppRunner(
        create_app(broker), access_log=None, logger=http_logger(get_logger("management"))
    )
    await runner.setup()
    try:
        security = getattr(broker, "security", None)  # HTTPS per --mgmt-ssl
        tls = None if security is None else security.mgmt_ssl()
        # every address of --mgmt-interface on one port (broker.listen: IPv6 and IPv4)
        what, names = "management API", "--mgmt-interface/--mgmt-port"
        for sock in open_sockets(what, names, interface, port):
            await web.SockSite(runner, sock, ssl_context=tls).start()
    except BaseException:
        await runner.cleanup()
        raise
    for address in runner.addresses:
        if isinstance(address, tuple) and len(address) >= 2:
            broker.mgmt_port = int(address[1])
            break
    return runner
