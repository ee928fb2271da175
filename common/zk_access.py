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

import socket
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "ZkAccess",
    "ZkDigest",
    "check_tls_files",
    "kazoo_options",
    "parse_digest",
    "tls_problem",
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


def tls_problem(hosts: str, access: ZkAccess, timeout: float = 2.0) -> str | None:
    """Why TLS to ``hosts`` fails, as one line (kazoo only says it timed out): one handshake
    to each address until one succeeds. None when one succeeded or none answered."""
    context = ssl.create_default_context()
    try:
        if access.ca_file:
            context.load_verify_locations(access.ca_file)
        if access.cert_file and access.key_file:
            context.load_cert_chain(access.cert_file, access.key_file)
    except (OSError, ssl.SSLError) as exc:
        return f"TLS files: {_reason(exc)}"
    problem = None
    for item in hosts.split("/", 1)[0].split(","):  # a chroot path may follow the hosts
        host, _, port = item.strip().rpartition(":")
        host, port = (host, port) if host else (port, "2181")
        try:
            with (
                socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as raw,
                context.wrap_socket(raw, server_hostname=host.strip("[]")),
            ):
                return None
        except ssl.SSLCertVerificationError as exc:
            problem = problem or f"{host}:{port}: TLS: certificate verify failed: {_reason(exc)}"
        except ssl.SSLError as exc:
            problem = problem or (
                f"{host}:{port}: TLS: handshake failed ({_reason(exc)}):"
                " is it ZooKeeper's secureClientPort?"
            )
        except (OSError, ValueError):
            continue  # not answering: not a TLS failure
    return problem


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError):
        return str(getattr(exc, "verify_message", None) or exc.reason or exc)
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)
