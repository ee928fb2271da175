"""How a reader reaches the agents' ZooKeeper: their digest credentials and TLS, as
``KazooClient`` keyword arguments (the broker's web console, ``--console-zk-*``).

:Status: Beta

The agents write their znodes with ``--zk-auth USER:PASSWORD`` (digest ACLs: only that
user may read them) and may talk TLS to ZooKeeper's secureClientPort (``--zk-ssl``,
``--zk-ssl-ca-file``, ``--zk-ssl-cert-file``, ``--zk-ssl-key-file``; ``ha_agent.zk_auth``
and ``ha_agent.zk_tls``). A reader needs the same: :func:`parse_digest` takes the same
``USER:PASSWORD`` or ``@FILE`` text, :func:`check_tls_files` the same files, and
:func:`kazoo_options` gives the client's arguments: the server's certificate checked
against the CA (the system's without one) and its name against the address. A reader
creates nothing, so no ACL of its own. Kazoo retries a refused TLS handshake until its
start times out, which would hide a wrong CA: :func:`tls_problem` makes one handshake and
says why it failed. The password is never in a message nor a ``repr``.
"""

from __future__ import annotations

import errno
import os
import selectors
import socket
import ssl
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "TlsFileError",
    "ZkAccess",
    "ZkDigest",
    "check_tls_files",
    "connect_refusal",
    "kazoo_options",
    "parse_digest",
    "tls_context",
    "tls_failure",
    "tls_problem",
    "tls_reason",
]


@dataclass(frozen=True)
class ZkDigest:
    user: str
    password: str = field(repr=False)


@dataclass(frozen=True)
class ZkAccess:
    """The digest (None: none) and the TLS settings (``tls`` False: plain)."""

    digest: ZkDigest | None = None
    tls: bool = False
    ca_file: str | None = None  #: None: the system's CAs
    cert_file: str | None = None
    key_file: str | None = None


def parse_digest(text: str, option: str) -> ZkDigest:
    """``USER:PASSWORD``, or ``@FILE`` whose first line is that.

    :raises ValueError: naming ``option`` (and the file), never the password."""
    source = option
    if text.startswith("@"):
        path = text[1:]
        try:
            text = Path(path).read_text(encoding="utf-8").splitlines()[0].strip()
        except (OSError, UnicodeDecodeError, IndexError) as exc:
            raise ValueError(f"{option}: cannot read {path!r}: {type(exc).__name__}") from None
        source = f"{option} file {path!r}"
    user, colon, password = text.partition(":")
    if not colon or not user or not password:
        raise ValueError(f"{source}: expected USER:PASSWORD")
    return ZkDigest(user, password)


def check_tls_files(prefix: str, ca: str | None, cert: str | None, key: str | None) -> None:
    """:raises ValueError: a file that is not there, or a certificate without its key
    (``prefix``: the options' common start, e.g. ``console-zk-ssl``)."""
    if bool(cert) != bool(key):
        raise ValueError(f"{prefix}-cert-file and {prefix}-key-file go together")
    for option, path in (("ca-file", ca), ("cert-file", cert), ("key-file", key)):
        if path and not Path(path).is_file():
            raise ValueError(f"{prefix}-{option}: no such file {path!r}")


def kazoo_options(access: ZkAccess) -> dict[str, Any]:
    """``KazooClient`` keyword arguments for ``access`` (empty: plain, anonymous)."""
    options: dict[str, Any] = {}
    if access.tls:
        options.update(
            use_ssl=True,
            ca=access.ca_file,
            certfile=access.cert_file,
            keyfile=access.key_file,
            verify_certs=True,
            check_hostname=True,
        )
    if access.digest is not None:
        options["auth_data"] = [("digest", f"{access.digest.user}:{access.digest.password}")]
    return options


class TlsFileError(ValueError):
    """A TLS file that does not load: the message names its option, ``reason`` says why."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def tls_context(
    ca_file: str | None, cert_file: str | None, key_file: str | None, prefix: str
) -> ssl.SSLContext:
    """The client context kazoo makes from these files: the server's certificate checked
    against ``ca_file`` (the system's CAs without one), ``cert_file``/``key_file`` presented.

    :raises TlsFileError: a file that does not load, naming its option (``prefix``: the
        options' common start, e.g. ``--zk-ssl``)."""
    context = ssl.create_default_context()
    try:
        if ca_file:
            context.load_verify_locations(ca_file)
    except (OSError, ssl.SSLError) as exc:
        reason = tls_reason(exc)
        raise TlsFileError(f"{prefix}-ca-file {ca_file!r}: {reason}", reason) from None
    try:
        if cert_file and key_file:
            context.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as exc:
        reason = tls_reason(exc)
        options = f"{prefix}-cert-file/{prefix}-key-file"
        raise TlsFileError(f"{options} {cert_file!r}: {reason}", reason) from None
    return context


def tls_failure(hosts: str, context: ssl.SSLContext, timeout: float) -> str | None:
    """One TLS handshake to each address of ``hosts`` (a ZooKeeper connection string; a
    chroot path may follow), stopping at the first that succeeds: the first failure as
    ``HOST:PORT: TLS: REASON``, or None when one succeeded or none answered at all (a server
    down is not a TLS failure: kazoo retries)."""
    failure = None
    for item in hosts.split("/", 1)[0].split(","):
        host, _, port = item.strip().rpartition(":")
        host, port = (host, port) if host else (port, "2181")
        name = host.strip("[]")
        try:
            with (
                socket.create_connection((name, int(port)), timeout=timeout) as raw,
                context.wrap_socket(raw, server_hostname=name),
            ):
                return None
        except ssl.SSLCertVerificationError as exc:
            reason = f"certificate verify failed: {tls_reason(exc)}"
        except ssl.SSLError as exc:
            reason = f"handshake failed ({tls_reason(exc)}): is it ZooKeeper's secureClientPort?"
        except (OSError, ValueError):
            continue  # not answering (or no port number): not a TLS failure
        failure = failure or f"{host}:{port}: TLS: {reason}"
    return failure


def _addresses(hosts: str) -> list[tuple[str, str, int | None]]:
    """``(NAME, HOST, PORT)`` of each item of a ZooKeeper connection string (a chroot path
    may follow; the port defaults to 2181); PORT None when it is no number."""
    found: list[tuple[str, str, int | None]] = []
    for item in hosts.split("/", 1)[0].split(","):
        host, _, port = item.strip().rpartition(":")
        host, port = (host, port) if host else (port, "2181")
        found.append((f"{host}:{port}", host.strip("[]"), int(port) if port.isdigit() else None))
    return found


def connect_refusal(hosts: str, timeout: float) -> tuple[bool, str | None]:
    """A TCP connection to every address of ``hosts`` at once, for at most ``timeout``
    seconds, to tell a ZooKeeper that is not there from one that does not answer (kazoo
    retries a refused connection until its own timeout, saying nothing).

    ``(True, None)`` as soon as one address accepts; ``(False, REASON)`` when every address
    failed for certain (``connection refused``, a name that does not resolve: one line,
    ``NAME: REASON; ...`` when the reasons differ); ``(False, None)`` when some did not
    answer in time. The connections are closed at once."""
    deadline = time.monotonic() + timeout
    reasons: dict[str, str] = {}
    pending: dict[socket.socket, str] = {}
    selector = selectors.DefaultSelector()
    try:
        for name, host, port in _addresses(hosts):
            if port is None:
                reasons.setdefault(name, "no port number")
                continue
            try:
                infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            except OSError as exc:
                reasons.setdefault(name, f"cannot resolve {host!r} ({exc.strerror or exc})")
                continue
            for family, kind, proto, _, address in infos:
                sock = socket.socket(family, kind, proto)
                sock.setblocking(False)
                code = sock.connect_ex(address)
                if code == 0:
                    sock.close()
                    return True, None
                if code not in (errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EAGAIN):
                    sock.close()
                    reasons.setdefault(name, os.strerror(code).lower())
                    continue
                pending[sock] = name
                selector.register(sock, selectors.EVENT_WRITE)
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                return False, None
            for key, _ in selector.select(left):
                ready = key.fileobj
                assert isinstance(ready, socket.socket)
                sock = ready
                code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if code == 0:
                    return True, None
                name = pending.pop(sock)
                selector.unregister(sock)
                sock.close()
                reasons.setdefault(name, os.strerror(code).lower())
    finally:
        for sock in pending:
            sock.close()
        selector.close()
    if len(set(reasons.values())) == 1:
        return False, next(iter(reasons.values()))
    return False, "; ".join(f"{name}: {reason}" for name, reason in reasons.items()) or None


def tls_problem(hosts: str, access: ZkAccess, timeout: float = 2.0) -> str | None:
    """Why TLS to ``hosts`` fails, as one line (kazoo only says it timed out): see
    :func:`tls_failure`; a file that does not load as ``TLS files: REASON``."""
    try:
        context = tls_context(access.ca_file, access.cert_file, access.key_file, "tls")
    except TlsFileError as exc:
        return f"TLS files: {exc.reason}"
    return tls_failure(hosts, context, timeout)


def tls_reason(exc: BaseException) -> str:
    """An SSL or OS error's reason in a few words (the verify message when there is one)."""
    if isinstance(exc, ssl.SSLError):
        return str(getattr(exc, "verify_message", None) or exc.reason or exc)
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)
