"""SASL authentication for AMQP 0-9-1 ``connection.start-ok``.

The broker offers ``PLAIN AMQPLAIN`` in ``connection.start`` (and ``ANONYMOUS`` too when
authentication is disabled); the client answers with one mechanism and a response, which
:meth:`Authenticator.authenticate` turns into a user name or an
:class:`AuthenticationError`. Pure functions of their input: no I/O, no state.

- PLAIN (RFC 4616): ``authzid NUL user NUL password``, UTF-8. A non-empty ``authzid``
  must equal ``user`` (no proxy authorisation).
- AMQPLAIN (RabbitMQ's, py-amqp's and kombu's default): an AMQP field table, without its
  4-byte length prefix, holding ``LOGIN`` and ``PASSWORD``.
- ANONYMOUS (only with authentication disabled): the user is ``anonymous``.

With authentication disabled any well-formed PLAIN/AMQPLAIN credentials are accepted.
Passwords are compared with :func:`hmac.compare_digest`; error messages never contain
them.

Users come from a :class:`UserDatabase`: a users file (``name:password`` a line) or
:meth:`UserDatabase.default`, the single user guest/guest that clients such as pika use
out of the box.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import struct
from collections.abc import Iterator, Mapping
from pathlib import Path

from pamqp import decode

__all__ = [
    "ANONYMOUS_USER",
    "AuthenticationError",
    "Authenticator",
    "UserDatabase",
    "is_loopback",
]

ANONYMOUS_USER = "anonymous"

# A password nobody has, compared against when the user is unknown, so that the time
# taken does not tell which user names exist.
_NO_PASSWORD = b"\x00" * 32


class AuthenticationError(Exception):
    """The client's credentials were refused or malformed (the message says which)."""


class UserDatabase:
    """User names and their passwords."""

    def __init__(self, users: Mapping[str, str]) -> None:
        for name, password in users.items():
            if not name or ":" in name or name != name.strip():
                raise ValueError(f"invalid user name {name!r}")
            if not password:
                raise ValueError(f"empty password for user {name!r}")
        self._users: dict[str, bytes] = {
            name: password.encode("utf-8") for name, password in users.items()
        }

    @classmethod
    def default(cls) -> UserDatabase:
        """The single user ``guest`` with password ``guest`` (RabbitMQ's default)."""
        return cls({"guest": "guest"})

    @classmethod
    def parse(cls, text: str, source: str = "<users>") -> UserDatabase:
        """Read ``name:password`` lines; blank lines and lines starting with ``#`` are skipped.

        The password is everything after the first ``:`` (so it may contain ``:``), with
        surrounding whitespace removed.

        :raises ValueError: naming ``source`` and the line number of a bad line.
        """
        users: dict[str, str] = {}
        for lineno, raw in enumerate(text.splitlines(), start=1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            name, colon, password = line.partition(":")
            name, password = name.strip(), password.strip()
            where = f"{source}:{lineno}"
            if not colon or not name:
                raise ValueError(f"{where}: expected name:password")
            if not password:
                raise ValueError(f"{where}: empty password for user {name!r}")
            if name in users:
                raise ValueError(f"{where}: user {name!r} is listed twice")
            users[name] = password
        return cls(users)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> UserDatabase:
        """Read a users file (see :meth:`parse`).

        :raises ValueError: if the file cannot be read or has a bad line (naming the file).
        """
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            reason = exc.strerror or exc.__class__.__name__
            raise ValueError(f"cannot read users file {str(path)!r}: {reason}") from None
        except UnicodeDecodeError:
            raise ValueError(f"cannot read users file {str(path)!r}: not UTF-8 text") from None
        return cls.parse(text, source=str(path))

    def check(self, user: str, password: str) -> bool:
        """Whether ``password`` is ``user``'s password (constant time in the password)."""
        expected = self._users.get(user)
        given = password.encode("utf-8")
        if expected is None:
            hmac.compare_digest(given, _NO_PASSWORD)
            return False
        return hmac.compare_digest(given, expected)

    def __contains__(self, user: object) -> bool:
        return user in self._users

    def __iter__(self) -> Iterator[str]:
        return iter(self._users)

    def __len__(self) -> int:
        return len(self._users)

    def __repr__(self) -> str:
        return f"UserDatabase(users={sorted(self._users)!r})"


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback IP address (127.0.0.0/8, ::1, ::ffff:127.x.y.z)."""
    try:
        address = ipaddress.ip_address(host.strip("[]").partition("%")[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


class Authenticator:
    """Checks ``connection.start-ok`` responses against a :class:`UserDatabase`.

    A user named in ``loopback_users`` (the default user guest, by default) may log in only
    from a loopback address, as RabbitMQ's ``loopback_users``: the caller passes the peer's
    address as ``peer_host`` (``None`` for a peer that is not on the network: in-process
    tests).
    """

    def __init__(
        self,
        users: UserDatabase,
        auth_enabled: bool,
        loopback_users: frozenset[str] = frozenset({"guest"}),
    ) -> None:
        self.users = users
        self.auth_enabled = auth_enabled
        self.loopback_users = loopback_users

    def mechanisms(self) -> list[str]:
        """The mechanisms offered in ``connection.start``, most preferred first."""
        if self.auth_enabled:
            return ["PLAIN", "AMQPLAIN"]
        return ["PLAIN", "AMQPLAIN", "ANONYMOUS"]

    def authenticate(self, mechanism: str, response: bytes, peer_host: str | None = None) -> str:
        """The authenticated user name.

        :raises AuthenticationError: for an unoffered mechanism, a malformed response,
            (with authentication enabled) a wrong user name or password, or a loopback
            user from ``peer_host`` that is not a loopback address.
        """
        if mechanism not in self.mechanisms():
            offered = " ".join(self.mechanisms())
            raise AuthenticationError(f"unsupported mechanism {mechanism!r} (offered: {offered})")
        if mechanism == "ANONYMOUS":
            return ANONYMOUS_USER
        if mechanism == "PLAIN":
            user, password = _plain(response)
        else:
            user, password = _amqplain(response)
        if not self.auth_enabled:
            return user or ANONYMOUS_USER
        if not user:
            raise AuthenticationError(f"{mechanism}: empty user name")
        if not self.users.check(user, password):
            raise AuthenticationError(f"{mechanism}: wrong user name or password for {user!r}")
        if user in self.loopback_users and peer_host is not None and not is_loopback(peer_host):
            raise AuthenticationError(
                f"user {user!r} may log in only from a loopback address, not {peer_host}"
                " (see loopback-users)"
            )
        return user


def _text(raw: bytes, what: str, mechanism: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise AuthenticationError(f"{mechanism}: {what} is not UTF-8") from None


def _plain(response: bytes) -> tuple[str, str]:
    """``(user, password)`` from a PLAIN response ``authzid NUL user NUL password``."""
    parts = bytes(response).split(b"\x00")
    if len(parts) != 3:
        raise AuthenticationError(
            "PLAIN: malformed response, expected authzid NUL user NUL password"
        )
    authzid = _text(parts[0], "authorization identity", "PLAIN")
    user = _text(parts[1], "user name", "PLAIN")
    password = _text(parts[2], "password", "PLAIN")
    if authzid and authzid != user:
        raise AuthenticationError(
            f"PLAIN: user {user!r} may not act as authorization identity {authzid!r}"
        )
    return user, password


def _amqplain(response: bytes) -> tuple[str, str]:
    """``(user, password)`` from an AMQPLAIN response: a field table without its length."""
    raw = bytes(response)
    try:
        _, table = decode.field_table(struct.pack(">I", len(raw)) + raw)
    except Exception:  # pamqp raises ValueError, struct.error, KeyError, ... on bad input
        raise AuthenticationError("AMQPLAIN: malformed response, not a field table") from None
    values: list[str] = []
    for key in ("LOGIN", "PASSWORD"):
        value = table.get(key)
        if isinstance(value, bytes):
            value = _text(value, key, "AMQPLAIN")
        if not isinstance(value, str):
            raise AuthenticationError(f"AMQPLAIN: response has no {key} string")
        values.append(value)
    return values[0], values[1]
