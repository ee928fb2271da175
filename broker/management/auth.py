"""Authentication of management requests: HTTP Basic, checked by the broker's SASL
authenticator as a PLAIN response.

Contract: with ``options.auth`` off every request passes and :data:`current_user` is
``None``. With it on, every request except those to :data:`OPEN_PATHS` (health checks and
scrapers) needs valid Basic credentials (on :data:`LOGIN_SHOWS_MORE`, ``/metrics``,
credentials are optional: checked when given, the handler shows more to a login), else
:class:`~broker.management.errors.ApiError` 401 with a ``WWW-Authenticate`` challenge; a
wrong password is logged (``management_auth_failed``). Then the user's roles must grant what
the request needs (:mod:`broker.security.roles`: monitoring reads, administrator changes
objects and connections, cluster-manager promotes, grants the lease, commits the in-sync set
and stops the broker), else 403 and ``management_access_denied``. The user is published in
:data:`current_user` for the handler of that request only, which names it in the events it
logs.

The web console (:mod:`broker.management.console`) serves its pages itself (a login page,
then only to a logged-in session), so paths under ``/console`` pass here; its requests to
the API carry its session cookie instead of Basic credentials (``sessions``), with the
same roles.

Runs inside the management app's middleware chain, after the error middleware
(:mod:`broker.management.api`), so its 401s are answered as JSON.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Protocol

from aiohttp import web
from structlog.typing import FilteringBoundLogger

from broker.listen import unmapped
from broker.management.errors import ApiError
from broker.management.managed import ManagedBroker
from broker.security.password_checks import authenticate
from broker.security.roles import Role, allows, required_permission
from broker.security.sasl import AuthenticationError

#: Paths served without credentials even when authentication is on.
OPEN_PATHS = frozenset({"/api/status", "/metrics"})
#: Open paths that show more to a login: credentials given there are checked (401 when
#: wrong, 403 without a management role), none give the anonymous view.
LOGIN_SHOWS_MORE = frozenset({"/metrics"})

REALM = "qpidd"

#: The authenticated user of the request being handled (None with authentication off).
#: aiohttp runs each request in its own task, so the value set by the middleware is seen
#: by the handler only.
current_user: ContextVar[str | None] = ContextVar("management_user", default=None)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class CookieSessions(Protocol):
    """:class:`broker.management.console.Console`: the user of a request's session cookie
    (None without one; ApiError 403 for a change without the console's header)."""

    def cookie_user(self, request: web.Request) -> str | None: ...

    def is_console(self, request: web.Request) -> bool: ...


class BasicAuth:
    """The authentication middleware, bound to one broker."""

    def __init__(
        self,
        broker: ManagedBroker,
        log: FilteringBoundLogger,
        sessions: CookieSessions | None = None,
    ) -> None:
        self.broker = broker
        self.log = log
        self.sessions = sessions

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """HTTP Basic, checked by the broker's authenticator, when ``options.auth`` is on."""
        user = None
        path = request.path
        console_page = path == "/console" or path.startswith("/console/")
        checked = path not in OPEN_PATHS or path in LOGIN_SHOWS_MORE
        if self.broker.options.auth and checked and not console_page:
            header = request.headers.get("Authorization")
            cookie_user = None
            if not header and self.sessions is not None:
                cookie_user = self.sessions.cookie_user(request)
                anonymous = cookie_user is None and path not in OPEN_PATHS
                if anonymous and self.sessions.is_console(request):
                    raise ApiError(401, "not logged in to the console (or the session ended)")
            if header or cookie_user is not None or path not in OPEN_PATHS:
                user = cookie_user or await self._authenticate(header, request.remote)
                self._authorize(user, request.method, path)
        token = current_user.set(user)
        try:
            return await handler(request)
        finally:
            current_user.reset(token)

    def _authorize(self, user: str, method: str, path: str) -> None:
        """403 unless one of ``user``'s roles grants what the request needs."""
        needed = required_permission(method, path)
        roles = self.broker.context.authenticator.roles(user)
        if allows(roles, needed):
            return
        granting = [role.value for role in Role if allows(frozenset({role}), needed)]
        self.log.warning(
            "management_access_denied",
            user=user,
            method=method,
            path=path,
            needed=needed.value,
            roles=sorted(role.value for role in roles),
        )
        raise ApiError(
            403,
            f"user {user!r} may not {method} {path}: that needs the role {' or '.join(granting)}",
        )

    async def _authenticate(self, header: str | None, remote: str | None) -> str:
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
            return await authenticate(  # the back-off, then the hash off the event loop
                self.broker.context.authenticator,
                "PLAIN",
                b"\0" + user + b"\0" + password,
                unmapped(remote or ""),  # an IPv4 client of a dual-stack socket as IPv4
            )
        except AuthenticationError:
            self.log.info("management_auth_failed", user=user.decode("utf-8", "replace"))
            raise ApiError(401, "invalid credentials", headers=challenge) from None
