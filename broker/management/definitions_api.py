"""Definitions export and import, as RabbitMQ's management API has them (issue 30).

Contract
========

- ``GET /api/definitions``: the broker's definitions in RabbitMQ's JSON
  (:mod:`broker.management.definitions`), a file RabbitMQ 3.10.8 imports: the cluster's
  users (RabbitMQ's salted SHA-256 hashes as imported in ``users``; this broker's scrypt,
  ``qpidd_password_hashing_scrypt``, which RabbitMQ cannot import, with their permissions
  in the ``qpidd_only`` section, imported here and passed over by RabbitMQ; the answer's
  ``X-Qpidd-Not-For-RabbitMQ`` header names them), vhosts, permissions, every queue but
  exclusive ones, every exchange but the built-in ones, every binding but the default
  exchange's, each vhost's limits (as RabbitMQ writes them: ``parameters`` of component
  ``vhost-limits``). A broker's own users (users file, default guest) are not in it:
  they are node-local.
  ``GET /api/definitions/{vhost}``: one vhost's queues, exchanges and bindings.
  ``?download=NAME`` answers it as an attachment named NAME (the console's button).
- ``POST /api/definitions`` (``/api/definitions/{vhost}``: into that vhost): the body is a
  definitions file. It is checked whole first: a bad one is 400 naming the field
  (``queues[2].durable: must be true or false``), an object in a vhost neither there nor
  in the file 400 naming it, and nothing changes. Then vhosts, users and permissions, exchanges,
  queues and bindings are made in that order (what exists and is equivalent is left as
  it is). A refusal on the way (an existing queue with other arguments: 406 as a declare
  would be) is 400 naming the item, what came before it stays imported. The answer:
  ``{"imported": {section: count}, "ignored": [...], "skipped": [...]}``: ``ignored``
  lists what this broker has no place for (policies, parameters other than RabbitMQ's
  ``vhost-limits``, topic permissions, a user's limits, a queue type other than classic,
  declared as classic), ``skipped`` the users that are
  this broker's own here (and their permissions).

Both need the administrator role (the export holds password hashes; a GET, yet not for
monitoring users); the import is 409 on a backup, answered once the backups have it all
(everything imported is replicated: objects as any declare, users and permissions on
replication format 4's ``users`` event). Logged: ``definitions_imported``.
"""

from __future__ import annotations

import asyncio
import urllib.parse
from http import HTTPStatus
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from structlog.typing import FilteringBoundLogger

from broker.core.errors import AmqpError
from broker.core.exchange import EXCHANGE
from broker.core.vhost import VHOST, VirtualHost
from broker.management.auth import current_user
from broker.management.definitions import (
    Definitions,
    DefinitionsError,
    export,
    left_for_qpidd,
    parse_text,
)
from broker.management.errors import ApiError
from broker.management.managed import ManagedBroker, refuse_on_backup, replicated, vhosts_of
from broker.management.responses import dumps_sliced
from broker.security.roles import Role
from common.version import __version__

#: Objects made between two turns of the event loop.
STEP = 500


class DefinitionsEndpoints:
    """The definitions handlers, bound to one broker."""

    def __init__(self, broker: ManagedBroker, log: FilteringBoundLogger) -> None:
        self.broker = broker
        self.log = log

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/api/definitions", self.get_definitions),
            web.get("/api/definitions/{vhost}", self.get_definitions),
            web.post("/api/definitions", self.post_definitions),
            web.post("/api/definitions/{vhost}", self.post_definitions),
        ]

    def _administrator(self) -> None:
        user = current_user.get()
        roles = self.broker.context.authenticator.roles(user) if user is not None else None
        if roles is not None and Role.ADMINISTRATOR not in roles:
            raise ApiError(
                HTTPStatus.FORBIDDEN,
                f"user {user!r} may not export or import definitions: that needs administrator",
            )

    def _vhost(self, name: str) -> VirtualHost:
        vhost = vhosts_of(self.broker).get(name)
        if vhost is None:
            raise ApiError(HTTPStatus.NOT_FOUND, f"NOT_FOUND - no vhost '{name}'")
        return vhost

    # -- export ------------------------------------------------------------------------
    async def get_definitions(self, request: web.Request) -> web.Response:
        self._administrator()
        one = request.match_info.get("vhost")
        vhosts = [self._vhost(one)] if one is not None else list(vhosts_of(self.broker))
        cluster = self.broker.context.authenticator.cluster_users

        def named(row: dict[str, Any], vhost: str) -> dict[str, Any]:
            return row if one is not None else {"vhost": vhost, **row}

        queues = [
            named(
                {
                    "name": q.name,
                    "durable": q.durable,
                    "auto_delete": q.auto_delete,
                    "arguments": dict(q.arguments),
                },
                v.name,
            )
            for v in vhosts
            for q in v.queues.values()
            if q.exclusive_owner is None
        ]
        exchanges = [
            named(
                {
                    "name": e.name,
                    "type": e.type,
                    "durable": e.durable,
                    "auto_delete": e.auto_delete,
                    "internal": e.internal,
                    "arguments": dict(e.arguments),
                },
                v.name,
            )
            for v in vhosts
            for e in v.exchanges.values()
            if not e.builtin and e.name and not e.name.startswith("amq.")
        ]
        bindings = [
            named(
                {
                    "source": b.exchange,
                    "destination": b.destination.name,
                    "destination_type": b.destination_type,
                    "routing_key": b.routing_key,
                    "arguments": dict(b.arguments),
                },
                v.name,
            )
            for v in vhosts
            for b in v.bindings()
            if b.exchange
        ]
        whole = one is None
        data = export(
            __version__,
            sorted((v.name for v in vhosts), key=lambda n: (n != VHOST, n)) if whole else None,
            sorted(cluster.users.values(), key=lambda u: u.name) if whole else None,
            [p for _, p in sorted(cluster.permissions.items())] if whole else None,
            queues,
            exchanges,
            bindings,
            cluster.limits.all() if whole else None,
        )
        text = await dumps_sliced(data)
        response = web.Response(text=text, content_type="application/json")
        left = left_for_qpidd(data)
        if left:  # the console's download names them too (header values are latin-1)
            names = ", ".join(urllib.parse.quote(n, safe="") for n in left)
            response.headers["X-Qpidd-Not-For-RabbitMQ"] = names
        download = request.query.get("download")
        if download:
            safe = "".join(c for c in download if c.isalnum() or c in "._-") or "definitions.json"
            response.headers["Content-Disposition"] = f'attachment; filename="{safe}"'
        return response

    # -- import ------------------------------------------------------------------------
    async def post_definitions(self, request: web.Request) -> web.Response:
        self._administrator()
        refuse_on_backup(self.broker)
        one = request.match_info.get("vhost")
        if one is not None:
            self._vhost(one)
        try:
            raw = await request.read()
        except (ConnectionError, EOFError, HttpProcessingError) as exc:
            raise ApiError(400, f"request body incomplete: {exc or type(exc).__name__}") from None
        try:
            definitions = parse_text(raw, one)
        except DefinitionsError as exc:
            raise ApiError(HTTPStatus.BAD_REQUEST, str(exc)) from None
        skipped = self._check(definitions)
        refuse_on_backup(self.broker)
        imported = await self._apply(definitions)
        await replicated(self.broker)
        self.log.info(
            "definitions_imported",
            vhost=one,
            imported=imported,
            ignored=len(definitions.ignored),
            skipped=len(skipped),
            user=current_user.get(),
        )
        return web.Response(
            text=await dumps_sliced(
                {"imported": imported, "ignored": definitions.ignored, "skipped": skipped}
            ),
            content_type="application/json",
        )

    def _check(self, definitions: Definitions) -> list[str]:
        """What the broker says of the file before anything changes: 400 naming an object
        in a vhost that will not exist or a permission of no user; the users that are this
        broker's own leave the file (with their permissions) and are listed."""
        authenticator = self.broker.context.authenticator
        vhosts = {v.name for v in vhosts_of(self.broker)} | set(definitions.vhosts)
        skipped: list[str] = []
        users = []
        for i, user in enumerate(definitions.users):
            if authenticator.is_own(user.name):
                skipped.append(
                    f"users[{i}] '{user.name}': this broker's own user (users file or the"
                    " default user) is kept; change it with qpid-ha users"
                )
            else:
                users.append(user)
        definitions.users = users
        known = set(authenticator.cluster_users.users) | {u.name for u in users}
        permissions = []
        for i, permission in enumerate(definitions.permissions):
            where = f"permissions[{i}]"
            if permission.vhost not in vhosts:
                raise ApiError(400, f"{where}.vhost: no vhost '{permission.vhost}'")
            if authenticator.is_own(permission.user):
                skipped.append(
                    f"{where} of '{permission.user}' in vhost '{permission.vhost}': this"
                    " broker's own user opens every vhost"
                )
            elif permission.user not in known:
                raise ApiError(400, f"{where}.user: no user '{permission.user}'")
            else:
                permissions.append(permission)
        definitions.permissions = permissions
        sections: list[tuple[str, list[str]]] = [
            ("exchanges", [e.vhost for e in definitions.exchanges]),
            ("queues", [q.vhost for q in definitions.queues]),
            ("bindings", [b.vhost for b in definitions.bindings]),
        ]
        for section, names in sections:
            for i, name in enumerate(names):
                if name not in vhosts:
                    raise ApiError(400, f"{section}[{i}].vhost: no vhost '{name}'")
        for name in definitions.limits:
            if name not in vhosts:
                raise ApiError(400, f"limits of vhost '{name}': no vhost '{name}'")
        return skipped

    async def _apply(self, definitions: Definitions) -> dict[str, int]:
        all_vhosts = vhosts_of(self.broker)
        for name in definitions.vhosts:
            all_vhosts.create(name)
        if definitions.users or definitions.permissions:
            self.broker.context.authenticator.cluster_users.update(
                definitions.users, definitions.permissions
            )
        done = 0

        async def step() -> None:
            nonlocal done
            done += 1
            if done % STEP == 0:
                await asyncio.sleep(0)  # the loop serves others between slices

        def vhost(name: str) -> VirtualHost:
            found = all_vhosts.get(name)
            assert found is not None  # checked, and vhosts are made on the primary only here
            return found

        def refused(where: str, name: str, exc: AmqpError) -> ApiError:
            return ApiError(
                400,
                f"{where} '{name}': {exc.reply_text} (the objects before it were imported)",
            )

        for i, e in enumerate(definitions.exchanges):
            try:
                vhost(e.vhost).declare_exchange(
                    e.name,
                    e.type,
                    durable=e.durable,
                    auto_delete=e.auto_delete,
                    internal=e.internal,
                    arguments=e.arguments,
                )
            except AmqpError as exc:
                raise refused(f"exchanges[{i}]", e.name, exc) from None
            await step()
        for i, q in enumerate(definitions.queues):
            try:
                vhost(q.vhost).declare_queue(
                    q.name, durable=q.durable, auto_delete=q.auto_delete, arguments=q.arguments
                )
            except AmqpError as exc:
                raise refused(f"queues[{i}]", q.name, exc) from None
            await step()
        for i, b in enumerate(definitions.bindings):
            try:
                if b.destination_type == EXCHANGE:
                    vhost(b.vhost).bind_exchange(
                        b.destination, b.source, b.routing_key, b.arguments
                    )
                else:
                    vhost(b.vhost).bind(b.destination, b.source, b.routing_key, b.arguments)
            except AmqpError as exc:
                raise refused(f"bindings[{i}]", b.source, exc) from None
            await step()
        if definitions.limits:  # last: the file's own queues are not refused by them
            self.broker.context.authenticator.cluster_users.set_limits(definitions.limits)
        return {
            "vhosts": len(definitions.vhosts),
            "users": len(definitions.users),
            "permissions": len(definitions.permissions),
            "exchanges": len(definitions.exchanges),
            "queues": len(definitions.queues),
            "bindings": len(definitions.bindings),
            "limits": sum(len(named) for named in definitions.limits.values()),
        }
