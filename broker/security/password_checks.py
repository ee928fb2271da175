"""Password hashes off the event loop: a login's scrypt check runs in a small thread pool.

One scrypt verification takes about 50 ms of CPU (:mod:`broker.security.passwords`). Run on
the event loop, every login with a new or wrong password would stop every other connection
for that long: a client repeating logins would stall consumers and heartbeats (a denial of
service). :func:`run_password_check` runs a :class:`~broker.security.sasl.PasswordCheck` in
:data:`THREADS` worker threads (``hashlib.scrypt`` releases the GIL), so at most that many
cores hash at once and the loop carries on; more logins wait in the pool's queue.

Logins of one user with one password at once share one hash (:func:`_hash`): after a
fail-over every client of an application dials the new primary within milliseconds, and
that broker has verified none of their passwords (a backup refuses clients before their
login, so it spent no hash on them): 20 clients of one user cost 20 hashes in
:data:`THREADS` threads, 0.5 s for the last one; shared, one hash, about 50 ms for all.
The key is the user, its database and an HMAC of the password under that database's
in-memory key (:meth:`~broker.security.users.UserDatabase.tag`): a guess shares only with
the same guess, each waiter's failure still counts in the back-off, and the answer comes to
every waiter when it would have come to the first (it tells none of them anything new).

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


#: The hashes running: (database, user, password tag) -> (the database, its future).
_running: dict[tuple[int, str, bytes], tuple[object, asyncio.Future[bool]]] = {}


def run_password_check(check: PasswordCheck) -> asyncio.Future[bool]:
    """``check.run()`` in the pool after its back-off's wait (one hash for the same user
    and password at once): a future of the running loop, True when the password matched."""
    if check.backoff is None:
        return _hash(check)
    task = asyncio.ensure_future(_backed_off(check))
    _waiting.add(task)  # held until done (the loop keeps only a weak reference to a task)
    task.add_done_callback(_waiting.discard)
    return task


def _hash(check: PasswordCheck) -> asyncio.Future[bool]:
    """The hash of ``check``, shared with a running one of the same database, user and
    password (its own future: a waiter cancelled does not cancel the others)."""
    loop = asyncio.get_running_loop()
    key = (id(check.users), check.user, check.users.tag(check.password))
    running = _running.get(key)
    if running is None or running[0] is not check.users or running[1].done():
        shared = loop.run_in_executor(_executor(), check.run)
        _running[key] = (check.users, shared)  # the database held: its id stays its own

        def finished(done: asyncio.Future[bool]) -> None:
            entry = _running.get(key)
            if entry is not None and entry[1] is done:
                del _running[key]

        shared.add_done_callback(finished)
    else:
        shared = running[1]
    own: asyncio.Future[bool] = loop.create_future()

    def settle(done: asyncio.Future[bool]) -> None:
        if own.done():
            return
        if done.cancelled():
            own.cancel()
        elif (error := done.exception()) is not None:
            own.set_exception(error)
        else:
            own.set_result(done.result())

    shared.add_done_callback(settle)
    return own


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
    matched = await _hash(check)
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
