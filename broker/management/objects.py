"""The object endpoints: queues, exchanges, bindings and connections.

``/api/queues[/{name}]`` and ``/api/exchanges[/{name}]`` (GET, PUT to declare, DELETE
with ``if_unused``/``if_empty``), ``GET /api/bindings`` and ``GET /api/connections``.
Every list takes the query parameters of :mod:`broker.management.list_query` (filter,
sort, page, columns: RabbitMQ's), answered by :func:`broker.management.lists.list_response`.
An object in a vhost other than ``/`` is ``/api/queues/{vhost}/{name}`` (RabbitMQ's path;
``/`` is ``%2F`` there); the lists show every vhost's objects, each with its ``vhost``,
or one vhost's with ``?vhost=NAME``; a vhost that does not exist is a 404.
Changes (PUT, DELETE) on a backup of an HA cluster are 409: its objects come from the
primary. Handlers only translate HTTP into calls on the core's
:class:`~broker.core.vhost.VirtualHost` and back (:mod:`broker.management.views` for the
shapes); they keep no state. A declare answers 201 when it created the object and 200 when
it existed; a failed delete condition (406 PRECONDITION_FAILED) is a 409. Every change is
logged (``queue_declared``, ``queue_deleted``, ``exchange_declared``, ``exchange_deleted``)
with ``via="management"`` and the user (:data:`broker.management.auth.current_user`).
The default exchange (named "") is addressed as :data:`DEFAULT_EXCHANGE_ALIAS`.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping
from typing import Any, TypeVar

from aiohttp import web
from structlog.typing import FilteringBoundLogger

from broker.core.errors import AmqpError
from broker.core.vhost import VHOST, VirtualHost
from broker.management.auth import current_user
from broker.management.errors import ApiError, amqp_api_error
from broker.management.lists import BINDINGS, CONNECTIONS, EXCHANGES, QUEUES, list_response
from broker.management.managed import ManagedBroker, refuse_on_backup, replicated, vhosts_of
from broker.management.request_input import Body, check_name, query_flag, read_json_object
from broker.management.responses import json_response
from broker.management.views import (
    NO_RATES,
    binding_view,
    connection_view,
    exchange_view,
    queue_view,
)

#: How the default exchange (named "") is addressed in a path, as in RabbitMQ.
DEFAULT_EXCHANGE_ALIAS = "amq.default"

_T = TypeVar("_T")


class ObjectEndpoints:
    """The queue, exchange, binding and connection handlers, bound to one broker."""

    def __init__(
        self,
        broker: ManagedBroker,
        log: FilteringBoundLogger,
        connection_rates: Callable[[int], Mapping[str, float]] = lambda _id: NO_RATES,
    ) -> None:
        self.broker = broker
        self.log = log
        #: a connection's byte rates (the console sampler's, by connection id)
        self.connection_rates = connection_rates

    def _audit(self, event: str, **fields: Any) -> None:
        """Log a change made through the API, naming who made it."""
        self.log.info(event, **fields, via="management", user=current_user.get())

    async def _declared(
        self, existed: bool, view: dict[str, Any], event: str, **fields: Any
    ) -> web.Response:
        """The answer to a declare: 200 if the object existed, else 201 and ``event``; once
        the backups and the store have it (:func:`~broker.management.managed.replicated`)."""
        await replicated(self.broker)
        if not existed:
            self._audit(event, **fields)
        return json_response(view, 200 if existed else 201)

    def _vhost(self, request: web.Request) -> VirtualHost:
        """The vhost a path names (``/`` when it names none); 404 if there is none."""
        return self._named_vhost(request.match_info.get("vhost", VHOST))

    def _named_vhost(self, name: str) -> VirtualHost:
        vhost = vhosts_of(self.broker).get(name)
        if vhost is None:
            raise ApiError(404, f"NOT_FOUND - no vhost '{name}'")
        return vhost

    def _listed(self, request: web.Request) -> list[VirtualHost]:
        """The vhosts a list shows: ``?vhost=NAME``, else all of them."""
        name = request.query.get("vhost")
        return list(vhosts_of(self.broker)) if name is None else [self._named_vhost(name)]

    def _delete(
        self,
        kind: str,
        name: str,
        vhost: VirtualHost,
        present: Container[str],
        delete: Callable[[], _T],
    ) -> _T:
        """``delete()`` an object known to be ``present``: 404 if not, 409 if a condition
        (if-unused, if-empty) does not hold."""
        if name not in present:
            raise ApiError(404, f"NOT_FOUND - no {kind} '{name}' in vhost '{vhost.name}'")
        try:
            return delete()
        except AmqpError as exc:
            raise amqp_api_error(exc, precondition=409) from None

    # queues -----------------------------------------------------------------------------
    async def list_queues(self, request: web.Request) -> web.Response:
        queues = sorted(
            (q for vhost in self._listed(request) for q in vhost.queues.values()),
            key=lambda q: (q.vhost != VHOST, q.vhost, q.name),
        )
        return await list_response(request, QUEUES, queues, queue_view)

    async def get_queue(self, request: web.Request) -> web.Response:
        return json_response(queue_view(self._vhost(request).queue(request.match_info["name"])))

    async def put_queue(self, request: web.Request) -> web.Response:
        refuse_on_backup(self.broker)
        name = check_name("queue", request.match_info["name"])
        body = Body(await read_json_object(request), ("durable", "auto_delete", "arguments"))
        durable = body.flag("durable")
        auto_delete = body.flag("auto_delete")
        arguments = body.table("arguments")
        vhost = self._vhost(request)
        existed = name in vhost.queues
        queue = vhost.declare_queue(
            name, durable=durable, auto_delete=auto_delete, arguments=arguments
        )
        return await self._declared(
            existed,
            queue_view(queue),
            "queue_declared",
            queue=name,
            vhost=vhost.name,
            durable=durable,
            auto_delete=auto_delete,
        )

    async def delete_queue(self, request: web.Request) -> web.Response:
        refuse_on_backup(self.broker)
        name = request.match_info["name"]
        if_unused = query_flag(request, "if_unused")
        if_empty = query_flag(request, "if_empty")
        vhost = self._vhost(request)
        count = self._delete(
            "queue",
            name,
            vhost,
            vhost.queues,
            lambda: vhost.delete_queue(name, if_unused=if_unused, if_empty=if_empty),
        )
        await replicated(self.broker)  # as delete-ok
        self._audit("queue_deleted", queue=name, vhost=vhost.name, messages=count)
        return json_response({"name": name, "vhost": vhost.name, "messages_deleted": count})

    # exchanges --------------------------------------------------------------------------
    @staticmethod
    def _exchange_name(request: web.Request) -> str:
        name = request.match_info["name"]
        return "" if name == DEFAULT_EXCHANGE_ALIAS else name

    async def list_exchanges(self, request: web.Request) -> web.Response:
        exchanges = sorted(
            (e for vhost in self._listed(request) for e in vhost.exchanges.values()),
            key=lambda e: (e.vhost != VHOST, e.vhost, e.name),
        )
        return await list_response(request, EXCHANGES, exchanges, exchange_view)

    async def get_exchange(self, request: web.Request) -> web.Response:
        return json_response(
            exchange_view(self._vhost(request).exchange(self._exchange_name(request)))
        )

    async def put_exchange(self, request: web.Request) -> web.Response:
        refuse_on_backup(self.broker)
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
        vhost = self._vhost(request)
        existed = name in vhost.exchanges
        exchange = vhost.declare_exchange(
            name,
            type_,
            durable=durable,
            auto_delete=auto_delete,
            internal=internal,
            arguments=arguments,
        )
        return await self._declared(
            existed,
            exchange_view(exchange),
            "exchange_declared",
            exchange=name,
            vhost=vhost.name,
            type=type_,
            durable=durable,
        )

    async def delete_exchange(self, request: web.Request) -> web.Response:
        refuse_on_backup(self.broker)
        name = self._exchange_name(request)
        if_unused = query_flag(request, "if_unused")
        vhost = self._vhost(request)
        self._delete(
            "exchange",
            name,
            vhost,
            vhost.exchanges,
            lambda: vhost.delete_exchange(name, if_unused=if_unused),
        )
        await replicated(self.broker)  # as delete-ok
        self._audit("exchange_deleted", exchange=name, vhost=vhost.name)
        return json_response({"name": name, "vhost": vhost.name})

    # bindings and connections -----------------------------------------------------------
    async def list_bindings(self, request: web.Request) -> web.Response:
        bindings = sorted(
            (b for vhost in self._listed(request) for b in vhost.bindings()),
            key=lambda b: (
                b.destination.vhost != VHOST,
                b.destination.vhost,
                b.exchange,
                b.destination_type,
                b.destination.name,
                b.routing_key,
            ),
        )
        return await list_response(request, BINDINGS, bindings, binding_view)

    async def list_connections(self, request: web.Request) -> web.Response:
        ctx = self.broker.context
        both = [*ctx.connections.values(), *ctx.connections_1_0.values()]
        connections = sorted(both, key=lambda c: c.id)
        rates = self.connection_rates
        return await list_response(
            request, CONNECTIONS, connections, lambda c: connection_view(c, rates(c.id))
        )
