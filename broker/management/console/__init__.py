"""The web console: the cluster at a glance, served by every member's management API.

:Status: Beta

An operator's pages (``docs/console.md``): the cluster (members, states, epochs, in-sync,
lag per queue), the fail-over timeline, queues, exchanges and bindings, connections and
users, with actions by role. Everything is served by the management app itself, from
files shipped in this package (``static/``: no CDN, nothing from the network), over the
same TLS as the API.

Parts, one concept each:

- :mod:`~broker.management.console.sessions`: logins and the session cookie (pure);
- :mod:`~broker.management.console.pages`: the login form, the page, its static files;
- :mod:`~broker.management.console.live`: the sampler and the ``/api/console/live``
  server-sent events;
- :mod:`~broker.management.console.samples`: what the sampler read, tick after tick:
  rates and histories per queue, each backup's lags (pure);
- :mod:`~broker.management.console.ha_view`: what the pages add to ``/api/ha`` (lag in
  bytes, the managing agent);
- :mod:`~broker.management.console.timeline`: the fail-overs this broker saw, in the
  phases of :mod:`common.failover_phases` (pure);
- :mod:`~broker.management.console.actions`: purge, test messages, users.

:class:`Console` ties them to one management app (:func:`broker.management.api.create_app`):
its routes, its start and stop, and the cookie check the API's authentication asks for.
"""

from __future__ import annotations

from aiohttp import web
from structlog.typing import FilteringBoundLogger

from broker.management.console.actions import ActionEndpoints
from broker.management.console.live import LiveFeed
from broker.management.console.pages import Pages
from broker.management.console.sessions import CSRF_HEADER, SessionStore
from broker.management.managed import ManagedBroker

__all__ = ["Console"]


class Console:
    """The console of one broker's management app."""

    def __init__(self, broker: ManagedBroker, log: FilteringBoundLogger) -> None:
        self.sessions = SessionStore()
        self.pages = Pages(broker, self.sessions, log)
        self.live = LiveFeed(broker, log)
        self.actions = ActionEndpoints(broker, log)

    def routes(self) -> list[web.RouteDef]:
        return [
            *self.pages.routes(),
            web.get("/api/console/live", self.live.stream),
            web.get("/api/changes", self.live.changes),
            web.get("/api/console/history", self.live.history),
            *self.actions.routes(),
        ]

    def attach(self, app: web.Application) -> None:
        """Start the sampler with the app, wake the streams at its shutdown, stop after."""
        app.on_startup.append(self.live.start)
        app.on_shutdown.append(self.live.shutdown)
        app.on_cleanup.append(self.live.stop)

    # what the API's authentication asks (broker.management.auth.CookieSessions) ----------
    def cookie_user(self, request: web.Request) -> str | None:
        return self.pages.cookie_user(request)

    def is_console(self, request: web.Request) -> bool:
        """A request the console's page made (its header, or its cookie even when the
        session ended): a 401 then carries no Basic challenge, so the browser shows no
        password dialog."""
        return request.headers.get(CSRF_HEADER) == "1" or self.pages.cookie in request.cookies
