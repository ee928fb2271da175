"""Password hashes off the event loop: a login's scrypt check runs in a small thread pool.

One scrypt verification takes about 50 ms of CPU (:mod:`broker.security.passwords`). Run on
the event loop, every login with a new or wrong password would stop every other connection
for that long: a client repeating logins would stall consumers and heartbeats (a denial of
service). :func:`run_password_check` runs a :class:`~broker.security.sasl.PasswordCheck` in
:data:`THREADS` worker threads (``hashlib.scrypt`` releases the GIL), so at most that many
cores hash at once and the loop carries on; more logins wait in the pool's queue.

The AMQP shell (:mod:`broker.amqp.protocol`) and the management API's Basic authentication
call it; the SASL state machine stays free of I/O and threads
(:meth:`~broker.security.sasl.Authenticator.begin` / ``finish``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from broker.security.sasl import PasswordCheck

__all__ = ["THREADS", "off_loop", "run_password_check"]

T = TypeVar("T")

#: Hashes at once (each 16 MiB and one core for ~50 ms): the machine's cores stay shared.
THREADS = 2

_pool: ThreadPoolExecutor | None = None


def _executor() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="password-check")
    return _pool


def run_password_check(check: PasswordCheck) -> asyncio.Future[bool]:
    """``check.run()`` in the pool: a future of the running loop, True when the password
    matched."""
    return asyncio.get_running_loop().run_in_executor(_executor(), check.run)


async def off_loop(function: Callable[..., T], *args: object) -> T:
    """``function(*args)`` in the pool (the management API's Basic authentication, which
    calls :meth:`~broker.security.sasl.Authenticator.authenticate` whole)."""
    return await asyncio.get_running_loop().run_in_executor(_executor(), function, *args)
