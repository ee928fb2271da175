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
Passwords are checked against salted scrypt hashes (:mod:`broker.security.passwords`);
error messages never contain them. The hash is slow (about 50 ms of CPU):
:meth:`Authenticator.begin` returns a :class:`PasswordCheck` instead of running it, for the
caller to run off its event loop (:mod:`broker.security.password_checks`) and hand to
:meth:`Authenticator.finish`; a password verified before is checked at once
(:meth:`UserDatabase.check_remembered`).

Users come from the broker's own :class:`~broker.security.users.UserDatabase` and from the
cluster's (:class:`~broker.security.cluster_users.ClusterUsers`, replicated; a name in
both is the broker's own): a users file
(``name:hash:roles`` a line) or :meth:`~broker.security.users.UserDatabase.default`, the
single user guest/guest that clients such as pika use out of the box, allowed from
loopback addresses only (``loopback_users``).
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass, field

from pamqp import decode

from broker.security.cluster_users import ClusterUsers
from broker.security.login_backoff import LoginBackoff
from broker.security.roles import Role
from broker.security.users import UserDatabase

__all__ = [
    "ANONYMOUS_USER",
    "AuthenticationError",
    "Authenticator",
    "PasswordCheck",
    "UserDatabase",
    "is_loopback",
]

ANONYMOUS_USER = "anonymous"


class AuthenticationError(Exception):
    """The client's credentials were refused or malformed (the message says which)."""


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
        #: The wait after failed logins (:mod:`broker.security.login_backoff`), carried by
        #: each :class:`PasswordCheck` to the shell that runs it; None: no wait.
        self.backoff: LoginBackoff | None = None
        #: The cluster's users (made through the API or an import, replicated).
        self.cluster_users = ClusterUsers()

    def database_of(self, user: str) -> UserDatabase:
        """Where ``user`` is checked: the broker's own users, else the cluster's."""
        if user in self.users:
            return self.users
        cluster = self.cluster_users.database
        return cluster if user in cluster else self.users

    def known(self, user: str) -> bool:
        return user in self.database_of(user)

    def is_own(self, user: str) -> bool:
        """Whether ``user`` is the broker's own (users file or default), not the cluster's."""
        return user in self.users

    def roles(self, user: str) -> frozenset[Role]:
        """``user``'s management roles (:mod:`broker.security.roles`)."""
        return self.database_of(user).roles(user)

    def may_open(self, user: str | None, vhost: str) -> bool:
        """Whether ``user`` may open ``vhost``: the broker's own users (and anyone with
        authentication off) every vhost; the cluster's where they have a permission."""
        if not self.auth_enabled or user is None or user in self.users:
            return True
        if user not in self.cluster_users.users:
            return True  # not a user at all: it could not have logged in
        return self.cluster_users.may_open(user, vhost)

    def mechanisms(self, tls_identity: str | None = None) -> list[str]:
        """The mechanisms offered in ``connection.start``, most preferred first: EXTERNAL
        first on a TLS connection whose client presented a verified certificate."""
        offered = ["PLAIN", "AMQPLAIN"] if self.auth_enabled else ["PLAIN", "AMQPLAIN", "ANONYMOUS"]
        return ["EXTERNAL", *offered] if tls_identity else offered

    def authenticate(
        self,
        mechanism: str,
        response: bytes,
        peer_host: str | None = None,
        tls_identity: str | None = None,
    ) -> str:
        """The authenticated user name, the password hash checked here (blocking: the
        broker's event loop uses :meth:`begin` and :meth:`finish` instead).

        :raises AuthenticationError: as :meth:`begin` and :meth:`finish`.
        """
        outcome = self.begin(mechanism, response, peer_host, tls_identity)
        if isinstance(outcome, PasswordCheck):
            return self.finish(outcome, outcome.run())
        return outcome

    def begin(
        self,
        mechanism: str,
        response: bytes,
        peer_host: str | None = None,
        tls_identity: str | None = None,
    ) -> str | PasswordCheck:
        """The authenticated user name when no slow hash is needed (EXTERNAL, ANONYMOUS,
        authentication off, a password verified before), else the :class:`PasswordCheck`
        to run (in a thread) and hand to :meth:`finish`.

        ``tls_identity`` is the common name of the client's verified TLS certificate: the
        user of EXTERNAL (which must be a known user, with authentication on; the response,
        when not empty, must name the same user).

        :raises AuthenticationError: for an unoffered mechanism, a malformed response,
            (with authentication enabled) an unknown EXTERNAL user, or a loopback user
            from ``peer_host`` that is not a loopback address.
        """
        if mechanism not in self.mechanisms(tls_identity):
            offered = " ".join(self.mechanisms(tls_identity))
            raise AuthenticationError(f"unsupported mechanism {mechanism!r} (offered: {offered})")
        if mechanism == "ANONYMOUS":
            return ANONYMOUS_USER
        if mechanism == "EXTERNAL":
            user = _external(response, tls_identity or "")
            if self.auth_enabled and not self.known(user):
                raise AuthenticationError(f"EXTERNAL: certificate user {user!r} is not a user")
            return self._admit(user, peer_host)
        if mechanism == "PLAIN":
            user, password = _plain(response)
        else:
            user, password = _amqplain(response)
        if not self.auth_enabled:
            return user or ANONYMOUS_USER
        if not user:
            raise AuthenticationError(f"{mechanism}: empty user name")
        users = self.database_of(user)
        check = PasswordCheck(users, mechanism, user, password, peer_host, self.backoff)
        if users.check_remembered(user, password):
            return self.finish(check, True)
        return check

    def finish(self, check: PasswordCheck, matched: bool) -> str:
        """The user of ``check`` once its hash was checked (``matched``: the password is
        right). :raises AuthenticationError: a wrong user name or password, or a loopback
        user off loopback."""
        if not matched:
            raise AuthenticationError(
                f"{check.mechanism}: wrong user name or password for {check.user!r}"
            )
        return self._admit(check.user, check.peer_host)

    def _admit(self, user: str, peer_host: str | None) -> str:
        if user in self.loopback_users and peer_host is not None and not is_loopback(peer_host):
            raise AuthenticationError(
                f"user {user!r} may log in only from a loopback address, not {peer_host}"
                " (see loopback-users)"
            )
        return user


@dataclass(frozen=True)
class PasswordCheck:
    """A login waiting for its password hash: :meth:`run` it (blocking, about 50 ms of
    CPU; thread-safe), then :meth:`Authenticator.finish` with the result. The password is
    not in the ``repr``. The shell that runs it on the broker's loop
    (:func:`~broker.security.password_checks.run_password_check`) first waits what
    ``backoff`` says, and counts a wrong password there."""

    users: UserDatabase
    mechanism: str
    user: str
    password: str = field(repr=False)
    peer_host: str | None = None
    #: The back-off that delays this check and counts its failure (None: neither).
    backoff: LoginBackoff | None = field(default=None, repr=False, compare=False)

    def run(self) -> bool:
        return self.users.check(self.user, self.password)


def _external(response: bytes, identity: str) -> str:
    """EXTERNAL (RFC 4422 appendix A): the certificate's identity; a non-empty response is
    an authorization identity that must be the same."""
    asked = _text(bytes(response), "authorization identity", "EXTERNAL")
    if asked and asked != identity:
        raise AuthenticationError(
            f"EXTERNAL: certificate user {identity!r} may not act as {asked!r}"
        )
    return identity


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
