"""Users and permissions, as RabbitMQ's management API has them (issue 30).

Contract
========

Every endpoint needs the administrator role (listing users too: a monitoring user gets
403). The users made here are the **cluster's**
(:mod:`broker.security.cluster_users`): replicated to every backup and kept in the data
directory; a broker's **own** users (its users file, or the default guest) are listed
with ``"source": "own"`` and are changed with ``qpid-ha users`` only (409 here).

- ``GET /api/users``: every user, own then cluster, each ``{"name", "roles", "tags",
  "source"}`` (``"shadowed": true`` for a cluster user whose name is also an own user
  here); never a hash. ``GET /api/users/{name}`` one (404).
- ``PUT /api/users/{name}``: body RabbitMQ's ``{"password"}`` or ``{"password_hash",
  "hashing_algorithm"}`` (``rabbit_password_hashing_sha256``, the default when a hash is
  given, or ``qpidd_password_hashing_scrypt``; an empty hash: no password login) and
  ``tags`` (a comma-separated string or a list; ``limits`` only empty: none are supported
  here). A password is hashed with scrypt, or with
  RabbitMQ's SHA-256 when ``hashing_algorithm`` asks for it. 201 created, 200 replaced (a
  replaced user keeps its permissions); 400 naming a bad field.
- ``DELETE /api/users/{name}``: the user and its permissions (404 none).
- ``GET /api/permissions``, ``GET /api/users/{name}/permissions``,
  ``GET /api/permissions/{vhost}/{user}``: ``{"user", "vhost", "configure", "write",
  "read"}``.
- ``PUT /api/permissions/{vhost}/{user}``: body ``{"configure", "write", "read"}`` (each a
  regular expression, all three required); 404 for no such vhost or cluster user.
  ``DELETE`` clears it.

Changes are 409 on a backup (made on the primary, replicated) and answered once every
in-sync backup has them (:func:`~broker.management.managed.replicated`). Events:
``user_put``, ``user_deleted``, ``permission_set``, ``permission_cleared``.
"""

from __future__ import annotations

import asyncio
from http import HTTPStatus
from typing import Any

from aiohttp import web
from structlog.typing import FilteringBoundLogger

from broker.management.auth import current_user
from broker.management.errors import ApiError
from broker.management.managed import ManagedBroker, refuse_on_backup, replicated, vhosts_of
from broker.management.request_input import Body, read_json_object
from broker.management.responses import json_response
from broker.security.cluster_users import (
    SCRYPT,
    ClusterUser,
    ClusterUsers,
    UserError,
    VhostPermission,
    check_pattern,
    check_user_name,
    hash_from,
    parse_tags,
)
from broker.security.passwords import RABBIT_SHA256, StoredHash, hash_password, parse_scrypt
from broker.security.passwords import rabbit_sha256 as rabbit_hash
from broker.security.roles import Role

USER_FIELDS = ("password", "password_hash", "hashing_algorithm", "tags", "limits")
PERMISSION_FIELDS = ("configure", "write", "read")


def user_from_fields(name: str, data: dict[str, Any], where: str = "") -> ClusterUser:
    """A cluster user from RabbitMQ's fields, without a plain password (an import's).

    :raises UserError: naming the field (prefixed with ``where``)."""
    check_user_name(name, f"{where}name")
    if "password_hash" not in data:
        raise UserError(f"{where}password_hash: required")
    text = data["password_hash"]
    if not isinstance(text, str):
        raise UserError(f"{where}password_hash: must be a string")
    algorithm = data.get("hashing_algorithm") or RABBIT_SHA256
    if not isinstance(algorithm, str):
        raise UserError(f"{where}hashing_algorithm: must be a string")
    stored = hash_from(text, algorithm, f"{where}password_hash") if text else None
    if text == "" and algorithm not in (RABBIT_SHA256, SCRYPT):
        hash_from("", algorithm, f"{where}password_hash")  # names the unknown algorithm
    return ClusterUser(name, stored, parse_tags(data.get("tags"), f"{where}tags"))


def permission_from_fields(
    vhost: str, user: str, data: dict[str, Any], where: str = ""
) -> VhostPermission:
    values = []
    for field in PERMISSION_FIELDS:
        if field not in data:
            raise UserError(f"{where}{field}: required")
        values.append(check_pattern(data[field], f"{where}{field}"))
    return VhostPermission(user, vhost, *values)


class UserEndpoints:
    """The users and permissions handlers, bound to one broker."""

    def __init__(self, broker: ManagedBroker, log: FilteringBoundLogger) -> None:
        self.broker = broker
        self.log = log

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/api/users", self.list_users),
            web.get("/api/users/{name}", self.get_user),
            web.put("/api/users/{name}", self.put_user),
            web.delete("/api/users/{name}", self.delete_user),
            web.get("/api/users/{name}/permissions", self.user_permissions),
            web.get("/api/permissions", self.list_permissions),
            web.get("/api/permissions/{vhost}/{user}", self.get_permission),
            web.put("/api/permissions/{vhost}/{user}", self.put_permission),
            web.delete("/api/permissions/{vhost}/{user}", self.delete_permission),
        ]

    # -- helpers -----------------------------------------------------------------------
    @property
    def cluster(self) -> ClusterUsers:
        return self.broker.context.authenticator.cluster_users

    def _administrator(self) -> None:
        user = current_user.get()
        if user is not None and Role.ADMINISTRATOR not in self.broker.context.authenticator.roles(
            user
        ):
            raise ApiError(
                HTTPStatus.FORBIDDEN, f"user {user!r} may not see users: that needs administrator"
            )

    def _is_own(self, name: str) -> bool:
        return self.broker.context.authenticator.is_own(name)

    def _view(self, name: str) -> dict[str, Any]:
        authenticator = self.broker.context.authenticator
        cluster = self.cluster.users.get(name)
        if self._is_own(name):
            view: dict[str, Any] = {"name": name, "source": "own", "tags": []}
            view["roles"] = sorted(role.value for role in authenticator.roles(name))
            if cluster is not None:
                view["shadowed"] = True
            return view
        if cluster is None:
            raise ApiError(HTTPStatus.NOT_FOUND, f"NOT_FOUND - no user '{name}'")
        return {
            "name": name,
            "source": "cluster",
            "tags": list(cluster.tags),
            "roles": sorted(role.value for role in cluster.roles),
            "password": cluster.password_hash is not None,
        }

    def _changing(self, name: str | None = None) -> None:
        self._administrator()
        refuse_on_backup(self.broker)
        if name is not None and self._is_own(name):
            raise ApiError(
                HTTPStatus.CONFLICT,
                f"user '{name}' is this broker's own (its users file or the default user):"
                " change it with qpid-ha users",
            )

    # -- users -------------------------------------------------------------------------
    async def list_users(self, request: web.Request) -> web.Response:
        self._administrator()
        own = list(self.broker.context.authenticator.users)
        names = own + sorted(n for n in self.cluster.users if n not in own)
        return json_response([self._view(name) for name in names])

    async def get_user(self, request: web.Request) -> web.Response:
        self._administrator()
        return json_response(self._view(request.match_info["name"]))

    async def put_user(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        body = Body(await read_json_object(request), USER_FIELDS)
        self._changing(name)
        try:
            user = await self._user_from(name, body.data)
        except UserError as exc:
            raise ApiError(HTTPStatus.BAD_REQUEST, str(exc)) from None
        refuse_on_backup(self.broker)  # a promotion or demotion meanwhile (the hash waited)
        cluster = self.cluster
        created = cluster.put_user(user)
        await replicated(self.broker)
        self.log.info("user_put", name=name, tags=list(user.tags), created=created,
                      user=current_user.get())  # fmt: skip
        return json_response(self._view(name), 201 if created else 200)

    async def _user_from(self, name: str, data: dict[str, Any]) -> ClusterUser:
        if data.get("limits"):
            raise UserError("limits: user limits are not supported here")
        password = data.get("password")
        if password is None:
            if "password_hash" not in data:
                raise UserError("password: required (or password_hash)")
            return user_from_fields(name, data)
        if "password_hash" in data:
            raise UserError("password: give password or password_hash, not both")
        if not isinstance(password, str) or not password:
            raise UserError("password: must be a non-empty string")
        check_user_name(name)
        algorithm = data.get("hashing_algorithm") or SCRYPT
        stored: StoredHash
        if algorithm == RABBIT_SHA256:
            stored = rabbit_hash(password)
        elif algorithm == SCRYPT:  # about 50 ms of CPU: off the event loop
            stored = parse_scrypt(await asyncio.to_thread(hash_password, password))
        else:
            hash_from("x", str(algorithm))  # UserError naming the algorithm
            raise AssertionError("unreachable")
        return ClusterUser(name, stored, parse_tags(data.get("tags")))

    async def delete_user(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        self._changing(name)
        try:
            self.cluster.delete_user(name)
        except KeyError:
            raise ApiError(HTTPStatus.NOT_FOUND, f"NOT_FOUND - no user '{name}'") from None
        await replicated(self.broker)
        self.log.info("user_deleted", name=name, user=current_user.get())
        return json_response({"name": name})

    # -- permissions -------------------------------------------------------------------
    async def list_permissions(self, request: web.Request) -> web.Response:
        self._administrator()
        rows = [p.definition() for _, p in sorted(self.cluster.permissions.items())]
        return json_response(rows)

    async def user_permissions(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        self._view(name)  # 404 for no such user
        self._administrator()
        return json_response([p.definition() for p in self.cluster.permissions_of(name)])

    def _permission_key(self, request: web.Request) -> tuple[str, str]:
        vhost, user = request.match_info["vhost"], request.match_info["user"]
        if vhosts_of(self.broker).get(vhost) is None:
            raise ApiError(HTTPStatus.NOT_FOUND, f"NOT_FOUND - no vhost '{vhost}'")
        return vhost, user

    async def get_permission(self, request: web.Request) -> web.Response:
        self._administrator()
        vhost, user = self._permission_key(request)
        found = self.cluster.permissions.get((vhost, user))
        if found is None:
            raise ApiError(
                HTTPStatus.NOT_FOUND, f"NOT_FOUND - no permission of '{user}' in vhost '{vhost}'"
            )
        return json_response(found.definition())

    async def put_permission(self, request: web.Request) -> web.Response:
        body = Body(await read_json_object(request), PERMISSION_FIELDS)
        self._changing()
        vhost, user = self._permission_key(request)
        try:
            permission = permission_from_fields(vhost, user, body.data)
        except UserError as exc:
            raise ApiError(HTTPStatus.BAD_REQUEST, str(exc)) from None
        if self._is_own(user):
            raise ApiError(
                HTTPStatus.CONFLICT,
                f"user '{user}' is this broker's own: it opens every vhost (the ACL file"
                " governs it)",
            )
        try:
            created = self.cluster.set_permission(permission)
        except KeyError:
            raise ApiError(HTTPStatus.NOT_FOUND, f"NOT_FOUND - no user '{user}'") from None
        await replicated(self.broker)
        self.log.info("permission_set", vhost=vhost, name=user, user=current_user.get())
        return json_response(permission.definition(), 201 if created else 200)

    async def delete_permission(self, request: web.Request) -> web.Response:
        self._changing()
        vhost, user = self._permission_key(request)
        try:
            self.cluster.clear_permission(vhost, user)
        except KeyError:
            raise ApiError(
                HTTPStatus.NOT_FOUND, f"NOT_FOUND - no permission of '{user}' in vhost '{vhost}'"
            ) from None
        await replicated(self.broker)
        self.log.info("permission_cleared", vhost=vhost, name=user, user=current_user.get())
        return json_response({"user": user, "vhost": vhost})
