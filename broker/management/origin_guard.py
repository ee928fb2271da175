"""No way in through the browser: a change asked by a page of another site is refused.

:Status: Beta

A browser that logged in to the API with HTTP Basic (the API's ``WWW-Authenticate``
challenge invites it) sends those credentials again with every later request to this
origin, also when a page of another site submits a form to it. Without this guard such a
page could publish as that user, or stop the broker (``POST /api/admin/stop``). The
console's own cookie is ``SameSite=Strict`` and its changes need its header
(:data:`broker.management.console.sessions.CSRF_HEADER`); this guard covers Basic
credentials, and the console too.

Contract
========

:func:`cross_site_reason` is a pure decision over a request's method and headers:

- A request that cannot change anything (``GET``, ``HEAD``, ``OPTIONS``) passes, except a
  WebSocket upgrade, which is judged as a change (a page of another site must not read the
  live feed with the browser's credentials).
- A browser names where a request comes from: ``Sec-Fetch-Site`` (Chromium, Firefox 90,
  Safari 16.4 and later; no page can set it) and ``Origin`` (every browser, on every POST,
  PUT and DELETE). When ``Sec-Fetch-Site`` is sent it decides: a change passes only when it
  is ``same-origin`` or ``none`` (typed by the user); ``same-site`` is refused (another port
  of the same host is another origin, and any page served there could act). Without it, a
  change passes only when ``Origin``, if sent, is this API's own origin (its ``Host``). The
  console's pages send ``Referrer-Policy: no-referrer``, under which a browser names their
  own form posts' origin ``null``: ``Sec-Fetch-Site`` tells those apart.
- A request with neither header passes: it comes from a program, not a page (``qpid-ha``,
  the agents of any version, the OCF script, curl, Prometheus). A browser always sends at
  least ``Origin`` with a cross-origin form POST, whatever its ``Content-Type``.

The refusal is a 403 naming the origin, before any credentials are checked (so whatever
they are, and without a password hash), and one ``management_cross_site_refused`` event.
The middleware runs after the error middleware (:mod:`broker.management.api`), before
authentication (:mod:`broker.management.auth`).
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit

from aiohttp import web
from structlog.typing import FilteringBoundLogger

from broker.management.auth import Handler
from broker.management.errors import ApiError

__all__ = ["OriginGuard", "cross_site_reason"]

#: Methods that change nothing (RFC 9110's safe methods).
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: ``Sec-Fetch-Site`` values of a request this API's own pages (or the user) made.
OWN_FETCH_SITES = frozenset({"same-origin", "none"})

_DEFAULT_PORTS = {"http": "80", "https": "443"}


def _host_port(netloc: str, scheme: str) -> str:
    """``host:port`` in lower case, with the scheme's default port written out."""
    netloc = netloc.strip().lower()
    if netloc.startswith("["):  # an IPv6 address: [::1]:8672
        address, _, rest = netloc.partition("]")
        host, port = address + "]", rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port = netloc.partition(":")
    port = port or _DEFAULT_PORTS.get(scheme, "")
    return f"{host}:{port}"


def cross_site_reason(method: str, headers: Mapping[str, str], host: str) -> str | None:
    """Why a request whose ``Host`` is ``host`` is refused as coming from another site's
    page, or None when it may go on (see the module's contract)."""
    upgrade = headers.get("Upgrade", "").lower() == "websocket"
    if method.upper() in SAFE_METHODS and not upgrade:
        return None
    fetch_site = headers.get("Sec-Fetch-Site")
    if fetch_site is not None:  # the browser's own word, which no page can set: it decides
        if fetch_site.strip().lower() in OWN_FETCH_SITES:
            return None
        named = headers.get("Origin", "an unnamed origin")
        return f"a page of another site ({named[:100]}, Sec-Fetch-Site: {fetch_site.strip()[:40]})"
    origin = headers.get("Origin")
    if origin is None:
        return None
    parts = urlsplit(origin.strip())
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.netloc:
        return f"a page of another origin ({origin.strip()[:100]})"
    if _host_port(parts.netloc, scheme) != _host_port(host, scheme):
        return f"a page of another origin ({origin.strip()[:100]})"
    return None


class OriginGuard:
    """The middleware of :func:`cross_site_reason`, bound to the management log."""

    def __init__(self, log: FilteringBoundLogger) -> None:
        self.log = log

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        reason = cross_site_reason(request.method, request.headers, request.host)
        if reason is None:
            return await handler(request)
        self.log.warning(
            "management_cross_site_refused",
            method=request.method,
            path=request.path,
            origin=request.headers.get("Origin"),
            fetch_site=request.headers.get("Sec-Fetch-Site"),
            peer=request.remote,
        )
        raise ApiError(
            403,
            f"{request.method} {request.path} refused: asked by {reason}. Changes are taken"
            " from this API's own pages (the console) and from programs (qpid-ha, curl), never"
            " from another site's page, whatever the credentials",
        )
