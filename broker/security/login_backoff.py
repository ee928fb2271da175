"""The back-off after failed logins: a source or a user that keeps failing waits, never is
locked out.

:Status: Beta

A password guess costs the broker one scrypt hash (about 50 ms of a core). Without a limit
one client tries 20-40 passwords a second, and its hashes take cores from everyone else.
This core decides how long a login whose password must be hashed waits before the hash:
nothing for the first :attr:`BackoffPolicy.free_failures` recent failures of its source
and of its user, then a delay that doubles with each further failure up to
:attr:`BackoffPolicy.max_delay`. It never refuses: the right password after the wait logs
in, so a person who mistyped, or a user someone else is guessing, is slowed, not shut out.

Contract
========

- Plain object, no I/O, no clock: time comes in (``now``, seconds of a monotonic clock).
  Events in (:meth:`LoginBackoff.failed`), a delay out
  (:meth:`~LoginBackoff.delay`), in ``[0, max_delay]``. THREAD UNSAFE: the event loop owns
  it.
- Failures are counted per **source** (the client's IPv4 address, or its IPv6 /64: one
  machine's many addresses) and per **user** name; the larger count decides. A failure is
  forgotten :attr:`BackoffPolicy.forget_after` seconds at a time (a leaky count, capped
  where the delay stops growing), so a quiet source or user is back to no delay within
  ``forget_after * (cap - free_failures + 1)`` seconds.
- A success does not clear the counts (or one known password would reset a guesser).
- **Exempt**: the replication user (``ha-username``) logging in from one of the
  ``ha-brokers-url`` addresses is never delayed and its failures are not counted (else
  anyone who can reach the port could keep the backups out of the in-sync set by guessing
  that user's password). ``exempt(source, user)`` is the caller's rule
  (:func:`replication_exemption`).
- Memory is bounded: at most :attr:`BackoffPolicy.capacity` sources and as many users are
  tracked; past that the least recently failed goes first.

Only logins whose password must be hashed ask (:class:`~broker.security.sasl.PasswordCheck`):
a password verified before is checked at once (the agents' and the links' repeated logins),
EXTERNAL and ANONYMOUS hash nothing. The shell that waits is
:func:`broker.security.password_checks.run_password_check`.
"""

from __future__ import annotations

import ipaddress
import math
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

__all__ = ["BackoffPolicy", "LoginBackoff", "replication_exemption", "source_key"]


@dataclass(frozen=True)
class BackoffPolicy:
    """The numbers of the back-off (seconds)."""

    #: Recent failures of a source or user before its logins wait.
    free_failures: int = 3
    #: The wait after one failure more, doubling with each further one ...
    first_delay: float = 0.25
    #: ... up to this (below the AMQP handshake timeout and clients' socket timeouts).
    max_delay: float = 5.0
    #: One failure of a source or user is forgotten each this many seconds.
    forget_after: float = 5.0
    #: Sources tracked, and users tracked, at most.
    capacity: int = 10_000

    @property
    def cap(self) -> int:
        """The count where the delay reached :attr:`max_delay`: counted no further."""
        steps = math.ceil(math.log2(max(self.max_delay / self.first_delay, 1.0)))
        return self.free_failures + steps + 1

    def delay_of(self, failures: int) -> float:
        """The wait of a login whose source or user has ``failures`` recent failures."""
        over = failures - self.free_failures
        if over < 0:
            return 0.0
        return min(self.max_delay, self.first_delay * 2.0 ** min(over, 64))


@dataclass
class _Count:
    failures: float
    at: float


@dataclass
class _Table:
    """Leaky failure counts by key, least recently failed first."""

    policy: BackoffPolicy
    counts: OrderedDict[str, _Count] = field(default_factory=OrderedDict)

    def current(self, key: str | None, now: float) -> float:
        if key is None:
            return 0.0
        count = self.counts.get(key)
        if count is None:
            return 0.0
        leaked = max(0.0, now - count.at) / self.policy.forget_after
        left = count.failures - leaked
        if left <= 0:
            del self.counts[key]
            return 0.0
        return left

    def add(self, key: str | None, now: float) -> None:
        if key is None:
            return
        failures = min(self.current(key, now) + 1.0, float(self.policy.cap))
        self.counts[key] = _Count(failures, now)
        self.counts.move_to_end(key)
        while len(self.counts) > self.policy.capacity:
            self.counts.popitem(last=False)


def source_key(host: str | None) -> str | None:
    """The source a client's failures are counted under: its IPv4 address, the /64 of its
    IPv6 address (an IPv4-mapped one as IPv4), the text itself when it is no address."""
    if not host:
        return None
    text = host.strip("[]").partition("%")[0]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return text
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


Exempt = Callable[[str | None, str], bool]


def replication_exemption(user: str | None, addresses: Iterable[str]) -> Exempt:
    """The rule that exempts ``user`` (``ha-username``) logging in from one of
    ``addresses`` (the IP addresses of ``ha-brokers-url``); nobody without a user."""
    sources = frozenset(k for k in map(source_key, addresses) if k is not None)

    def exempt(source: str | None, login: str) -> bool:
        return user is not None and login == user and source_key(source) in sources

    return exempt


def _nobody(source: str | None, user: str) -> bool:
    return False


class LoginBackoff:
    """Failed logins by source and by user, and the wait they earn (see the module)."""

    def __init__(self, policy: BackoffPolicy | None = None, exempt: Exempt = _nobody) -> None:
        self.policy = policy or BackoffPolicy()
        self.exempt = exempt
        self._sources = _Table(self.policy)
        self._users = _Table(self.policy)

    def __len__(self) -> int:
        """Sources and users tracked."""
        return len(self._sources.counts) + len(self._users.counts)

    def failures(self, source: str | None, user: str, now: float) -> int:
        """The recent failures that decide the wait of a login (the larger count; a failure
        partly forgotten still counts whole)."""
        if self.exempt(source, user):
            return 0
        left = max(self._sources.current(source_key(source), now), self._users.current(user, now))
        return math.ceil(left - 1e-9)

    def delay(self, source: str | None, user: str, now: float) -> float:
        """Seconds a login of ``user`` from ``source`` waits before its password is
        hashed: 0 for an exempt login or few recent failures, at most ``max_delay``."""
        return self.policy.delay_of(self.failures(source, user, now))

    def failed(self, source: str | None, user: str, now: float) -> None:
        """A login's password was wrong (or its user unknown)."""
        if self.exempt(source, user):
            return
        self._sources.add(source_key(source), now)
        self._users.add(user, now)
