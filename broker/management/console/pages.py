"""The console's pages: login, logout, the page itself and its static files.

:Status: Beta

- ``GET /console/login`` is the only page an anonymous visitor gets (the form and its
  style sheet, no data). ``POST /console/login`` (form ``user``, ``password``) checks them
  with the broker's authenticator; a user without a management role is refused like a wrong
  password (one message for both). A success sets the session cookie and redirects to
  ``/console/``; a failure answers the form again with 401 and logs
  ``console_login_failed``.
- ``GET /console/`` and ``/console/static/*`` need a session (else a redirect to the login
  page); ``POST /console/logout`` ends it. With authentication off (``--auth no``) the
  console is open, as the API is.

Static files are read from the package (``static/``) at start; nothing comes from the
network. Every answer carries a strict Content-Security-Policy (scripts and styles from
this origin only) and ``X-Frame-Options: DENY``.
"""

from __future__ import annotations

import html
from http import HTTPStatus
from importlib import resources
from typing import Any

from aiohttp import web
from structlog.typing import FilteringBoundLogger

from broker.listen import unmapped
from broker.management.console.sessions import COOKIE, CSRF_HEADER, SessionStore
from broker.management.errors import ApiError
from broker.management.managed import ManagedBroker
from broker.security.password_checks import authenticate
from broker.security.sasl import AuthenticationError

__all__ = ["STATIC_FILES", "Pages"]

#: File name -> content type of what ``static/`` holds.
STATIC_FILES = {
    "console.js": "text/javascript",
    "cluster.js": "text/javascript",
    "console.css": "text/css",
    "charts.js": "text/javascript",
    "tables.js": "text/javascript",
    "lists.js": "text/javascript",
    "queue_page.js": "text/javascript",
    "overview.js": "text/javascript",
    "activity.js": "text/javascript",
    "admin.js": "text/javascript",
    "login.css": "text/css",
}
#: Why the page sent its viewer back to the login form (``?ended=``).
_ENDED = {
    "session": "Your session ended: this broker no longer knows it (it restarted, and"
    " sessions live in its memory, or you logged out elsewhere). Log in again.",
}

#: Served without a session (the login form's style).
_PUBLIC = frozenset({"login.css"})

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
        " connect-src 'self'; frame-ancestors 'none'; form-action 'self'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}

_MAX_FIELD = 1024


def _redirect(status: int, location: str) -> web.Response:
    """A redirect as aiohttp answers a raised ``HTTPFound`` (302) or ``HTTPSeeOther`` (303),
    returned instead: raised, its traceback keeps the frames that hold the request, in a
    reference cycle with it (~40 objects a request that only the cyclic collector frees)."""
    return web.Response(
        status=status,
        body=f"{status}: {HTTPStatus(status).phrase}".encode(),
        headers={"Content-Type": "text/plain; charset=utf-8", "Location": location},
    )


def _see_other(location: str) -> web.Response:
    return web.Response(status=303, headers={"Location": location, **SECURITY_HEADERS})


def _read(name: str) -> bytes:
    return (resources.files(__package__) / "static" / name).read_bytes()


class Pages:
    """The page handlers, bound to one broker and its session store."""

    def __init__(
        self, broker: ManagedBroker, sessions: SessionStore, log: FilteringBoundLogger
    ) -> None:
        self.broker = broker
        self.sessions = sessions
        self.log = log
        self.files = {name: _read(name) for name in STATIC_FILES}
        self.index = _read("index.html")
        self.login_form = _read("login.html").decode("utf-8")

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/console", self.redirect_index),
            web.get("/console/", self.page),
            web.get("/console/login", self.login_page),
            web.post("/console/login", self.login),
            web.post("/console/logout", self.logout),
            web.get("/console/static/{file}", self.static),
        ]

    # sessions --------------------------------------------------------------------------
    @property
    def cookie(self) -> str:
        """The cookie's name, with this API's port: browsers keep cookies by host, not by
        port, and members on one host must not overwrite each other's sessions."""
        return f"{COOKIE}_{self.broker.mgmt_port}"

    def user(self, request: web.Request) -> str | None:
        """The session's user; ``""`` when authentication is off (no login needed)."""
        if not self.broker.options.auth:
            return ""
        return self.sessions.user_of(request.cookies.get(self.cookie))

    def cookie_user(self, request: web.Request) -> str | None:
        """For the API's authentication: the user of the session cookie, if any.

        :raises ApiError: 403 for a change made with the cookie but without the console's
            header (a cross-site form cannot send it).
        """
        user = self.sessions.user_of(request.cookies.get(self.cookie))
        if user is None:
            return None
        if request.method not in ("GET", "HEAD") and request.headers.get(CSRF_HEADER) != "1":
            raise ApiError(403, f"a change made from the console needs the {CSRF_HEADER} header")
        return user

    # pages -----------------------------------------------------------------------------
    async def redirect_index(self, request: web.Request) -> web.StreamResponse:
        return _redirect(302, "/console/")

    async def page(self, request: web.Request) -> web.StreamResponse:
        if self.user(request) is None:
            return _redirect(303, "/console/login")
        return web.Response(
            body=self.index, content_type="text/html", charset="utf-8", headers=SECURITY_HEADERS
        )

    async def static(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["file"]
        if name not in STATIC_FILES:
            raise ApiError(404, f"no such console file: {name[:100]!r}")
        if name not in _PUBLIC and self.user(request) is None:
            raise ApiError(401, "log in to the console first")
        return web.Response(
            body=self.files[name], content_type=STATIC_FILES[name], headers=SECURITY_HEADERS
        )

    def _form(self, message: str = "", user: str = "", status: int = 200) -> web.Response:
        text = self.login_form.replace("{{message}}", html.escape(message)).replace(
            "{{user}}", html.escape(user, quote=True)
        )
        return web.Response(
            text=text,
            status=status,
            content_type="text/html",
            charset="utf-8",
            headers=SECURITY_HEADERS,
        )

    async def login_page(self, request: web.Request) -> web.StreamResponse:
        if not self.broker.options.auth:
            return _redirect(303, "/console/")
        # the page's session ended under it: said, not a bare form (a fixed text, never
        # the query's)
        return self._form(_ENDED.get(request.query.get("ended", ""), ""))

    async def login(self, request: web.Request) -> web.StreamResponse:
        if not self.broker.options.auth:
            return _redirect(303, "/console/")
        form: Any = await request.post()
        user = form.get("user", "")
        password = form.get("password", "")
        if not isinstance(user, str) or not isinstance(password, str):
            return self._form("user and password must be text", status=400)
        if not user or len(user) > _MAX_FIELD or len(password) > _MAX_FIELD:
            return self._form("give a user name and a password", user[:_MAX_FIELD], 400)
        authenticator = self.broker.context.authenticator
        try:
            name = await authenticate(  # the back-off, then the hash off the event loop
                authenticator,
                "PLAIN",
                b"\0" + user.encode() + b"\0" + password.encode(),
                unmapped(request.remote or ""),
            )
            if not authenticator.roles(name):
                raise AuthenticationError(f"user {name!r} has no management role")
        except AuthenticationError as exc:
            self.log.info("console_login_failed", user=user, peer=request.remote, reason=str(exc))
            return self._form("wrong user or password, or no management role", user, 401)
        token = self.sessions.create(name)
        roles = sorted(role.value for role in authenticator.roles(name))
        self.log.info("console_login", user=name, peer=request.remote, roles=roles)
        response = _see_other("/console/")
        response.set_cookie(
            self.cookie, token, httponly=True, samesite="Strict", path="/", secure=request.secure
        )
        return response

    async def logout(self, request: web.Request) -> web.StreamResponse:
        user = self.sessions.end(request.cookies.get(self.cookie))
        if user is not None:
            self.log.info("console_logout", user=user)
        response = _see_other("/console/login")
        response.del_cookie(self.cookie, path="/")
        return response
