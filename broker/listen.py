"""Where the broker listens (``--interface``, ``--mgmt-interface``) and how it names a peer.

An interface option is one address or a comma-separated list of them:

- ``::`` (``--interface``'s default): every IPv6 and IPv4 address, as one dual-stack socket
  (``IPV6_V6ONLY`` off): IPv4 clients arrive as IPv4-mapped IPv6 addresses
  (``::ffff:10.0.0.7``), which :func:`peer_address` reads back as IPv4;
- ``0.0.0.0``: every IPv4 address only; any other address, or a host name (every address
  it resolves to), that address only;
- ``127.0.0.1,::1`` (``--mgmt-interface``'s default): loopback on both families, one
  socket each, on the same port (with port 0, the one the system chose for the first).

Where the host has no IPv6 (no ``::1``: IPv6 disabled or not built), the IPv6 addresses of
the list are left out and ``::`` means ``0.0.0.0``; a list left empty is an error.

A listener's queue of connections the kernel accepted and the broker has not taken yet
(its ``listen`` backlog) is :data:`BACKLOG` long (the kernel caps it at
``net.core.somaxconn``, 4096 by default since Linux 5.4). It was 1,024: after a fail-over
at 10,000 queues the new primary's loop, starved, took the 2,000 clients' reconnections
slower than they came; the queue filled, the kernel dropped 1,747 SYNs (``nstat``
``TcpExtListenOverflows``), and the takeover probe of another node's agent
(``ha_agent/listener_probe.py``: "does its broker still accept connections?") got no
answer within 0.3 s, took the healthy primary for gone and took its epoch (the 30-minute
soak of 2026-11-30, soak30-A2).

A failure to bind is a :class:`ListenError` naming the listener, its options and the
address that failed. Sockets are made here and accepted by :class:`broker.accept.Acceptor`
(the AMQP ports: many connections a poll of the loop, where uvloop's servers take one) or
handed to aiohttp (``SockSite``) by the shells.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import socket
import ssl as ssl_module
from collections.abc import Callable

from broker.accept import Acceptor

__all__ = [
    "BACKLOG",
    "DUAL_STACK",
    "ListenError",
    "Listener",
    "host_has_ipv6",
    "listen_addresses",
    "open_sockets",
    "peer_address",
    "serve",
    "unmapped",
]

#: A listener's backlog (see the module docstring): more than a fail-over's reconnection
#: storm (2,000 clients at once in the scale scenario); the kernel caps it at somaxconn.
BACKLOG = 4096

#: The wildcard that listens on IPv6 and IPv4 (one dual-stack socket).
DUAL_STACK = "::"
_IPV4_ANY = "0.0.0.0"


class ListenError(Exception):
    """A listener could not be opened: ``str()`` is the one line naming it, the options
    that set it, its address and why (``qpidd: error: cannot listen on ...``)."""


def host_has_ipv6() -> bool:
    """Whether this host can listen on IPv6 (an IPv6 socket binds ``::1``)."""
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


def _is_ipv6(address: str) -> bool:
    try:
        return isinstance(ipaddress.ip_address(address.partition("%")[0]), ipaddress.IPv6Address)
    except ValueError:
        return False  # a host name: resolved when bound


def listen_addresses(value: str, *, ipv6: bool) -> list[str]:
    """The addresses an interface option names (without brackets, in order, once each).

    :raises ValueError: nothing is left to listen on (only IPv6 addresses on a host
        without IPv6, or an empty list).
    """
    addresses: list[str] = []
    for item in value.split(","):
        address = item.strip().removeprefix("[").removesuffix("]")
        if not address:
            continue
        if not ipv6 and address == DUAL_STACK:
            address = _IPV4_ANY
        elif not ipv6 and _is_ipv6(address):
            continue
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise ValueError(f"no address to listen on in {value!r} (this host has no IPv6)")
    return addresses


def _host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _bind(address: str, port: int) -> list[socket.socket]:
    """Bound sockets for ``address`` (every address a host name resolves to)."""
    found = socket.getaddrinfo(
        address, port, socket.AF_UNSPEC, socket.SOCK_STREAM, 0, socket.AI_PASSIVE
    )
    made: list[socket.socket] = []
    try:
        for family, kind, proto, _name, sockaddr in found:
            sock = socket.socket(family, kind, proto)
            made.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:  # only the wildcard :: takes IPv4 too
                v6only = 0 if address == DUAL_STACK else 1
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, v6only)
            sock.bind((sockaddr[0], port, *sockaddr[2:]) if port else sockaddr)
            port = port or sock.getsockname()[1]
    except BaseException:
        for sock in made:
            sock.close()
        raise
    return made


def open_sockets(what: str, names: str, value: str, port: int) -> list[socket.socket]:
    """Bound sockets on every address of ``value``, all on one port (``port``, or with 0
    the one the system chose for the first), not yet listening.

    :raises ListenError: naming ``what`` (``AMQP``), its options ``names``
        (``--interface/--port``) and the address that failed, or that none is left.
    """
    try:
        addresses = listen_addresses(value, ipv6=host_has_ipv6())
    except ValueError as exc:
        raise ListenError(f"cannot listen ({what}, {names}): {exc}") from None
    sockets: list[socket.socket] = []
    try:
        for address in addresses:
            try:
                sockets += _bind(address, port)
            except socket.gaierror as exc:
                reason = f"cannot resolve the address ({exc.strerror})"
                raise ListenError(
                    f"cannot listen on {_host_port(address, port)} ({what}, {names}): {reason}"
                ) from exc
            except OSError as exc:
                reason = os.strerror(exc.errno).lower() if exc.errno else str(exc)
                raise ListenError(
                    f"cannot listen on {_host_port(address, port)} ({what}, {names}): {reason}"
                ) from exc
            port = port or sockets[0].getsockname()[1]
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


class Listener:
    """The acceptors of one listener (one per socket, :class:`broker.accept.Acceptor`),
    started and closed together."""

    def __init__(self, acceptors: list[Acceptor]) -> None:
        self.acceptors = acceptors

    @property
    def sockets(self) -> list[socket.socket]:
        return [a.sock for a in self.acceptors if a.sock is not None]

    @property
    def port(self) -> int:
        """The port listened on (0 when closed)."""
        return next((int(s.getsockname()[1]) for s in self.sockets), 0)

    async def start_serving(self) -> None:
        """Listen and accept (a listener made with ``start_serving=False``)."""
        for acceptor in self.acceptors:
            acceptor.start()

    def close(self) -> None:
        for acceptor in self.acceptors:
            acceptor.close()

    async def wait_closed(self) -> None:
        """Closed at :meth:`close` (the connections accepted are the broker's to close)."""


async def serve(
    factory: Callable[[], asyncio.Protocol],
    what: str,
    names: str,
    value: str,
    port: int,
    *,
    ssl: ssl_module.SSLContext | None = None,
    backlog: int = 0,
    start_serving: bool = True,
) -> Listener:
    """Listen with ``factory`` on every address of ``value`` (:func:`open_sockets`);
    ``start_serving`` False: bound, not listening yet, until :meth:`Listener.start_serving`
    (a connection attempt meanwhile is refused at once, not left in a backlog nobody reads).

    :raises ListenError: as :func:`open_sockets`.
    """
    backlog = backlog or BACKLOG
    listener = Listener(
        [
            Acceptor(sock, factory, backlog=backlog, ssl=ssl)
            for sock in open_sockets(what, names, value, port)
        ]
    )
    if start_serving:
        await listener.start_serving()
    return listener


def peer_address(peername: object) -> tuple[str, str]:
    """A connected socket's ``peername`` as (host, ``host:port``): an IPv4-mapped IPv6
    address (an IPv4 client of a dual-stack socket) as the IPv4 address it is, so the
    loopback rule, logs and connection names see ``127.0.0.1``, not ``::ffff:127.0.0.1``;
    an IPv6 host in brackets before its port. Not an IP peer: its name, twice."""
    if not isinstance(peername, tuple) or len(peername) < 2:
        return str(peername), str(peername)
    host = unmapped(str(peername[0]))
    return host, _host_port(host, int(peername[1]))


def unmapped(host: str) -> str:
    """``host`` with an IPv4-mapped IPv6 address (``::ffff:10.0.0.7``) as IPv4."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return host
