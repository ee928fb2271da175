"""Password hashes off the event loop: a login's scrypt check runs in a small thread pool.

One scrypt verification takes about 50 ms of CPU (:mod:`broker.security.passwords`). Run on
the event loop, every login with a new or wrong password would stop every other connection
for that long: a client repeating logins would stall consumers and heartbeats (a denial of
service). :func:`run_password_check` runs a :class:`~broker.security.sasl.PasswordCheck` in
:data:`THREADS` worker threads (``hashlib.scrypt`` releases the GIL), so at most that many
cores hash at once and the loop carries on; more logins wait in the pool's queue.

Before the hash, a check waits what its back-off says
(:mod:`broker.security.login_backoff`: after repeated failures of its source or user, at
most a few seconds, ``login_delayed``), on the loop's timer, holding no thread; a wrong
password is counted there. The AMQP shell (:mod:`broker.amqp.protocol`), the management
API's Basic authentication and the console's login form all come through here (AMQP, HTTP
Basic and the console alike); the SASL state machine stays free of I/O and threads
(:meth:`~broker.security.sasl.Authenticator.begin` / ``finish``). :func:`authenticate` is
the whole login for the HTTP callers.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from broker.security.sasl import PasswordCheck
from common.log import get_logger

__all__ = ["THREADS", "LoginSteps", "authenticate", "run_password_check"]


class LoginSteps(Protocol):
    """:class:`~broker.security.sasl.Authenticator`'s two steps around the hash."""

    def begin(
        self, mechanism: str, response: bytes, peer_host: str | None, /
    ) -> str | PasswordCheck: ...

    def finish(self, check: PasswordCheck, matched: bool, /) -> str: ...


#: Hashes at once (each 16 MiB and one core for ~50 ms): the machine's cores stay shared.
THREADS = 2

_pool: ThreadPoolExecutor | None = None
#: The checks waiting for their back-off or hash.
_waiting: set[asyncio.Future[bool]] = set()


def _executor() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="password-check")
    return _pool


def run_password_check(check: PasswordCheck) -> asyncio.Future[bool]:
    """``check.run()`` in the pool after its back-off's wait: a future of the running loop,
    True when the password matched."""
    if check.backoff is None:
        return asyncio.get_running_loop().run_in_executor(_executor(), check.run)
    task = asyncio.ensure_future(_backed_off(check))
    _waiting.add(task)  # held until done (the loop keeps only a weak reference to a task)
    task.add_done_callback(_waiting.discard)
    return task


async def _backed_off(check: PasswordCheck) -> bool:
    backoff = check.backoff
    assert backoff is not None
    loop = asyncio.get_running_loop()
    delay = backoff.delay(check.peer_host, check.user, loop.time())
    if delay > 0:
        get_logger("broker").info(
            "login_delayed",
            peer=check.peer_host,
            user=check.user,
            delay=round(delay, 3),
            failures=backoff.failures(check.peer_host, check.user, loop.time()),
        )
        await asyncio.sleep(delay)
    matched = await loop.run_in_executor(_executor(), check.run)
    if not matched:
        backoff.failed(check.peer_host, check.user, loop.time())
    return matched


async def authenticate(
    authenticator: LoginSteps, mechanism: str, response: bytes, peer_host: str | None
) -> str:
    """:meth:`~broker.security.sasl.Authenticator.authenticate` with the hash off the loop,
    after the back-off.

    :raises ~broker.security.sasl.AuthenticationError: as that method.
    """
    outcome = authenticator.begin(mechanism, response, peer_host)
    if isinstance(outcome, PasswordCheck):
        return authenticator.finish(outcome, await run_password_check(outcome))
    return outcome
