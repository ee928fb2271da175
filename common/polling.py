"""Waiting with a deadline: poll a condition until it holds, and the loopback ports waited on.

:Status: Beta (tests, benchmarks; the product's own loops may use it too)

One home for the loops the tests and benchmarks used to write by hand (``deadline =
time.monotonic() + timeout`` / ``while True`` / ``sleep``):

:func:`poll_until`
    Call ``predicate`` until it returns something truthy and return that value; after
    ``timeout`` seconds raise :class:`PollTimeout` naming what was awaited. Between calls it
    sleeps ``interval``, or runs ``between(seconds_left)`` instead (pump a client's I/O:
    pika's ``process_data_events``, kombu's ``drain_events``).
:func:`poll_until_async`
    The same from a coroutine; the predicate may be a plain or an ``async`` function.
:func:`holds_for`
    The converse: ``predicate`` must stay truthy for ``duration`` seconds, checked every
    ``interval``; :class:`PollTimeout` at the first falsy answer.
:func:`retry_until`
    Call ``attempt`` until it returns without raising one of ``errors``; past ``deadline``
    the last such error is raised again (reconnect loops).
:func:`free_port`, :func:`port_open`
    A free loopback TCP port to start a server on; whether something accepts on one.

Polling is the synchronisation here: the sleep between two checks only spaces them, and
every wait ends at its deadline. The clock is ``time.monotonic``.

Error Handling
==============

- :class:`PollTimeout` is an ``AssertionError``, so pytest reports a wait that ran out as a
  failed expectation. Its message reads ``timed out after <timeout> s waiting for <what>``;
  ``what`` may be a string, a function returning one (called only then, so it can show
  what was seen), or left out: then the predicate's source line or name stands for it.
  Callers outside tests (the benchmarks) catch it and raise their own error.
- Whatever ``predicate``, ``between`` or ``attempt`` raise (other than ``errors`` in
  :func:`retry_until`) goes through at once: a predicate can end a wait early, e.g. when the
  process it waits for has exited.
- No function here starts a thread; :func:`free_port` alone keeps state (the ports it
  gave, and their claims across processes); all are thread safe.
"""

from __future__ import annotations

import asyncio
import inspect
import random
import socket
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar, cast, overload

from common import port_claims

__all__ = [
    "PollTimeout",
    "free_port",
    "holds_for",
    "poll_until",
    "poll_until_async",
    "port_open",
    "retry_until",
]

T = TypeVar("T")

#: What a wait is for: a description, a function giving one when the wait has run out, or
#: None (the predicate's source line or name).
What = str | Callable[[], str] | None


class PollTimeout(AssertionError):
    """A condition did not hold in time (or stopped holding); the message names it."""


def describe(predicate: Callable[..., object], what: What = None) -> str:
    """``what`` as a string; by default the predicate's source line, else its name."""
    if isinstance(what, str):
        return what
    if what is not None:
        return what()
    name = getattr(predicate, "__qualname__", None) or repr(predicate)
    if getattr(predicate, "__name__", None) == "<lambda>":
        try:
            source = " ".join(inspect.getsource(predicate).split())
        except (OSError, TypeError):
            return name
        return source if len(source) <= 200 else source[:197] + "..."
    return name


def _timed_out(predicate: Callable[..., object], timeout: float, what: What) -> PollTimeout:
    return PollTimeout(f"timed out after {timeout:g} s waiting for {describe(predicate, what)}")


def poll_until(
    predicate: Callable[[], T | None],
    timeout: float,
    what: What = None,
    *,
    interval: float = 0.02,
    between: Callable[[float], object] | None = None,
) -> T:
    """Call ``predicate`` until it returns something truthy; return that value.

    It is called at least once, and once more at or after the deadline before giving up.
    Between two calls: ``time.sleep(interval)``, or ``between(seconds left)`` when given.
    :class:`PollTimeout` after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        left = deadline - time.monotonic()
        if left <= 0:
            raise _timed_out(predicate, timeout, what)
        if between is None:
            time.sleep(min(interval, left))
        else:
            between(left)


@overload
async def poll_until_async(
    predicate: Callable[[], Awaitable[T | None]],
    timeout: float,
    what: What = None,
    *,
    interval: float = 0.02,
) -> T: ...


@overload
async def poll_until_async(
    predicate: Callable[[], T | None],
    timeout: float,
    what: What = None,
    *,
    interval: float = 0.02,
) -> T: ...


async def poll_until_async(
    predicate: Callable[[], T | Awaitable[T | None] | None],
    timeout: float,
    what: What = None,
    *,
    interval: float = 0.02,
) -> T:
    """:func:`poll_until` for coroutines: ``predicate`` may return an awaitable, which is
    awaited; between calls ``await asyncio.sleep(interval)``."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        value = cast(T, (await result) if inspect.isawaitable(result) else result)
        if value:
            return value
        left = deadline - time.monotonic()
        if left <= 0:
            raise _timed_out(predicate, timeout, what)
        await asyncio.sleep(min(interval, left))


def holds_for(
    predicate: Callable[[], object],
    duration: float,
    what: What = None,
    *,
    interval: float = 0.2,
) -> None:
    """Call ``predicate`` every ``interval`` for ``duration`` seconds; it must stay truthy.

    :class:`PollTimeout` at the first falsy answer. A predicate that asserts (and returns
    True) keeps pytest's account of what differed.
    """
    started = time.monotonic()
    deadline = started + duration
    while True:
        if not predicate():
            took = time.monotonic() - started
            raise PollTimeout(
                f"{describe(predicate, what)}: stopped holding after {took:.3g} s of {duration:g}"
            )
        left = deadline - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(interval, left))


def retry_until(
    attempt: Callable[[], T],
    deadline: float,
    errors: type[BaseException] | tuple[type[BaseException], ...],
    *,
    interval: float = 0.05,
) -> T:
    """Call ``attempt`` until it returns without raising one of ``errors``; return its value.

    ``deadline`` is a ``time.monotonic()`` time: an error after it is raised again. Other
    exceptions go through at once. ``interval`` is the back-off between two attempts.
    """
    while True:
        try:
            return attempt()
        except errors:
            if time.monotonic() > deadline:
                raise
        time.sleep(interval)


#: Ports :func:`free_port` gave out in this process (never given twice).
_given_ports: set[int] = set()
_given_lock = threading.Lock()


#: The lowest port :func:`free_port` chooses (below it: well-known services).
FIRST_CHOSEN_PORT = 10000
#: Linux's default ephemeral range, when ``/proc`` does not say.
_DEFAULT_EPHEMERAL = (32768, 60999)


def ephemeral_range(path: str = "/proc/sys/net/ipv4/ip_local_port_range") -> tuple[int, int]:
    """The kernel's ephemeral port range: where every outgoing connection and every bind to
    port 0 (ZooKeeper, Spark, a browser driver) takes its local port."""
    try:
        low, high = (int(part) for part in Path(path).read_text().split())
    except (OSError, ValueError):
        return _DEFAULT_EPHEMERAL
    return low, high


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` just now, one this process has not been given before,
    chosen at random *below* the kernel's ephemeral range.

    A port from the kernel's own choice (bind to 0) lies in the ephemeral range, where any
    outgoing connection of any other process may take it between this call and the server's
    bind: a CI run saw a broker's management port taken so (the broker exited with "address
    already in use"). Below that range only another explicit choice can take it. Never
    twice in one process: a cluster set up with two calls must get two ports; nor while
    another live process holds it (:mod:`common.port_claims`: pytest's workers choose at
    once, and a port stays unbound between its choice and its server's bind, or across a
    server's restart). Falls back to the kernel's choice when the band below the range is
    too small to choose from.
    """
    low = FIRST_CHOSEN_PORT
    high = ephemeral_range()[0] - 1
    for _ in range(200 if high - low >= 1000 else 0):
        port = random.randint(low, high)
        with _given_lock:
            if port in _given_ports:
                continue
        if not _bindable(host, port):
            continue
        with _given_lock:
            if port not in _given_ports and port_claims.claim(port):
                _given_ports.add(port)
                return port
    while True:
        with socket.socket() as sock:
            sock.bind((host, 0))
            port = int(sock.getsockname()[1])
        with _given_lock:
            if port not in _given_ports and port_claims.claim(port):
                _given_ports.add(port)
                return port


def _bindable(host: str, port: int) -> bool:
    """True when a listening socket could bind ``host:port`` now (nothing listens or is
    connected there)."""
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def port_open(port: int, host: str = "127.0.0.1", timeout: float = 0.2) -> bool:
    """True when something accepts a TCP connection on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False
