"""The broker's security settings put together, and their reload (SIGHUP, ``qpid-ha acl
reload``, ``qpid-ha users reload``).

:class:`BrokerSecurity` reads ``--acl-file`` at start (a bad file stops the start, exit 2,
naming the line; so does a users file or ACL that others may write, and one they may read is
a ``security_file_readable`` warning: :mod:`broker.security.file_modes`) and makes the ACL
the connections' context is built with (:attr:`BrokerSecurity.access`). :meth:`reload` reads
the file again: a good file replaces the ACL at once for every later request, a bad one
leaves the running ACL in place and says why (``acl_reload_failed``). The caller decides
when: SIGHUP (:mod:`broker.main`) or ``POST /api/acl/reload``.

The users file (``--sasl-users``) is read again the same way (:meth:`reload_users`: SIGHUP,
``POST /api/users/reload``, or :meth:`tick` noticing the file changed: ``qpid-ha users``
edits apply within :data:`USERS_CHECK_INTERVAL`): a good file replaces the users for every
later login (``users_reloaded``), a bad one leaves the running users
(``users_reload_failed``, once per change of the file).

TLS (:mod:`broker.security.tls`): with ``--ssl-cert-file`` it makes the server context
(:attr:`BrokerSecurity.server_ssl`) of the AMQPS listener it opens (:meth:`listen_tls`,
``--ssl-port``) and of the management API when that is HTTPS (:meth:`mgmt_ssl`); SIGHUP
reads the certificate files again into the same context (``tls_reloaded``, or
``tls_reload_failed`` and the running ones stay).

THREAD UNSAFE: the broker's event loop calls it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl
import time
from collections.abc import Callable
from typing import Any

from broker.amqp.access import AccessControl
from broker.listen import Listener, serve
from broker.security.acl import Acl, AclError, load_acl
from broker.security.file_modes import (
    FileModeError,
    check_not_writable_by_others,
    readable_by_others,
)
from broker.security.login_backoff import LoginBackoff, replication_exemption, source_key
from broker.security.sasl import Authenticator, is_loopback
from broker.security.tls import TlsError, TlsSettings, reload_server_context, server_context
from broker.security.users import load as load_users
from common.url import parse_url

__all__ = ["USERS_CHECK_INTERVAL", "BrokerSecurity", "ReloadError"]

#: Seconds between two looks (a stat) at the users file for a change.
USERS_CHECK_INTERVAL = 1.0


def brokers_addresses(options: Any) -> list[str]:
    """The IP addresses of ``ha-brokers-url``'s hosts (a name resolved once, at start; one
    that does not resolve is left out): where replication links come from."""
    if not options.ha_brokers_url:
        return []
    found: list[str] = []
    for address in parse_url(options.ha_brokers_url).addresses:
        try:
            infos = socket.getaddrinfo(address.host, None, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError):
            continue
        found.extend(str(info[4][0]) for info in infos)
    return found


class ReloadError(Exception):
    """A reload was refused: the running settings stay (the message says why)."""


class BrokerSecurity:
    def __init__(self, options: Any, authenticator: Authenticator, amqp_log: Any, log: Any) -> None:
        acl_file: str | None = options.acl_file
        self.options = options
        self.acl_file = acl_file
        self.authenticator = authenticator
        self.log = log
        #: The ACL the connections ask (``BrokerContext.acl``), replaced in place on a
        #: reload; None: no ACL file.
        self.access: AccessControl | None = None
        self.loaded_at: float | None = None
        self.users_file: str | None = options.sasl_users
        # FileModeError (a ValueError): exit 2, naming the file; readable by others: a warning
        for path, what in ((self.users_file, "users file"), (acl_file, "ACL file")):
            warning = None if path is None else readable_by_others(path, what)
            if warning is not None:
                log.warning("security_file_readable", file=path, reason=warning)
        self.users_loaded_at: float | None = time.time() if self.users_file else None
        self._users_seen = self._users_signature()  # the file as last read (or tried)
        self._users_checked = time.monotonic()
        self.tls = TlsSettings.from_options(options)  # TlsError (a ValueError): exit 2
        self.server_ssl = None if self.tls is None else server_context(self.tls)
        self.ssl_port = 0
        # The wait after failed logins, the replication user from the brokers exempt
        brokers = brokers_addresses(options)
        exempt = replication_exemption(options.ha_username, brokers)
        #: the hosts of ha-brokers-url, as the login back-off keys its sources
        self.cluster_hosts = frozenset(k for k in map(source_key, brokers) if k is not None)
        authenticator.backoff = LoginBackoff(exempt=exempt)
        self.mgmt_ssl()  # TlsError now (exit 2) rather than when the API starts
        if acl_file:
            acl = load_acl(acl_file)  # AclError (a ValueError): bad configuration
            self.access = AccessControl(acl, amqp_log)
            self.loaded_at = time.time()

    @property
    def acl(self) -> Acl | None:
        return None if self.access is None else self.access.acl

    def status(self) -> dict[str, Any]:
        acl = self.acl
        return {
            "acl_file": self.acl_file,
            "rules": None if acl is None else len(acl.rules),
            "groups": None if acl is None else sorted(acl.groups),
            "loaded_at": self.loaded_at,
        }

    def reload(self, reason: str) -> dict[str, Any]:
        """Read the ACL file again. :raises ReloadError: no ACL file, or a bad one."""
        if not self.acl_file or self.access is None:
            raise ReloadError("no ACL file is configured (--acl-file)")
        try:
            check_not_writable_by_others(self.acl_file, "ACL file")
            acl = load_acl(self.acl_file)
        except (AclError, FileModeError) as exc:
            self.log.warning("acl_reload_failed", file=self.acl_file, reason=str(exc), by=reason)
            raise ReloadError(f"{exc} (the running ACL stays)") from None
        self.access.replace(acl)
        self.loaded_at = time.time()
        self.log.info("acl_reloaded", file=self.acl_file, rules=len(acl.rules), by=reason)
        return self.status()

    def users_status(self) -> dict[str, Any]:
        return {
            "users_file": self.users_file,
            "users": len(self.authenticator.users),
            "loaded_at": self.users_loaded_at,
        }

    def reload_users(self, reason: str) -> dict[str, Any]:
        """Read the users file again: later logins use it (a login being checked finishes
        against the users it started with). :raises ReloadError: no users file, or a bad
        one (the running users stay)."""
        if not self.users_file:
            raise ReloadError("no users file is configured (--sasl-users)")
        self._users_seen = self._users_signature()
        try:
            check_not_writable_by_others(self.users_file, "users file")
            users = load_users(self.users_file)
        except ValueError as exc:  # names the file and line, never a hash
            self.log.warning(
                "users_reload_failed", file=self.users_file, reason=str(exc), by=reason
            )
            raise ReloadError(f"{exc} (the running users stay)") from None
        self.authenticator.users = users
        self.users_loaded_at = time.time()
        self.log.info("users_reloaded", file=self.users_file, users=len(users), by=reason)
        return self.users_status()

    def _users_signature(self) -> tuple[int, int, int] | None:
        if not self.users_file:
            return None
        try:
            st = os.stat(self.users_file)
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def tick(self) -> None:
        """Called often (the broker's tick): at most each :data:`USERS_CHECK_INTERVAL`, read
        the users file again when it changed (``qpid-ha users`` replaces it by a rename: a
        new inode). A file gone is not a change: the running users stay."""
        now = time.monotonic()
        if not self.users_file or now - self._users_checked < USERS_CHECK_INTERVAL:
            return
        self._users_checked = now
        seen = self._users_signature()
        if seen is not None and seen != self._users_seen:
            with contextlib.suppress(ReloadError):  # logged: the running users stay
                self.reload_users("file changed")

    def on_sighup(self) -> None:
        """SIGHUP: reload what has a file; failures are logged, the broker carries on."""
        if self.acl_file:
            with contextlib.suppress(ReloadError):  # logged by reload: the running ACL stays
                self.reload("SIGHUP")
        if self.users_file:
            with contextlib.suppress(ReloadError):  # logged: the running users stay
                self.reload_users("SIGHUP")
        if self.tls is not None and self.server_ssl is not None:
            try:
                reload_server_context(self.server_ssl, self.tls)
            except TlsError as exc:
                self.log.warning("tls_reload_failed", reason=str(exc))
            else:
                self.log.info("tls_reloaded", cert_file=self.tls.cert_file)

    def mgmt_ssl(self) -> ssl.SSLContext | None:
        """The management API's context: HTTPS per ``--mgmt-ssl`` (auto: with TLS, off
        loopback), None for HTTP."""
        choice = self.options.mgmt_ssl
        if self.server_ssl is None or choice == "no":
            if choice == "yes":
                raise TlsError("mgmt-ssl=yes needs ssl-cert-file and ssl-key-file")
            return None
        addresses = self.options.mgmt_interface.split(",")
        if choice == "auto" and all(is_loopback(a.strip()) for a in addresses if a.strip()):
            return None
        return self.server_ssl

    async def listen_tls(
        self, factory: Callable[[], asyncio.Protocol], interface: str, start_serving: bool = True
    ) -> Listener | None:
        """The AMQPS listener on ``--ssl-port`` (None without TLS) on ``--interface``'s
        addresses (broker.listen); the port chosen is in :attr:`ssl_port`; ``start_serving``
        False: bound, listening only from its :meth:`~broker.listen.Listener.start_serving`.

        :raises ListenError: naming the address that could not be bound."""
        if self.server_ssl is None:
            return None
        server = await serve(
            factory,
            "AMQP over TLS",
            "--interface/--ssl-port",
            interface,
            self.options.ssl_port,
            ssl=self.server_ssl,
            start_serving=start_serving,
        )
        self.ssl_port = server.port
        return server
