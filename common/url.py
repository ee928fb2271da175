"""Broker URLs: the one place that parses and formats them.

The grammar is qpid's (seed 001, section 1.12.3, footnote [a]; qpid-cpp ``Url.cpp``)::

    url      = ["amqp:"] [ user ["/" password] "@" ] addr ("," addr)*
    addr     = tcp_addr / rdma_addr / ssl_addr
    tcp_addr = ["tcp:"] host [":" port]
    rdma_addr = "rdma:" host [":" port]
    ssl_addr = "ssl:" host [":" port]

``host`` is a DNS name or IPv4 address (letters, digits and ``-._~``) or a bracketed IPv6
literal (``[::1]``). ``port`` defaults to 5672 and must lie in 1..65535. ``user`` may not
contain ``/``, ``@``, ``:`` or ``,``; ``password`` may not contain ``@``; neither may
contain whitespace or control characters. Scheme names and the ``amqp:`` prefix are
matched without regard to case.

Like qpid's ``Url::str()``, :func:`format_url` writes the explicit canonical form, which
:func:`parse_url` reads back to an equal value::

    amqp:guest/guest@tcp:node1:5672,ssl:[::1]:5671

:class:`Address` and :class:`BrokerUrl` validate themselves, so any value that exists
can be formatted and parsed back. ``str(BrokerUrl)`` contains the password; log
:meth:`BrokerUrl.redacted` instead.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field

__all__ = [
    "DEFAULT_PORT",
    "SCHEMES",
    "Address",
    "BrokerUrl",
    "format_address",
    "format_url",
    "parse_address",
    "parse_url",
]

DEFAULT_PORT = 5672
SCHEMES = ("tcp", "ssl", "rdma")
_PREFIX = "amqp:"

_HOST = re.compile(r"[A-Za-z0-9._~-]+")
_PORT = re.compile(r"[0-9]{1,5}")
_USER = re.compile(r"[^/@:,\s\x00-\x1f\x7f]+")
_PASSWORD = re.compile(r"[^@\s\x00-\x1f\x7f]*")


def _check_host(host: str) -> str | None:
    """Why ``host`` (as stored, IPv6 without brackets) is not a valid host, or None."""
    if not host:
        return "empty host"
    if ":" in host:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return f"invalid IPv6 address {host!r}"
        return None
    if _HOST.fullmatch(host) is None:
        return f"invalid host {host!r}"
    return None


def _check_port(port: int) -> str | None:
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        return f"port {port!r} is outside 1..65535"
    return None


@dataclass(frozen=True, slots=True)
class Address:
    """One broker address. ``host`` holds an IPv6 literal without its brackets."""

    host: str
    port: int = DEFAULT_PORT
    scheme: str = "tcp"

    def __post_init__(self) -> None:
        problem = (
            (None if self.scheme in SCHEMES else f"unknown scheme {self.scheme!r}")
            or _check_host(self.host)
            or _check_port(self.port)
        )
        if problem:
            raise ValueError(f"invalid address: {problem}")

    @property
    def host_text(self) -> str:
        """The host as written in a URL: IPv6 literals in brackets."""
        return f"[{self.host}]" if ":" in self.host else self.host

    def __str__(self) -> str:
        """``host:port`` (``[::1]:5672`` for IPv6), without the scheme."""
        return f"{self.host_text}:{self.port}"


@dataclass(frozen=True, slots=True)
class BrokerUrl:
    """A list of broker addresses with optional credentials."""

    addresses: tuple[Address, ...]
    user: str | None = None
    password: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.addresses, tuple) or not self.addresses:
            raise ValueError("invalid broker URL: needs a non-empty tuple of addresses")
        if not all(isinstance(a, Address) for a in self.addresses):
            raise ValueError("invalid broker URL: addresses must be Address values")
        if self.user is not None and _USER.fullmatch(self.user) is None:
            raise ValueError(f"invalid broker URL: invalid user name {self.user!r}")
        if self.password is not None:
            if self.user is None:
                raise ValueError("invalid broker URL: a password needs a user")
            if _PASSWORD.fullmatch(self.password) is None:
                raise ValueError("invalid broker URL: invalid character in password")

    def __str__(self) -> str:
        return format_url(self)

    def redacted(self) -> str:
        """The URL with any password replaced by ``***``, fit for logs and status output."""
        if self.password is None:
            return format_url(self)
        return format_url(BrokerUrl(self.addresses, self.user, "***"))


def format_address(address: Address) -> str:
    """``scheme:host:port``, the form an address takes inside a URL."""
    return f"{address.scheme}:{address}"


def format_url(url: BrokerUrl) -> str:
    """The canonical text of ``url``: ``amqp:[user[/password]@]scheme:host:port,...``."""
    credentials = ""
    if url.user is not None:
        credentials = url.user
        if url.password is not None:
            credentials += "/" + url.password
        credentials += "@"
    return _PREFIX + credentials + ",".join(format_address(a) for a in url.addresses)


def parse_url(text: str, default_port: int = DEFAULT_PORT) -> BrokerUrl:
    """Parse a broker URL such as ``node1,node2`` or ``amqp:u/p@tcp:h:5672,ssl:h2:5671``.

    Surrounding whitespace is ignored. Addresses without a port get ``default_port``.

    :raises ValueError: naming ``text`` and what is wrong with it.
    """

    def fail(reason: str) -> ValueError:
        return ValueError(f"invalid broker URL {text!r}: {reason}")

    _check_default_port(default_port)
    rest = text.strip() if isinstance(text, str) else ""
    if not rest:
        raise fail("empty")
    if rest[: len(_PREFIX)].lower() == _PREFIX:
        rest = rest[len(_PREFIX) :]
    user: str | None = None
    password: str | None = None
    if "@" in rest:
        credentials, rest = rest.split("@", 1)
        user, slash, pw = credentials.partition("/")
        if not user:
            raise fail("empty user name before '@'")
        if _USER.fullmatch(user) is None:
            raise fail(f"invalid user name {user!r}")
        if slash:
            password = pw
            if _PASSWORD.fullmatch(password) is None:
                raise fail("invalid character in password")
    if not rest:
        raise fail("no address")
    addresses: list[Address] = []
    for part in rest.split(","):
        if not part:
            raise fail("empty address")
        address = _parse_addr(part, default_port)
        if isinstance(address, str):
            raise fail(address)
        addresses.append(address)
    return BrokerUrl(tuple(addresses), user, password)


def parse_address(text: str, default_port: int = DEFAULT_PORT) -> Address:
    """Parse one address, ``[scheme:]host[:port]`` (e.g. the CLI's ``-b node1:5673``).

    :raises ValueError: naming ``text`` and what is wrong with it.
    """
    _check_default_port(default_port)
    stripped = text.strip() if isinstance(text, str) else ""
    if not stripped:
        raise ValueError(f"invalid broker address {text!r}: empty")
    address = _parse_addr(stripped, default_port)
    if isinstance(address, str):
        raise ValueError(f"invalid broker address {text!r}: {address}")
    return address


def _check_default_port(default_port: int) -> None:
    problem = _check_port(default_port)
    if problem:
        raise ValueError(f"invalid default port: {problem}")


def _parse_addr(text: str, default_port: int) -> Address | str:
    """An :class:`Address`, or the reason ``text`` is not one."""
    scheme = "tcp"
    rest = text
    head, colon, tail = text.partition(":")
    if colon and head.lower() in SCHEMES:
        scheme, rest = head.lower(), tail
    elif colon and not head.startswith("[") and ":" in tail and head.isalpha():
        return f"unknown scheme {head!r} in address {text!r}"
    if rest.startswith("["):
        close = rest.find("]")
        if close < 0:
            return f"missing ']' in address {text!r}"
        host, after = rest[1:close], rest[close + 1 :]
        if not host or ":" not in host:
            return f"invalid IPv6 address {host!r} in address {text!r}"
    elif rest.count(":") > 1:
        return f"too many ':' in address {text!r} (IPv6 addresses go in brackets: [::1]:5672)"
    else:
        host, colon, port_text = rest.partition(":")
        after = colon + port_text
    if not host:
        return f"empty host in address {text!r}"
    if after == "":
        port = default_port
    elif after.startswith(":"):
        port_text = after[1:]
        if _PORT.fullmatch(port_text) is None:
            return f"invalid port {port_text!r} in address {text!r}"
        port = int(port_text)
        if not 1 <= port <= 65535:
            return f"port {port} outside 1..65535 in address {text!r}"
    else:
        return f"unexpected {after!r} after host in address {text!r}"
    problem = _check_host(host)
    if problem:
        return f"{problem} in address {text!r}"
    return Address(host, port, scheme)
