"""The drill's I/O shell: :class:`DrillRun` runs a publisher with confirms and a consumer
with acks, both pika (an unmodified client, as our users run), on a fail-over URL list.

Contract
========

- Two threads, ``drill-publisher`` and ``drill-consumer``, each with its own pika
  connection; each reconnects through the URL list when it loses its connection, for up to
  ``connect_timeout`` seconds, then gives up (``client_gave_up``).
- Everything that happens goes into :class:`qpid_ha_cli.drill.core.DrillCore` under one
  lock (the core is THREAD UNSAFE); the events the core returns are logged here
  (``common.log``, component ``drill``), and nowhere else.
- The clock is UNIX seconds ticking with the monotonic clock from the wall-clock time at
  start, so a clock step does not make a gap.
- :meth:`DrillRun.run` publishes, drains until every confirmed message is received (or
  ``drain_timeout``), and returns the :class:`~qpid_ha_cli.drill.core.DrillCheck`. It
  raises :class:`Unreachable` when no broker of the list could ever be reached (within
  ``connect_timeout``, or before the publishing time ended), after logging
  ``drill_unreachable``.
- pika is imported when a run is made, not before: the core and ``--help`` work without it.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from broker.ha.names import EPOCH_PROPERTY as PROPERTY_EPOCH
from common.log import get_logger, set_log_context
from qpid_ha_cli.drill.core import DrillCheck, DrillCore, DrillEvent, ms
from qpid_ha_cli.drill.settings import DrillSettings

__all__ = ["PROPERTY_EPOCH", "DrillRun", "Unreachable"]


class Unreachable(Exception):
    """No broker of the URL list could be reached within the connect timeout."""


class WorkerFailed(Exception):
    """The publisher or the consumer thread stopped on an error the drill does not expect:
    what it checked would be a part of the run only, so the drill fails."""


class DrillRun:
    """Runs one drill: the publisher and consumer threads, the drain, the check.

    ``clock`` returns UNIX seconds; the default ticks with the monotonic clock from the
    wall-clock time at start, so a clock step does not make a gap.
    """

    @property
    def run_id(self) -> str:
        """This run's identity: in every message body and on ``drill_started``."""
        return self._run_id

    def __init__(self, settings: DrillSettings, clock: Callable[[], float] | None = None) -> None:
        import pika  # the shell only: the core and the CLI's --help work without it
        import pika.exceptions

        self._pika = pika
        self.settings = settings
        self.now: Callable[[], float] = clock or _steady_clock()
        self.core = DrillCore(settings.gap_threshold)
        self._lock = threading.Lock()
        self._log = get_logger("drill")
        self._epoch: int | None = None
        self._run_id = uuid.uuid4().hex[:12]
        self._stop_publishing = threading.Event()
        self._stop_consuming = threading.Event()
        self._unreachable: str | None = None
        #: why a worker thread stopped on an unexpected error ("publisher: TypeError: ...")
        self._failed: str | None = None
        #: why the last connection attempt failed (a drill that never connected says it)
        self._last_failure: str | None = None
        self._params = [
            pika.ConnectionParameters(
                host=address.host,
                port=address.port,
                virtual_host=settings.vhost,
                credentials=pika.PlainCredentials(
                    settings.url.user or "guest", settings.url.password or "guest"
                ),
                connection_attempts=1,
                socket_timeout=2,
                blocked_connection_timeout=30,
            )
            for address in settings.url.addresses
        ]

    # -- logging --------------------------------------------------------------------------
    def _emit(self, events: list[DrillEvent]) -> None:
        for event in events:
            epoch = event.fields.get("epoch")
            if isinstance(epoch, int) and (self._epoch is None or epoch > self._epoch):
                self._epoch = epoch  # the highest seen is the epoch of later events
                set_log_context(epoch=epoch)
            getattr(self._log, event.level)(event.event, **event.fields)

    def _feed(self, call: Callable[[float], list[DrillEvent]]) -> None:
        with self._lock:
            self._emit(call(self.now()))

    # -- connections ----------------------------------------------------------------------
    def _connect(
        self,
        role: str,
        deadline: float | None,
        stop: threading.Event,
        done: Callable[[], bool] | None = None,
    ) -> Any:
        """A connection and a channel on the queue, trying the URL list round after round
        until ``deadline`` (monotonic; None: no limit). None when ``stop`` is set or
        ``done()`` holds; raises :class:`Unreachable` at the deadline."""
        pika = self._pika
        reason = "not tried"
        while not stop.is_set() and not (done is not None and done()):
            try:
                connection = pika.BlockingConnection(self._params)
                channel = connection.channel()
                channel.queue_declare(self.settings.queue, durable=True)
            except (pika.exceptions.AMQPError, OSError, ValueError) as exc:
                # ValueError: pika's own word for a socket reset between the TCP connect
                # and its getpeername() ("Expected connected socket"), as when the broker
                # is SIGKILLed with this connection in its accept queue: a failed attempt.
                reason = self._last_failure = _reason(exc)
                if deadline is not None and time.monotonic() >= deadline:
                    raise Unreachable(reason) from None
                stop.wait(0.05)  # between rounds of the URL list
                continue
            impl = connection._impl
            address = f"{impl.params.host}:{impl.params.port}"
            properties = dict(impl.server_properties or {})
            epoch = properties.get(PROPERTY_EPOCH)
            epoch = epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else None
            self._feed(functools.partial(self.core.connected, role, address, epoch))
            return connection, channel, address
        return None

    def _lost(self, role: str, address: str, exc: BaseException, connection: Any) -> None:
        reason = _reason(exc)
        self._feed(lambda now: self.core.disconnected(role, address, reason, now))
        with contextlib.suppress(Exception):
            if connection.is_open:
                connection.close()

    def _give_up(self, role: str, reason: str) -> None:
        """The first connection failed (the drill stops: unreachable), or a reconnect."""
        with self._lock:
            if not self.core.ever_connected(role):
                if self._unreachable is None:
                    self._unreachable = reason
                self._stop_publishing.set()
                self._stop_consuming.set()
                return
            self._emit(self.core.gave_up(role, reason))

    # -- publisher ------------------------------------------------------------------------
    def _publishing_done(self, started: float) -> bool:
        s = self.settings
        if self._stop_publishing.is_set():
            return True
        if s.duration is not None and time.monotonic() - started >= s.duration:
            return True
        with self._lock:
            return s.count is not None and self.core.confirmed_count >= s.count

    def _publisher(self) -> None:
        pika = self._pika
        s = self.settings
        interval = 1.0 / s.rate if s.rate > 0 else 0.0
        deadline: float | None = time.monotonic() + s.connect_timeout
        started = time.monotonic()
        next_at = started
        connection: Any = None
        channel: Any = None
        address = ""
        properties = pika.BasicProperties(delivery_mode=2)
        while not self._publishing_done(started):
            if channel is None:
                try:
                    got = self._connect(
                        "publisher",
                        deadline,
                        self._stop_publishing,
                        functools.partial(self._publishing_done, started),
                    )
                except Unreachable as exc:
                    self._give_up("publisher", str(exc))
                    break
                if got is None:
                    break
                connection, channel, address = got
                channel.confirm_delivery()
                deadline = None
            if interval:
                delay = next_at - time.monotonic()
                if delay > 0 and self._stop_publishing.wait(delay):
                    break
                next_at = max(next_at + interval, time.monotonic())
            with self._lock:
                number = self.core.publish(self.now())
            body = f"{self._run_id}:{number}".encode()
            try:
                channel.basic_publish("", s.queue, body, properties)
            except pika.exceptions.NackError:
                with self._lock:
                    self.core.nacked(number, self.now())
            except (pika.exceptions.AMQPError, OSError) as exc:
                self._lost("publisher", address, exc, connection)
                connection = channel = None
                deadline = time.monotonic() + s.connect_timeout
            else:
                self._feed(functools.partial(self.core.confirmed, number))
        if connection is not None:
            with contextlib.suppress(Exception):
                connection.close()

    # -- consumer -------------------------------------------------------------------------
    def _number(self, body: bytes) -> int | None:
        run_id, _, number = body.decode("utf-8", "replace").partition(":")
        if run_id != self._run_id or not number.isdigit():
            return None
        return int(number)

    def _consumer(self) -> None:
        pika = self._pika
        s = self.settings
        deadline: float | None = time.monotonic() + s.connect_timeout
        while not self._stop_consuming.is_set():
            try:
                got = self._connect("consumer", deadline, self._stop_consuming)
            except Unreachable as exc:
                self._give_up("consumer", str(exc))
                return
            if got is None:
                return
            deadline = None
            connection, channel, address = got
            try:
                channel.basic_qos(prefetch_count=s.prefetch)
                for method, _props, body in channel.consume(s.queue, inactivity_timeout=0.05):
                    if method is not None:
                        number = self._number(body)
                        with self._lock:
                            self.core.delivered(number)
                        channel.basic_ack(method.delivery_tag)
                    if self._stop_consuming.is_set():
                        break
                channel.cancel()
                if s.delete_queue and self._unreachable is None:
                    with contextlib.suppress(pika.exceptions.AMQPError):
                        channel.queue_delete(s.queue, if_empty=True)
                connection.close()
            except (pika.exceptions.AMQPError, OSError) as exc:
                self._lost("consumer", address, exc, connection)

    def _worker(self, role: str, target: Callable[[], None]) -> None:
        """Run a worker thread's loop; an error it does not expect stops the whole drill."""
        try:
            target()
        except Exception as exc:
            with self._lock:
                if self._failed is None:
                    self._failed = f"the {role} stopped on {_reason(exc)}"
            self._stop_publishing.set()
            self._stop_consuming.set()

    # -- the whole drill ------------------------------------------------------------------
    def run(self) -> DrillCheck:
        """Publish, drain, check. :raises Unreachable: no broker could ever be reached."""
        s = self.settings
        self._emit(
            [
                DrillEvent(
                    "drill_started",
                    "info",
                    {
                        "url": s.url.redacted(),
                        "rate": s.rate,
                        "duration": s.duration,
                        "count": s.count,
                        "queue": s.queue,
                        "scenario": s.scenario,
                        "gap_threshold_ms": ms(s.gap_threshold),
                        "run_id": self._run_id,
                    },
                )
            ]
        )
        consumer = threading.Thread(
            target=self._worker,
            args=("consumer", self._consumer),
            name="drill-consumer",
            daemon=True,
        )
        publisher = threading.Thread(
            target=self._worker,
            args=("publisher", self._publisher),
            name="drill-publisher",
            daemon=True,
        )
        consumer.start()
        publisher.start()
        try:
            publisher.join()
            deadline = time.monotonic() + s.drain_timeout
            while (
                self._unreachable is None and self._failed is None and time.monotonic() < deadline
            ):
                with self._lock:
                    if self.core.drained():
                        break
                self._stop_consuming.wait(0.02)
        finally:
            self._stop_publishing.set()
            self._stop_consuming.set()
            publisher.join()
            consumer.join(30)
        with self._lock:
            never = not any(self.core.ever_connected(role) for role in ("publisher", "consumer"))
        if self._unreachable is None and never:
            # The publishing time ended before any broker answered (--duration shorter
            # than --connect-timeout): nothing was tested, which is not a pass.
            self._unreachable = self._last_failure or "no broker answered"
        if self._failed is not None:
            self._log.error("drill_failed", reason=self._failed)
            raise WorkerFailed(self._failed)
        if self._unreachable is not None:
            self._log.error("drill_unreachable", url=s.url.redacted(), reason=self._unreachable)
            raise Unreachable(self._unreachable)
        with self._lock:
            self._emit(self.core.finished())
            return self.core.check()


def _steady_clock() -> Callable[[], float]:
    wall, mono = time.time(), time.monotonic()

    def now() -> float:
        return wall + (time.monotonic() - mono)

    return now


def _reason(exc: BaseException) -> str:
    text = str(exc).strip() or repr(exc)
    return " ".join(f"{type(exc).__name__}: {text}".split())
