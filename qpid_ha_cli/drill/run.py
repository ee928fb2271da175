"""The drill's I/O shell: :class:`DrillRun` runs a publisher with confirms and a consumer
with acks on a fail-over URL list, in one protocol: pika for AMQP 0-9-1, Proton for AMQP
1.0 (:mod:`qpid_ha_cli.drill.clients`: unmodified clients, as our users run them).

Contract
========

- Two threads, ``drill-publisher`` and ``drill-consumer``, each with its own
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
- The client library is imported when a run is made, not before: the core and ``--help``
  work without it.
"""

from __future__ import annotations

import functools
import threading
import time
import uuid
from collections.abc import Callable

from broker.ha.names import EPOCH_PROPERTY as PROPERTY_EPOCH
from common.log import get_logger, set_log_context
from qpid_ha_cli.drill.clients import ConnectFailed, DrillLink, Lost, make_client, reason_of
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

    def __init__(
        self,
        settings: DrillSettings,
        clock: Callable[[], float] | None = None,
        protocol: str = "0-9-1",
    ) -> None:
        self.client = make_client(protocol, settings)  # imports the client library
        self.settings = settings
        self.now: Callable[[], float] = clock or _steady_clock()
        self.core = DrillCore(settings.gap_threshold)
        self._lock = threading.Lock()
        self._log = get_logger("drill", protocol=protocol)  # two runs share one log
        self._epoch: int | None = None
        self._run_id = uuid.uuid4().hex[:12]
        self._stop_publishing = threading.Event()
        self._stop_consuming = threading.Event()
        self._unreachable: str | None = None
        #: why a worker thread stopped on an unexpected error ("publisher: TypeError: ...")
        self._failed: str | None = None
        #: why the last connection attempt failed (a drill that never connected says it)
        self._last_failure: str | None = None

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
    ) -> DrillLink | None:
        """A connection on the queue, trying the URL list round after round until
        ``deadline`` (monotonic; None: no limit). None when ``stop`` is set or ``done()``
        holds; raises :class:`Unreachable` at the deadline."""
        while not stop.is_set() and not (done is not None and done()):
            try:
                link = self.client.connect(role)
            except ConnectFailed as exc:
                reason = self._last_failure = str(exc)
                if deadline is not None and time.monotonic() >= deadline:
                    raise Unreachable(reason) from None
                stop.wait(0.05)  # between rounds of the URL list
                continue
            self._feed(functools.partial(self.core.connected, role, link.address, link.epoch))
            return link
        return None

    def _lost(self, role: str, link: DrillLink, exc: BaseException) -> None:
        reason = str(exc) if isinstance(exc, Lost) else reason_of(exc)
        self._feed(lambda now: self.core.disconnected(role, link.address, reason, now))
        link.close()

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
        s = self.settings
        interval = 1.0 / s.rate if s.rate > 0 else 0.0
        deadline: float | None = time.monotonic() + s.connect_timeout
        started = time.monotonic()
        next_at = started
        link: DrillLink | None = None
        while not self._publishing_done(started):
            if link is None:
                try:
                    link = self._connect(
                        "publisher",
                        deadline,
                        self._stop_publishing,
                        functools.partial(self._publishing_done, started),
                    )
                except Unreachable as exc:
                    self._give_up("publisher", str(exc))
                    break
                if link is None:
                    break
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
                confirmed = link.publish(body)
            except Lost as exc:
                self._lost("publisher", link, exc)
                link = None
                deadline = time.monotonic() + s.connect_timeout
                continue
            if confirmed:
                self._feed(functools.partial(self.core.confirmed, number))
            else:
                with self._lock:
                    self.core.nacked(number, self.now())
        if link is not None:
            link.close()

    # -- consumer -------------------------------------------------------------------------
    def _number(self, body: bytes) -> int | None:
        run_id, _, number = body.decode("utf-8", "replace").partition(":")
        if run_id != self._run_id or not number.isdigit():
            return None
        return int(number)

    def _consumer(self) -> None:
        s = self.settings
        deadline: float | None = time.monotonic() + s.connect_timeout
        while not self._stop_consuming.is_set():
            try:
                link = self._connect("consumer", deadline, self._stop_consuming)
            except Unreachable as exc:
                self._give_up("consumer", str(exc))
                return
            if link is None:
                return
            deadline = None
            try:
                for delivery in link.deliveries(s.prefetch):
                    if delivery is not None:
                        body, ack = delivery
                        number = self._number(body)
                        with self._lock:
                            self.core.delivered(number)
                        ack()
                    if self._stop_consuming.is_set():
                        break
                link.finish(s.delete_queue and self._unreachable is None)
            except Lost as exc:
                self._lost("consumer", link, exc)

    def _worker(self, role: str, target: Callable[[], None]) -> None:
        """Run a worker thread's loop; an error it does not expect stops the whole drill."""
        try:
            target()
        except Exception as exc:
            with self._lock:
                if self._failed is None:
                    self._failed = f"the {role} stopped on {reason_of(exc)}"
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
