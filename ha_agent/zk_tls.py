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

import ssl
from dataclasses import dataclass
from typing import Any

from common.zk_access import ZkAccess, check_tls_files, kazoo_options, tls_context, tls_failure

__all__ = ["ZkTls", "tls_refusal", "zk_tls"]


@dataclass(frozen=True)
class ZkTls:
    ca_file: str | None = None  #: None: the system's CAs
    cert_file: str | None = None
    key_file: str | None = None

    def kazoo_options(self) -> dict[str, Any]:
        return kazoo_options(ZkAccess(None, True, self.ca_file, self.cert_file, self.key_file))

    def context(self) -> ssl.SSLContext:
        """The client context kazoo makes from :meth:`kazoo_options`.
        :raises ValueError: a file that cannot be loaded (naming the option)."""
        return tls_context(self.ca_file, self.cert_file, self.key_file, "--zk-ssl")


def zk_tls(
    enabled: bool, ca_file: str | None, cert_file: str | None, key_file: str | None
) -> ZkTls | None:
    """The TLS settings of the command line: None without TLS (neither ``--zk-ssl`` nor a
    file). :raises ValueError: naming the bad option (a missing file, a certificate
    without its key, a file that does not load)."""
    if not (enabled or ca_file or cert_file or key_file):
        return None
    check_tls_files("--zk-ssl", ca_file, cert_file, key_file)
    tls = ZkTls(ca_file, cert_file, key_file)
    tls.context()  # a file that does not load: now, naming it
    return tls


def tls_refusal(hosts: str, tls: ZkTls, timeout: float = 5.0) -> str | None:
    """One handshake to each of ``hosts`` (stopping at the first that succeeds): the first
    TLS failure as one line, ``ZooKeeper HOST:PORT: TLS: REASON``, or None when one
    succeeded or none answered at all (ZooKeeper down: kazoo retries)."""
    failure = tls_failure(hosts, tls.context(), timeout)
    return None if failure is None else f"ZooKeeper {failure}"
