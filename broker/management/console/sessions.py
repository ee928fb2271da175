"""Console logins: the session store and the cookie that carries a session.

:Status: Beta

Contract
========

- A person logs in with a user of the broker's user database (the same check as an AMQP
  PLAIN login and as HTTP Basic on the API: :class:`~broker.management.managed.Authenticator`)
  who has at least one management role; the broker then sets the cookie :data:`COOKIE`
  (suffixed with the management port: ``qpidd_console_8672``), a
  random 256-bit token (``HttpOnly``, ``SameSite=Strict``, ``Path=/``, and ``Secure`` when
  the management API speaks HTTPS). Only the token's SHA-256 is kept.
- A session lasts :data:`IDLE_TIMEOUT` seconds after its last request and
  :data:`MAX_AGE` at most; logging out ends it. At most :data:`MAX_SESSIONS` live at once
  (the oldest goes). Sessions live in the broker's memory: a restart logs everyone out.
- The API accepts the cookie instead of HTTP Basic (:meth:`SessionStore.user_of`), with the
  same roles (:mod:`broker.security.roles`). A change (any method but GET/HEAD) made with
  the cookie must also carry the header :data:`CSRF_HEADER`, which a page of another site
  cannot send without CORS (this API grants none), else 403.
- The user's password is never kept; the roles are read again on every request.

The store is a plain object with an injected clock; the HTTP side is in
:mod:`broker.management.console.pages`.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "COOKIE",
    "CSRF_HEADER",
    "IDLE_TIMEOUT",
    "MAX_AGE",
    "MAX_SESSIONS",
    "Session",
    "SessionStore",
]

COOKIE = "qpidd_console"
CSRF_HEADER = "X-Qpidd-Console"
#: Seconds a session lives after its last request.
IDLE_TIMEOUT = 30 * 60.0
#: Seconds a session lives at most.
MAX_AGE = 12 * 3600.0
MAX_SESSIONS = 1000


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()


@dataclass
class Session:
    user: str
    created: float
    last_seen: float


class SessionStore:
    """Live console sessions by token digest. THREAD UNSAFE: the event loop owns it."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._sessions: OrderedDict[str, Session] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sessions)

    def create(self, user: str) -> str:
        """A new session for ``user``; returns the token to set in the cookie."""
        now = self._clock()
        token = secrets.token_urlsafe(32)
        self._sessions[_digest(token)] = Session(user, now, now)
        while len(self._sessions) > MAX_SESSIONS:
            self._sessions.popitem(last=False)
        return token

    def user_of(self, token: str | None) -> str | None:
        """The user of a live session, else None (unknown, ended or timed out)."""
        if not token or len(token) > 128:
            return None
        key = _digest(token)
        session = self._sessions.get(key)
        if session is None:
            return None
        now = self._clock()
        if now - session.last_seen > IDLE_TIMEOUT or now - session.created > MAX_AGE:
            del self._sessions[key]
            return None
        session.last_seen = now
        self._sessions.move_to_end(key)
        return session.user

    def end(self, token: str | None) -> str | None:
        """Log out: forget the session; its user, or None if there was none."""
        if not token or len(token) > 128:
            return None
        session = self._sessions.pop(_digest(token), None)
        return None if session is None else session.user
