"""TLS to ZooKeeper for the agent and ``qpid-ha --zk`` (issue 13, item 5).

ZooKeeper 3.5+ serves TLS on its ``secureClientPort`` (with the Netty connection factory);
give that port in ``--zk`` and ``--zk-ssl-ca-file CA`` (or ``--zk-ssl`` to trust the
system's CAs only). The server's certificate is checked against the CA and the address in
``--zk`` against its names; ``--zk-ssl-cert-file``/``--zk-ssl-key-file`` present a client
certificate (for a server with ``ssl.clientAuth=need``). :meth:`ZkTls.kazoo_options` are
``KazooClient``'s keyword arguments.

kazoo retries a refused handshake until its start times out ("Connection time-out"),
which would hide a wrong CA: :func:`tls_refusal` makes one handshake to each address first
and returns the first certificate failure as one line (``certificate verify failed:
unable to get local issuer certificate``), which the agent and ``qpid-ha`` print.
"""

from __future__ import annotations

import socket
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["ZkTls", "tls_refusal", "zk_tls"]


@dataclass(frozen=True)
class ZkTls:
    ca_file: str | None = None  #: None: the system's CAs
    cert_file: str | None = None
    key_file: str | None = None

    def kazoo_options(self) -> dict[str, Any]:
        return {
            "use_ssl": True,
            "ca": self.ca_file,
            "certfile": self.cert_file,
            "keyfile": self.key_file,
            "verify_certs": True,
            "check_hostname": True,
        }

    def context(self) -> ssl.SSLContext:
        """The client context kazoo makes from :meth:`kazoo_options`.
        :raises ValueError: a file that cannot be loaded (naming the option)."""
        context = ssl.create_default_context()
        try:
            if self.ca_file:
                context.load_verify_locations(self.ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"--zk-ssl-ca-file {self.ca_file!r}: {_reason(exc)}") from None
        try:
            if self.cert_file and self.key_file:
                context.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(
                f"--zk-ssl-cert-file/--zk-ssl-key-file {self.cert_file!r}: {_reason(exc)}"
            ) from None
        return context


def zk_tls(
    enabled: bool, ca_file: str | None, cert_file: str | None, key_file: str | None
) -> ZkTls | None:
    """The TLS settings of the command line: None without TLS (neither ``--zk-ssl`` nor a
    file). :raises ValueError: naming the bad option (a missing file, a certificate
    without its key, a file that does not load)."""
    if not (enabled or ca_file or cert_file or key_file):
        return None
    if bool(cert_file) != bool(key_file):
        raise ValueError("--zk-ssl-cert-file and --zk-ssl-key-file go together")
    for option, path in (
        ("--zk-ssl-ca-file", ca_file),
        ("--zk-ssl-cert-file", cert_file),
        ("--zk-ssl-key-file", key_file),
    ):
        if path and not Path(path).is_file():
            raise ValueError(f"{option}: no such file {path!r}")
    tls = ZkTls(ca_file, cert_file, key_file)
    tls.context()  # a file that does not load: now, naming it
    return tls


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError):
        return str(getattr(exc, "verify_message", None) or exc.reason or exc)
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)


def _addresses(hosts: str) -> list[tuple[str, int]]:
    addresses = []
    for item in hosts.split("/", 1)[0].split(","):  # a chroot path follows the hosts
        host, _, port = item.strip().rpartition(":")
        if not host:
            host, port = port, "2181"
        try:
            addresses.append((host.strip("[]"), int(port)))
        except ValueError:
            continue
    return addresses


def tls_refusal(hosts: str, tls: ZkTls, timeout: float = 5.0) -> str | None:
    """One handshake to each of ``hosts`` (stopping at the first that succeeds): the first
    TLS failure as one line, ``ZooKeeper HOST:PORT: TLS: REASON``, or None when one
    succeeded or none answered at all (ZooKeeper down: kazoo retries)."""
    context = tls.context()
    refusal = None
    for host, port in _addresses(hosts):
        try:
            with (
                socket.create_connection((host, port), timeout=timeout) as raw,
                context.wrap_socket(raw, server_hostname=host),
            ):
                return None
        except ssl.SSLCertVerificationError as exc:
            reason = f"certificate verify failed: {_reason(exc)}"
            refusal = refusal or f"ZooKeeper {host}:{port}: TLS: {reason}"
        except ssl.SSLError as exc:
            reason = f"handshake failed ({_reason(exc)}): is it ZooKeeper's secureClientPort?"
            refusal = refusal or f"ZooKeeper {host}:{port}: TLS: {reason}"
        except OSError:
            continue  # not answering: not a TLS failure
    return refusal
