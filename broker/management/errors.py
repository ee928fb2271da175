"""The management API's errors: one exception, one JSON shape, one AMQP-to-HTTP mapping.

Contract: every error is answered as a JSON object ``{"error": ..., "reason": ...}``
(:func:`error_response`), with ``reply_code`` added when the core's AMQP reply code is the
cause. ``error`` is the HTTP status phrase as a slug (``not_found``, ``conflict``...).
Handlers raise :class:`ApiError`; an :class:`~broker.core.errors.AmqpError` from the core
becomes one through :func:`amqp_api_error` (status from :func:`http_status`). The
middleware that turns them into responses is :meth:`broker.management.api.ManagementApi.errors`.

What no route takes is answered by :func:`unrouted`, the last route (:data:`UNROUTED`),
not by aiohttp's router: a 404 or 405 returned, never raised, so that the request leaves
no reference cycle (a broker freezes its heap, ``broker.collector``, and a cycle frozen
is kept for good).
"""

from __future__ import annotations

from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

from aiohttp import web

from broker.core.errors import AmqpError, ReplyCode
from broker.management.responses import json_response


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


#: The last route's path: every path no other route takes (any method).
UNROUTED = "/{path:.*}"


async def unrouted(request: web.Request) -> web.StreamResponse:
    """404, or 405 naming the methods the path's routes take: aiohttp's router's answers,
    with the same ``Allow`` header, returned instead of raised.

    aiohttp's own (a ``MatchInfoError``) holds its ``SystemRoute`` in a reference cycle
    (the route's handler is a method bound to it), and the exception it raises keeps in
    its traceback the frames that hold the request, which holds the exception: ~40
    objects a request that only the cyclic collector frees.
    """
    allowed: set[str] = set()
    for resource in request.app.router.resources():
        match, methods = await resource.resolve(request)
        if match is None:  # (this route itself matches: it adds nothing)
            allowed |= methods
    if allowed:
        reason = routing_reason(request, 405)
        return error_response(405, reason, headers={"Allow": ",".join(sorted(allowed))})
    return error_response(404, routing_reason(request, 404))


def routing_reason(request: web.Request, status: int) -> str:
    """The reason given for a path no route takes (404) or a method none of its routes
    takes (405)."""
    if status == 405:
        return f"method {request.method} not allowed on {request.path}"
    return f"no such resource: {request.method} {request.path}"


def _error_slug(status: int) -> str:
    try:
        return HTTPStatus(status).phrase.lower().replace(" ", "_").replace("-", "_")
    except ValueError:
        return "error"


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
