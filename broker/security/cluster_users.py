"""The cluster's users and their vhost permissions: made through the management API or a
definitions import, replicated to every backup, kept in the data directory (issue 30).

A broker has two kinds of users:

- its **own**, from its users file (``--sasl-users``) or the default guest
  (:mod:`broker.security.users`): node-local, edited with ``qpid-ha users``; they may open
  every vhost, as before;
- the **cluster's** (:class:`ClusterUsers`), RabbitMQ's users: a name, a password hash
  (scrypt, or RabbitMQ's salted SHA-256 as a RabbitMQ export carries it), RabbitMQ's
  tags, and a permission per vhost (``configure``, ``write``, ``read`` patterns). The
  primary's are sent to each backup on the configuration stream (replication format 4: the
  whole set in one ``users`` event after the snapshot and after each change), so a backup
  promoted later logs them in.

A name the broker has as its own is its own: the cluster's user of that name is stored and
replicated but shadowed on that broker (the API refuses to make one; an import lists it as
skipped). The tags grant the management roles (:data:`TAG_ROLES`): ``administrator``
administrator; ``monitoring``, ``management`` and ``policymaker`` monitoring;
``cluster-manager`` cluster manager; other tags are kept and grant nothing.

Each vhost's limits (``max-connections``, ``max-queues``: :mod:`broker.core.vhost_limits`)
are kept, stored and replicated with them (:attr:`ClusterUsers.limits`, the ``limits`` of
the ``users`` event; an event without it, from a primary that knew none, clears them).

What a permission does here: a cluster user may open (connection.open) only the vhosts it
has a permission in (RabbitMQ's "access to vhost '/' refused for user 'u'"); the three
patterns are kept, replicated and exported as given, and are **not** asked per operation:
the ACL file (``--acl-file``) decides those (docs/security.md).

Sans-I/O: :class:`ClusterUsers` changes and tells its listeners; :func:`load` and
:func:`save` (the file ``cluster-users.json`` in the data directory, mode 0600: it holds
hashes) are the thin I/O. THREAD UNSAFE: the broker's event loop owns it.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from broker.core.vhost_limits import VhostLimits
from broker.security.passwords import (
    RABBIT_SHA256,
    PasswordHashError,
    RabbitSha256Hash,
    StoredHash,
    parse_hash,
    parse_scrypt,
)
from broker.security.roles import Role
from broker.security.users import User, UserDatabase, check_name

__all__ = [
    "FILE_NAME",
    "SCRYPT",
    "TAG_ROLES",
    "ClusterUser",
    "ClusterUsers",
    "UserError",
    "VhostPermission",
    "hash_from",
    "load",
    "save",
]

#: The file in the data directory.
FILE_NAME = "cluster-users.json"
#: The ``hashing_algorithm`` of a user whose hash is this broker's scrypt (RabbitMQ does not
#: know it: such a user imports here, not into RabbitMQ).
SCRYPT = "qpidd_password_hashing_scrypt"
#: RabbitMQ's tags and the management roles they grant here.
TAG_ROLES: Mapping[str, Role] = {
    "administrator": Role.ADMINISTRATOR,
    "monitoring": Role.MONITORING,
    "management": Role.MONITORING,
    "policymaker": Role.MONITORING,
    "cluster-manager": Role.CLUSTER_MANAGER,
}


class UserError(ValueError):
    """A user or permission that cannot be stored; the message names the field."""


def hash_from(password_hash: str, algorithm: str, field: str = "password_hash") -> StoredHash:
    """A stored hash from RabbitMQ's ``password_hash`` and ``hashing_algorithm``.

    :raises UserError: an algorithm other than RabbitMQ's SHA-256 or this broker's scrypt
        (RabbitMQ's SHA-512 and MD5 are not taken: say which), or a malformed hash."""
    try:
        if algorithm == RABBIT_SHA256:
            return RabbitSha256Hash.parse(password_hash)
        if algorithm == SCRYPT:
            return parse_scrypt(password_hash)
    except PasswordHashError as exc:
        raise UserError(f"{field}: {exc} (hashing_algorithm {algorithm})") from None
    raise UserError(
        f"hashing_algorithm: {algorithm!r} is not supported (supported: {RABBIT_SHA256}, {SCRYPT})"
    )


def algorithm_of(stored: StoredHash) -> str:
    return RABBIT_SHA256 if isinstance(stored, RabbitSha256Hash) else SCRYPT


def hash_text(stored: StoredHash) -> str:
    """The ``password_hash`` of a definitions file (RabbitMQ's base64, or the scrypt string)."""
    return stored.rabbit_form() if isinstance(stored, RabbitSha256Hash) else stored.encode()


@dataclass(frozen=True, slots=True)
class ClusterUser:
    name: str
    #: None: no password (RabbitMQ's empty ``password_hash``): no password login.
    password_hash: StoredHash | None
    tags: tuple[str, ...] = ()

    @property
    def roles(self) -> frozenset[Role]:
        return frozenset(TAG_ROLES[tag] for tag in self.tags if tag in TAG_ROLES)

    def definition(self) -> dict[str, Any]:
        """As RabbitMQ's definitions list a user."""
        stored = self.password_hash
        return {
            "name": self.name,
            "password_hash": "" if stored is None else hash_text(stored),
            "hashing_algorithm": RABBIT_SHA256 if stored is None else algorithm_of(stored),
            "tags": ",".join(self.tags),  # RabbitMQ 3.10 writes a string, later a list
            "limits": {},
        }


@dataclass(frozen=True, slots=True)
class VhostPermission:
    user: str
    vhost: str
    configure: str = ".*"
    write: str = ".*"
    read: str = ".*"

    def definition(self) -> dict[str, str]:
        return {
            "user": self.user,
            "vhost": self.vhost,
            "configure": self.configure,
            "write": self.write,
            "read": self.read,
        }


def parse_tags(value: object, field: str = "tags") -> tuple[str, ...]:
    """RabbitMQ's tags: a comma-separated string (3.10) or a list of strings (3.12+)."""
    if value is None:
        return ()
    if isinstance(value, str):
        words = value.split(",")
    elif isinstance(value, list) and all(isinstance(w, str) for w in value):
        words = list(value)
    else:
        raise UserError(f"{field}: must be a comma-separated string or a list of strings")
    return tuple(dict.fromkeys(w.strip() for w in words if w.strip()))


def check_user_name(name: object, field: str = "name") -> str:
    if not isinstance(name, str):
        raise UserError(f"{field}: must be a string")
    try:
        return check_name(name)
    except ValueError as exc:
        raise UserError(f"{field}: {exc}") from None


def check_pattern(value: object, field: str) -> str:
    if not isinstance(value, str):
        raise UserError(f"{field}: must be a string (a regular expression)")
    try:
        re.compile(value)
    except re.error as exc:
        raise UserError(f"{field}: not a regular expression: {exc}") from None
    return value


class ClusterUsers:
    """The cluster's users and permissions; :attr:`listeners` hear every change."""

    def __init__(self) -> None:
        self.users: dict[str, ClusterUser] = {}
        #: By (vhost, user).
        self.permissions: dict[tuple[str, str], VhostPermission] = {}
        #: Called after each change (the store's save, the replication's broadcast).
        self.listeners: list[Callable[[], None]] = []
        #: Each vhost's limits (one object for the broker's life: the vhosts hold it).
        self.limits = VhostLimits()
        self._database = UserDatabase(())

    # -- reading -----------------------------------------------------------------------
    @property
    def database(self) -> UserDatabase:
        """The users with a password, as the authenticator checks them."""
        return self._database

    def may_open(self, user: str, vhost: str) -> bool:
        return (vhost, user) in self.permissions

    def permissions_of(self, user: str) -> list[VhostPermission]:
        return [p for (_, name), p in sorted(self.permissions.items()) if name == user]

    # -- changes -----------------------------------------------------------------------
    def put_user(self, user: ClusterUser) -> bool:
        """Add or replace ``user``; True when it is new."""
        created = user.name not in self.users
        self.users[user.name] = user
        self._changed()
        return created

    def delete_user(self, name: str) -> None:
        """:raises KeyError: no such user. Its permissions go with it."""
        del self.users[name]
        for key in [k for k in self.permissions if k[1] == name]:
            del self.permissions[key]
        self._changed()

    def set_permission(self, permission: VhostPermission) -> bool:
        """:raises KeyError: no such user. True when the user had none in that vhost."""
        if permission.user not in self.users:
            raise KeyError(permission.user)
        key = (permission.vhost, permission.user)
        created = key not in self.permissions
        self.permissions[key] = permission
        self._changed()
        return created

    def clear_permission(self, vhost: str, user: str) -> None:
        """:raises KeyError: no such permission."""
        del self.permissions[(vhost, user)]
        self._changed()

    def vhost_deleted(self, vhost: str) -> None:
        """A vhost's permissions and limits go with it (as RabbitMQ's)."""
        gone = [k for k in self.permissions if k[0] == vhost]
        for key in gone:
            del self.permissions[key]
        if self.limits.vhost_deleted(vhost) or gone:
            self._changed()

    def set_limit(self, vhost: str, name: str, value: int) -> None:
        """:raises UserError: an unknown limit or a value that is not an integer."""
        try:
            self.limits.set(vhost, name, value)
        except ValueError as exc:
            raise UserError(str(exc)) from None
        self._changed()

    def clear_limit(self, vhost: str, name: str) -> None:
        """:raises KeyError: no such limit."""
        self.limits.clear(vhost, name)
        self._changed()

    def set_limits(self, limits: Mapping[str, Mapping[str, Any]]) -> None:
        """Set many (an import: a vhost's ``limits`` each), one change for the listeners.

        :raises UserError: a bad limit (nothing changed)."""
        merged = self.limits.all()
        for vhost, named in limits.items():
            merged.setdefault(vhost, {}).update(named)
        try:
            self.limits.replace(merged)
        except ValueError as exc:
            raise UserError(str(exc)) from None
        self._changed()

    def update(self, users: Iterable[ClusterUser], permissions: Iterable[VhostPermission]) -> None:
        """Add or replace many at once (an import): one change for the listeners."""
        for user in users:
            self.users[user.name] = user
        for permission in permissions:
            if permission.user not in self.users:
                raise KeyError(permission.user)
            self.permissions[(permission.vhost, permission.user)] = permission
        self._changed()

    def _changed(self) -> None:
        self._database = UserDatabase(
            User(u.name, u.password_hash, u.roles)
            for u in self.users.values()
            if u.password_hash is not None
        )
        for listener in list(self.listeners):
            listener()

    # -- the replicated and stored form --------------------------------------------------
    def event(self) -> dict[str, Any]:
        """The configuration event carrying them all (replication format 4); also the
        stored form. Hashes as strings of this broker's users file."""
        return {
            "type": "users",
            "users": [
                {
                    "name": u.name,
                    "hash": "" if u.password_hash is None else u.password_hash.encode(),
                    "tags": list(u.tags),
                }
                for u in sorted(self.users.values(), key=lambda u: u.name)
            ],
            "permissions": [p.definition() for _, p in sorted(self.permissions.items())],
            "limits": [
                {"vhost": vhost, "value": limits} for vhost, limits in self.limits.all().items()
            ],
        }

    def replace(self, event: Mapping[str, Any]) -> None:
        """Become what ``event`` (:meth:`event`'s form) holds. :raises UserError: malformed
        (nothing changed)."""
        users: dict[str, ClusterUser] = {}
        permissions: dict[tuple[str, str], VhostPermission] = {}
        try:
            for row in event.get("users") or []:
                stored = str(row.get("hash") or "")
                users[str(row["name"])] = ClusterUser(
                    str(row["name"]),
                    _parse_stored(stored) if stored else None,
                    tuple(str(t) for t in row.get("tags") or []),
                )
            for row in event.get("permissions") or []:
                permission = VhostPermission(
                    str(row["user"]),
                    str(row["vhost"]),
                    str(row["configure"]),
                    str(row["write"]),
                    str(row["read"]),
                )
                permissions[(permission.vhost, permission.user)] = permission
            rows = {str(row["vhost"]): row["value"] for row in event.get("limits") or []}
            limits = VhostLimits()
            try:
                limits.replace(rows)
            except ValueError as exc:
                raise UserError(f"malformed users event: {exc}") from None
        except (KeyError, TypeError, AttributeError) as exc:
            raise UserError(f"malformed users event: {exc!r}") from None
        self.users, self.permissions = users, permissions
        self.limits.replace(limits.all())
        self._changed()


def _parse_stored(text: str) -> StoredHash:
    try:
        return parse_hash(text)
    except PasswordHashError as exc:
        raise UserError(f"hash: {exc}") from None


def load(path: str | os.PathLike[str]) -> ClusterUsers:
    """The users saved at ``path`` (none when there is no file). :raises ValueError: an
    unreadable or malformed file (naming it)."""
    users = ClusterUsers()
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return users
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read {str(path)!r}: {exc}") from None
    try:
        users.replace(json.loads(text))
    except (ValueError, AttributeError) as exc:
        raise ValueError(f"{str(path)!r}: {exc}") from None
    return users


def save(users: ClusterUsers, path: str | os.PathLike[str]) -> None:
    """Write atomically (a temporary file renamed), mode 0600."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(users.event(), out, indent=1, sort_keys=True)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
