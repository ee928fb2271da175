"""The shells of :mod:`broker.liveness`: a thread that answers liveness and lease renewals
without the event loop, and the loop's side (the progress timer, which also measures the
loop's lag, and the periodic ``loop_lag`` event).

:Status: Beta

:class:`LivenessServer` is a small HTTP server (one thread, one connection at a time, on
the management interface, HTTPS when the management API is) on its own port
(``--ha-liveness-port``; 0, the default, lets the system pick one: the broker names it in
``GET /api/ha``):

- ``GET /liveness``: :meth:`broker.liveness.LoopProgress.answer`, open (like
  ``/api/status``), with the loop thread's clocks read by :class:`LoopThreadClock` as it
  answers: its CPU clock (``time.pthread_getcpuclockid``) and its run-queue wait (the
  second field of ``/proc/self/task/<tid>/schedstat``);
- ``GET /grant[?epoch=N]``: the member lease this broker granted as a backup
  (:meth:`broker.ha.member_lease.GrantLedger.answer`): ``epoch`` (the newest granted),
  ``lapsed`` (every grant to an epoch older than N has lapsed, plus the drift bound; no N:
  every grant), ``remaining_ms``, ``grants`` (each epoch's ``remaining_ms``, and
  ``needed``: that epoch's primary counted this broker at its newest request) and
  ``formats`` (the replication formats this broker speaks). Open, like ``/liveness``;
  what a cluster manager asks before promoting this broker, answered however busy the loop;
- ``POST /lease`` ``{"lease": seconds}`` with the header ``X-Qpidd-Lease-Token``: the
  token ``GET /api/ha`` gives a user who may renew the lease (the cluster manager), new at
  each broker start (so it also names this broker instance). The answer is that of
  ``POST /api/ha/lease``: ``state``, ``lease``, ``cluster_shutdown``; 409 when the broker
  is not the primary, 403 without the token.

:class:`LoopWatch` runs on the loop: every :data:`PROGRESS_INTERVAL` it bumps the
progress counter with the loop thread's CPU time, publishes the role and records its own
scheduling delay (how late the timer ran); every :data:`LAG_LOG_INTERVAL` it logs
``loop_lag`` (p50/p99/max of that delay over the interval). :class:`BrokerLiveness` owns
the parts, for the broker.

Error Handling
==============

Bad requests get a JSON error (400 malformed, 403 token, 404 path, 409 refused); the
server never raises into the broker. A port that cannot be bound is the broker's
``ListenError`` (exit 2, one line), as for the other listeners.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import math
import os
import secrets
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable
from http import HTTPStatus
from typing import Any, Protocol

from broker.listen import open_sockets
from broker.liveness import Durations, LeaseOffers, LoopProgress, RoleNote, ThreadTimes
from broker.loop_step_watch import StepWatch
from broker.loop_steps import LoopSteps
from common.log import get_logger

__all__ = ["BrokerLiveness", "LivenessServer", "LoopThreadClock", "LoopWatch"]

#: How often the loop bumps its progress counter (seconds).
PROGRESS_INTERVAL = 0.05
#: How often the loop logs its callbacks' run times (seconds).
LAG_LOG_INTERVAL = 10.0
#: BENCHMARK ONLY: another interval for ``loop_lag`` (seconds; ``bench/loop_steps_scale.py``
#: reads each phase's steps from the log, a second at a time).
LAG_LOG_VARIABLE = "QPIDD_TEST_LOOP_LAG_INTERVAL"
#: The header that carries the lease token.
TOKEN_HEADER = "X-Qpidd-Lease-Token"
#: How long one connection may take to send its request (seconds).
CONNECTION_TIMEOUT = 0.5
#: The largest request read (bytes).
MAX_REQUEST = 65536
#: The longest lease accepted (seconds), as ``POST /api/ha/lease``.
MAX_LEASE = 3600.0


class LoopWatch:
    """The loop's side, a timer callback every :data:`PROGRESS_INTERVAL`: it records how
    late it runs (the scheduling delay: how long the loop was held by the work before it,
    plus, on a loaded machine, the wait for a CPU), bumps the progress counter with the
    role, and logs ``loop_lag`` every :data:`LAG_LOG_INTERVAL`. (The loop is uvloop's,
    whose callbacks cannot be timed one by one from Python: the delay of this one timer
    bounds the longest stretch of work the loop ran without turning.)"""

    def __init__(
        self,
        progress: LoopProgress,
        role: Callable[[], RoleNote],
        lag: Durations,
        interval: float = PROGRESS_INTERVAL,
        log_interval: float = LAG_LOG_INTERVAL,
        steps: LoopSteps | None = None,
    ) -> None:
        self.progress, self.role, self.lag, self.steps = progress, role, lag, steps
        self.interval, self.log_interval = interval, log_interval
        self._log = get_logger("broker")
        self._busy = BusyLoopHook(os.environ.get(BUSY_LOOP_VARIABLE))
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._due = self._next_log = 0.0

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.lag.window()  # the first window starts now
        if self.steps is not None:
            self.steps.window()
        self._next_log = time.monotonic() + self.log_interval
        self._schedule(time.monotonic())

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()

    def _schedule(self, now: float) -> None:
        assert self._loop is not None
        self._due = now + self.interval
        self._handle = self._loop.call_later(self.interval, self._turn)

    def _turn(self) -> None:
        now = time.monotonic()
        self.lag.record(max(0.0, now - self._due))
        self._schedule(now)  # first: the work below counts in the next delay
        self.progress.progressed(now, self.role(), time.thread_time())
        self._busy.run(now)
        if now >= self._next_log:
            self._next_log = now + self.log_interval
            summary = self.lag.window()
            fields: dict[str, Any] = {}
            if self.steps is not None:
                steps, gc_longest = self.steps.window()
                fields = {f"step_{name}": value for name, value in steps.as_ms().items()} | {
                    "gc_max_ms": round(gc_longest * 1000.0, 3)
                }
            if summary.count:
                self._log.info("loop_lag", **summary.as_ms(), **fields)


class LoopThreadClock:
    """The loop thread's clocks, read from another thread (the liveness server's): its CPU
    clock and its run-queue wait. Made on the loop (:meth:`of_current_thread`); a platform
    without per-thread CPU clocks gives none (the answer then says only the progress, and
    the agent judges by it alone, as before)."""

    def __init__(self, clock: int, tid: int) -> None:
        self.clock = clock
        #: the loop thread's id (``loop_tid`` in the answer: its agent reads the thread's
        #: clocks from /proc itself when this thread cannot answer in time)
        self.tid = tid
        #: its schedstat, open for the process's life (one pread an answer: fewer system
        #: calls, so fewer waits for the interpreter lock the loop's thread holds); None: none
        self._schedstat: int | None = None
        with contextlib.suppress(OSError):
            self._schedstat = os.open(f"/proc/self/task/{tid}/schedstat", os.O_RDONLY)

    @classmethod
    def of_current_thread(cls) -> LoopThreadClock | None:
        try:
            clock = time.pthread_getcpuclockid(threading.get_ident())
            time.clock_gettime(clock)
        except (AttributeError, OSError):
            return None
        return cls(clock, threading.get_native_id())

    def read(self) -> ThreadTimes | None:
        """Now: the thread's CPU time, and its run-queue wait when the system says it (the
        second field of its ``schedstat``, nanoseconds); None once the thread is gone."""
        try:
            cpu = time.clock_gettime(self.clock)
        except OSError:
            return None
        wait: float | None = None
        if self._schedstat is not None:
            with contextlib.suppress(OSError, IndexError, ValueError):
                wait = int(os.pread(self._schedstat, 128, 0).split()[1]) / 1e9
        return ThreadTimes(cpu, wait)


#: TEST ONLY: the path of a file that makes the loop busy (see :class:`BusyLoopHook`).
BUSY_LOOP_VARIABLE = "QPIDD_TEST_BUSY_LOOP_FILE"


class BusyLoopHook:
    """TEST ONLY (``$QPIDD_TEST_BUSY_LOOP_FILE``): while the file holds ``BLOCK_MS
    EVERY_MS``, the loop spins ``BLOCK_MS`` of CPU time (more of the wall clock when it
    waits for a CPU) in one callback every ``EVERY_MS`` (busy but
    progressing when the blocks are short, blocked when one is long). The tests of "slow
    is not dead" use it on a settled cluster; a broker without the variable never reads
    a file. A file that does not parse is ignored."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self._next = 0.0

    def run(self, now: float) -> None:
        if not self.path or now < self._next:
            return
        try:
            with open(self.path, encoding="ascii") as spec:
                block_ms, every_ms = (float(v) for v in spec.read().split())
        except (OSError, ValueError):
            return
        self._next = now + every_ms / 1000.0
        until = time.thread_time() + block_ms / 1000.0  # of CPU: longer when starved
        while time.thread_time() < until:  # holds the loop as a CPU-heavy callback does
            pass


class LivenessServer:
    """See the module docstring. :meth:`start`, then :meth:`stop` (any thread)."""

    def __init__(
        self,
        progress: LoopProgress,
        offers: LeaseOffers,
        token: str,
        *,
        on_told: Callable[[], None] = lambda: None,
        tls: ssl.SSLContext | None = None,
        grants: GrantAnswers | None = None,
        formats: str = "",
        clock: LoopThreadClock | None = None,
    ) -> None:
        self.progress = progress
        #: the loop thread's clocks, read at each liveness answer (None: not measured)
        self.clock = clock
        #: the member-lease grants this broker gave (GET /grant), and its formats
        self.grants = grants
        self.formats = formats
        self.offers = offers
        self.token = token
        #: called (in the server's thread) when a lease answer carried a cluster shutdown
        self.on_told = on_told
        self.tls = tls
        self.port = 0
        self._listeners: list[socket.socket] = []
        self._thread: threading.Thread | None = None

    def start(self, host: str, port: int) -> LivenessServer:
        """Listen on every address of ``host`` (an interface option: one address or a
        comma-separated list, as ``--mgmt-interface``), all on one port.

        :raises ListenError: naming the listener, its options and the address that failed.
        """
        listeners = open_sockets("liveness", "--mgmt-interface/--ha-liveness-port", host, port)
        for listener in listeners:
            listener.listen(16)
            listener.setblocking(False)
        self.port = int(listeners[0].getsockname()[1])
        self._listeners = listeners
        self._thread = threading.Thread(target=self._serve, name="liveness", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        listeners, self._listeners = self._listeners, []
        for listener in listeners:
            listener.close()

    def _serve(self) -> None:
        """One connection at a time, each with a short time-out: few system calls, so few
        waits for the interpreter lock while the loop's thread is busy (``http.server``
        took up to 0.24 s an answer beside a spinning loop; this takes a few ms)."""
        while True:
            listeners = self._listeners
            if not listeners:
                return
            try:  # a time-out so that stop() is seen
                ready, _, _ = select.select(listeners, [], [], 0.5)
            except (OSError, ValueError):  # closed by stop()
                return
            for listener in ready:
                try:
                    conn, _ = listener.accept()
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    return
                with contextlib.suppress(OSError, ssl.SSLError, ValueError):
                    conn.setblocking(True)
                    conn.settimeout(CONNECTION_TIMEOUT)
                    if self.tls is not None:
                        conn = self.tls.wrap_socket(conn, server_side=True)
                    self._answer(conn)
                with contextlib.suppress(OSError):
                    conn.close()

    def _answer(self, conn: socket.socket) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(4096)
            if not chunk or len(data) > MAX_REQUEST:
                return
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, path = [*lines[0].split(), "", ""][:2]
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = min(int(headers.get("content-length") or 0), MAX_REQUEST)
        while len(body) < length:
            chunk = conn.recv(4096)
            if not chunk:
                return
            body += chunk
        path, _, query = path.partition("?")
        if method == "GET" and path == "/liveness":
            status, answer = self.liveness()
        elif method == "GET" and path == "/grant":
            status, answer = self.grant(query)
        elif method == "POST" and path == "/lease":
            status, answer = self.lease(headers.get(TOKEN_HEADER.lower()), body[:length])
        else:
            status = HTTPStatus.NOT_FOUND
            answer = _error(status, f"no such resource: {method} {path}")
        payload = json.dumps(answer).encode()
        phrase = HTTPStatus(status).phrase
        conn.sendall(
            f"HTTP/1.1 {int(status)} {phrase}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n".encode()
            + payload
        )

    # -- the answers (the server's threads) ---------------------------------------------
    def liveness(self) -> tuple[int, dict[str, Any]]:
        times = None if self.clock is None else self.clock.read()
        answer = self.progress.answer(time.monotonic(), times)
        if self.clock is not None:
            answer["loop_tid"] = self.clock.tid
        return HTTPStatus.OK, answer

    def grant(self, query: str) -> tuple[int, dict[str, Any]]:
        now = time.monotonic()
        grants = self.grants
        if grants is None:
            return HTTPStatus.NOT_FOUND, _error(HTTPStatus.NOT_FOUND, "not an HA cluster member")
        epoch: int | None = None
        for pair in query.split("&") if query else ():
            name, _, value = pair.partition("=")
            if name != "epoch" or not value.isdigit() or len(value) > 18:
                return HTTPStatus.BAD_REQUEST, _error(
                    HTTPStatus.BAD_REQUEST, f"expected ?epoch=N (N a whole number), not {pair!r}"
                )
            epoch = int(value)
        return HTTPStatus.OK, {**grants.answer(epoch, now), "formats": self.formats}

    def lease(self, token: str | None, body: bytes) -> tuple[int, dict[str, Any]]:
        received = time.monotonic()  # before anything else: the lease counts from here
        if token is None or not hmac.compare_digest(token.encode(), self.token.encode()):
            return HTTPStatus.FORBIDDEN, _error(
                HTTPStatus.FORBIDDEN, f"the lease needs the {TOKEN_HEADER} of GET /api/ha"
            )
        try:
            data = json.loads(body or b"{}")
        except (json.JSONDecodeError, UnicodeDecodeError):
            return HTTPStatus.BAD_REQUEST, _error(HTTPStatus.BAD_REQUEST, "the body is not JSON")
        lease = data.get("lease") if isinstance(data, dict) else None
        if (
            isinstance(lease, bool)
            or not isinstance(lease, int | float)
            or not 0 < lease <= MAX_LEASE
            or not math.isfinite(lease)
        ):
            return HTTPStatus.BAD_REQUEST, _error(
                HTTPStatus.BAD_REQUEST,
                f"lease must be seconds, more than 0 and at most {MAX_LEASE:g}: {lease!r}",
            )
        role = self.progress.role
        refusal = self.offers.offer(float(lease), received, role)
        if refusal is not None:
            return HTTPStatus.CONFLICT, _error(HTTPStatus.CONFLICT, refusal)
        if role.cluster_shutdown is not None:
            self.on_told()
        return HTTPStatus.OK, {
            "state": role.ha_state,
            "lease": float(lease),
            "cluster_shutdown": role.cluster_shutdown,
        }


def _error(status: HTTPStatus, reason: str) -> dict[str, Any]:
    return {"error": status.phrase, "reason": reason}


class GrantAnswers(Protocol):
    """The grants a backup gave (:class:`broker.ha.member_lease.GrantLedger`), read here."""

    def answer(self, epoch: int | None, now: float) -> dict[str, object]: ...


class HaRole(Protocol):
    """What the liveness reads of the broker's HA role (:class:`broker.ha.ha_broker.HaBroker`)."""

    @property
    def grants(self) -> GrantAnswers: ...

    @property
    def formats(self) -> Any: ...

    @property
    def broker_id(self) -> str: ...

    @property
    def epoch(self) -> int: ...

    @property
    def fenced(self) -> bool: ...

    def serving_window(self) -> tuple[float, float] | None: ...


class BrokerLiveness:
    """One broker's liveness: the progress, the lease offers, the token, the server and the
    loop's watch; owned by :class:`broker.server.Broker`, read by ``GET /api/ha``."""

    def __init__(self) -> None:
        self.progress = LoopProgress(time.monotonic(), os.getpid())
        self.offers = LeaseOffers()
        #: new at each start: proves a lease came from one who read GET /api/ha here
        self.token = secrets.token_urlsafe(18)
        #: set by ``POST /api/ha/shutdown`` (the loop): lease answers carry it
        self.cluster_shutdown: str | None = None
        self.server: LivenessServer | None = None
        self._lag = Durations()
        self._watch: LoopWatch | None = None
        #: the loop's steps as CPU time (broker.loop_steps): /metrics, /api/status, the log
        self.steps = LoopSteps()
        self._step_watch = StepWatch(self.steps)

    @property
    def lag(self) -> Durations:
        """The process's loop lag (``/metrics``)."""
        return self._lag

    @property
    def port(self) -> int | None:
        return None if self.server is None else self.server.port

    def start(
        self,
        ha: HaRole | None,
        ha_state: Callable[[], str],
        listen: tuple[str, int] | None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        """On the loop: time its callbacks, start the progress watch, and, for a cluster
        member with a management API (``listen``: its interface and the liveness port),
        the server."""
        if ha is not None:
            self.progress.broker_id = ha.broker_id

        def role() -> RoleNote:
            return RoleNote(
                ha_state=ha_state(),
                epoch=0 if ha is None else ha.epoch,
                fenced=False if ha is None else ha.fenced,
                cluster_shutdown=self.cluster_shutdown,
                grants_window=None if ha is None else ha.serving_window(),
            )

        self.progress.note_role(role())
        self._step_watch.start()
        self._watch = LoopWatch(
            self.progress, role, self._lag, log_interval=_lag_log_interval(), steps=self.steps
        )
        self._watch.start()
        if ha is not None and listen is not None:
            self.server = LivenessServer(
                self.progress,
                self.offers,
                self.token,
                tls=tls,
                grants=ha.grants,
                formats=str(ha.formats.text),
                clock=LoopThreadClock.of_current_thread(),  # on the loop: its thread's
            )
            self.server.start(*listen)

    def stop(self) -> None:
        self._step_watch.stop()
        if self._watch is not None:
            self._watch.stop()
        if self.server is not None:
            self.server.stop()


def _lag_log_interval() -> float:
    """:data:`LAG_LOG_INTERVAL`, or a benchmark's (:data:`LAG_LOG_VARIABLE`, 0.1 s or more)."""
    try:
        return max(0.1, float(os.environ[LAG_LOG_VARIABLE]))
    except (KeyError, ValueError):
        return LAG_LOG_INTERVAL
