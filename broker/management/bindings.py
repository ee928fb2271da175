"""The binding endpoints: add and remove a binding, and a queue's bindings (RabbitMQ's paths).

Contract
========

- ``POST /api/bindings/{vhost}/e/{source}/q/{queue}`` ``{"routing_key": K, "arguments":
  {...}}``: bind the queue to the exchange (``queue.bind``); ``.../e/{destination}``
  instead of ``q``: an exchange-to-exchange binding (``exchange.bind``). Answers 201 with
  ``Location`` naming the binding's path (its ``properties_key``), once the backups and
  the store have it, as bind-ok does; binding what is bound already is 201 too (RabbitMQ).
  Logs ``binding_created``.
- ``DELETE /api/bindings/{vhost}/e/{source}/q/{queue}/{properties_key}`` (or ``e`` for an
  exchange): remove the binding whose ``properties_key`` (:func:`properties_key`, shown by
  every binding in ``GET /api/bindings``) is named; 404 if there is none. Answers 204 once
  the backups and the store have it. Logs ``binding_deleted``.
- ``GET /api/queues/{vhost}/{name}/bindings``: the queue's bindings, the default
  exchange's first (RabbitMQ lists it), each as ``GET /api/bindings`` shows it.

The default exchange (``amq.default`` in a path) takes no binding (403, as AMQP refuses
it). Changes on an HA backup are 409, naming the primary. A missing vhost, exchange or
queue is 404; bad input a 400 naming the field.
"""

from __future__ import annotations

from collections.abc import Iterable
from http import HTTPStatus
from urllib.parse import quote

from aiohttp import web
from structlog.typing import FilteringBoundLogger

from broker.core.errors import AmqpError
from broker.core.exchange import Binding
from broker.core.vhost import VirtualHost
from broker.management.auth import current_user
from broker.management.errors import ApiError, amqp_api_error
from broker.management.managed import ManagedBroker, refuse_on_backup, replicated, vhosts_of
from broker.management.request_input import Body, read_json_object
from broker.management.responses import json_response
from broker.management.views import binding_view, properties_key

__all__ = ["BindingEndpoints", "properties_key"]

_KINDS = {"q": "queue", "e": "exchange"}
_DEFAULT = "amq.default"


class BindingEndpoints:
    """Add, remove and list bindings; bound to one broker."""

    def __init__(self, broker: ManagedBroker, log: FilteringBoundLogger) -> None:
        self.broker = broker
        self.log = log

    def routes(self) -> list[web.RouteDef]:
        where = "/api/bindings/{vhost}/e/{source}/{kind:[qe]}/{destination}"
        return [
            web.post(where, self.create),
            web.delete(where + "/{props}", self.delete),
            web.get("/api/queues/{vhost}/{name}/bindings", self.queue_bindings),
        ]

    def _vhost(self, request: web.Request) -> VirtualHost:
        name = request.match_info["vhost"]
        vhost = vhosts_of(self.broker).get(name)
        if vhost is None:
            raise ApiError(HTTPStatus.NOT_FOUND, f"NOT_FOUND - no vhost '{name}'")
        return vhost

    @staticmethod
    def _ends(request: web.Request) -> tuple[str, str, str]:
        """(source, destination kind, destination) of the path; the default exchange takes
        no binding."""
        source = request.match_info["source"]
        kind = _KINDS[request.match_info["kind"]]
        destination = request.match_info["destination"]
        if source in ("", _DEFAULT) or (kind == "exchange" and destination in ("", _DEFAULT)):
            raise ApiError(
                HTTPStatus.FORBIDDEN,
                "ACCESS_REFUSED - operation not permitted on the default exchange",
            )
        return source, kind, destination

    def _audit(self, event: str, vhost: str, source: str, kind: str, dest: str, key: str) -> None:
        self.log.info(
            event,
            vhost=vhost,
            source=source,
            destination=dest,
            destination_type=kind,
            routing_key=key,
            via="management",
            user=current_user.get(),
        )

    async def create(self, request: web.Request) -> web.Response:
        refuse_on_backup(self.broker)
        source, kind, destination = self._ends(request)
        body = Body(await read_json_object(request), ("routing_key", "arguments"))
        key = body.string("routing_key", "")
        arguments = body.table("arguments")
        if len(key.encode("utf-8")) > 255:
            raise ApiError(400, "field 'routing_key' is longer than 255 bytes")
        vhost = self._vhost(request)
        try:
            if kind == "queue":
                binding = vhost.bind(destination, source, key, arguments)
            else:
                binding = vhost.bind_exchange(destination, source, key, arguments)
        except AmqpError as exc:
            raise amqp_api_error(exc) from None
        await replicated(self.broker)  # as bind-ok
        self._audit("binding_created", vhost.name, source, kind, destination, key)
        view = binding_view(binding)
        response = json_response(view, 201)
        kind_letter = request.match_info["kind"]
        parts = (vhost.name, source, kind_letter, destination, view["properties_key"])
        where = "/api/bindings/{}/e/{}/{}/{}/{}".format(*(_quote(part) for part in parts))
        response.headers["Location"] = where
        return response

    async def delete(self, request: web.Request) -> web.Response:
        refuse_on_backup(self.broker)
        source, kind, destination = self._ends(request)
        props = request.match_info["props"]
        vhost = self._vhost(request)
        exchange = vhost.exchanges.get(source)
        found = _find(exchange.bindings.values() if exchange else (), kind, destination, props)
        if found is None:
            raise ApiError(
                HTTPStatus.NOT_FOUND,
                f"NOT_FOUND - no binding {props!r} from exchange '{source}' to {kind}"
                f" '{destination}' in vhost '{vhost.name}'",
            )
        try:
            if kind == "queue":
                vhost.unbind(destination, source, found.routing_key, found.arguments)
            else:
                vhost.unbind_exchange(destination, source, found.routing_key, found.arguments)
        except AmqpError as exc:
            raise amqp_api_error(exc) from None
        await replicated(self.broker)  # as unbind-ok
        self._audit("binding_deleted", vhost.name, source, kind, destination, found.routing_key)
        return web.Response(status=204)

    async def queue_bindings(self, request: web.Request) -> web.Response:
        vhost = self._vhost(request)
        try:
            queue = vhost.queue(request.match_info["name"])
        except AmqpError as exc:
            raise amqp_api_error(exc) from None
        default = {
            "source": "",
            "vhost": vhost.name,
            "destination": queue.name,
            "destination_type": "queue",
            "routing_key": queue.name,
            "arguments": {},
            "properties_key": properties_key(queue.name, {}),
        }
        mine = sorted(
            (b for b in vhost.bindings() if _to(b, "queue", queue.name)),
            key=lambda b: (b.exchange, b.routing_key),
        )
        return json_response([default, *(binding_view(b) for b in mine)])


def _to(binding: Binding, kind: str, name: str) -> bool:
    return binding.destination_type == kind and binding.destination.name == name


def _find(bindings: Iterable[Binding], kind: str, destination: str, props: str) -> Binding | None:
    for binding in bindings:
        if _to(binding, kind, destination) and (
            properties_key(binding.routing_key, binding.arguments) == props
        ):
            return binding
    return None


def _quote(text: str) -> str:
    return quote(text, safe="~")  # "/" too: a vhost named "/" is %2F
