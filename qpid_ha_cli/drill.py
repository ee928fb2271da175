"""``qpid-ha drill``: a fail-over drill, the spout and drain of seed 000 grown up.

A publisher with confirms and a consumer with acks, both pika (an unmodified client, as
our users run), on a fail-over URL list (or one virtual IP). The publisher sends numbered
messages at ``--rate`` for ``--duration`` seconds or until ``--count`` are confirmed; each
client reconnects through the URL list when it loses its connection; then the drill drains
until every confirmed message is received (or ``--drain-timeout``) and ends with a check:
sent, confirmed, received, lost (confirmed but never received), duplicated. It exits 1 if
anything confirmed was lost.

Two layers, as everywhere in this project:

- :class:`DrillCore` keeps the accounts and detects gaps. It is a plain object: no sockets,
  no threads, no clock of its own (every call takes ``now``, in UNIX seconds). Its methods
  return the :class:`DrillEvent` values to log; it never logs itself.
- :class:`DrillRun` is the I/O shell: two pika connections in two threads, the clock, the
  rate, reconnects and logging (``common.log``, component ``drill``). It feeds what happens
  into the core under one lock and logs what the core returns.

Events (``docs/log-schema.md``, "Drill events"): ``drill_started``, ``client_connected``,
``client_disconnected``, ``client_reconnected``, ``confirm_gap``, ``drill_unreachable``,
``drill_finished``.

A confirm gap is detected when a confirm arrives after the publisher waited for one longer
than ``--gap-threshold``: waited meaning it had a message out, unconfirmed, or had lost its
connection. So a low rate alone is no gap. The event gives the last confirm before and the
first after, which is what a fail-over costs a publisher.

Exit codes (the values of ``qpid_ha_cli.main.ExitStatus``): 0 nothing confirmed was lost,
1 something confirmed was lost, 2 bad usage, 3 no broker of the list could be reached.
"""

from __future__ import annotations

import contextlib
import functools
import math
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import IntEnum
from typing import Annotated, Any

import typer

from broker.ha.names import EPOCH_PROPERTY as PROPERTY_EPOCH
from common.duration import parse_duration
from common.log import configure_logging, get_logger, set_log_context
from common.url import BrokerUrl, parse_url

__all__ = [
    "PROPERTY_EPOCH",
    "ROLES",
    "DrillCheck",
    "DrillCore",
    "DrillEvent",
    "DrillExit",
    "DrillRun",
    "DrillSettings",
    "drill",
    "parse_drill_url",
]

ROLES = ("publisher", "consumer")
#: The Connection.Start server property in which an HA broker announces its epoch.
DEFAULT_GAP_THRESHOLD = 0.05  # s


class DrillExit(IntEnum):
    """The drill's exit codes: the same values as ``qpid_ha_cli.main.ExitStatus``."""

    SUCCESS = 0
    ERROR = 1  # something confirmed was lost
    USAGE = 2
    UNREACHABLE = 3


def format_ts(seconds: float) -> str:
    """UNIX seconds as the log schema writes times: ``2026-11-22T07:42:02.123456Z``."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)


# -- the core: accounts and gaps, no I/O ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class DrillEvent:
    """One event to log: its name, level and fields (beyond the common ones)."""

    event: str
    level: str
    fields: dict[str, Any]


@dataclass(frozen=True, slots=True)
class DrillCheck:
    """The drill's result.

    ``received`` counts distinct messages of this drill received, ``duplicated`` the
    deliveries beyond the first of a message, ``lost`` the confirmed messages never
    received. ``unconfirmed`` were sent but neither confirmed nor nacked (in doubt: the
    connection was lost first); ``unconfirmed_received`` of those arrived anyway.
    ``foreign`` counts deliveries that are not this drill's messages. ``max_gap_ms`` is the
    longest time between two consecutive confirms.
    """

    sent: int
    confirmed: int
    received: int
    lost: int
    duplicated: int
    nacked: int
    unconfirmed: int
    unconfirmed_received: int
    foreign: int
    gaps: int
    max_gap_ms: float

    @property
    def ok(self) -> bool:
        return self.lost == 0

    def fields(self) -> dict[str, Any]:
        return {
            "sent": self.sent,
            "confirmed": self.confirmed,
            "received": self.received,
            "lost": self.lost,
            "duplicated": self.duplicated,
            "nacked": self.nacked,
            "unconfirmed": self.unconfirmed,
            "unconfirmed_received": self.unconfirmed_received,
            "foreign": self.foreign,
            "gaps": self.gaps,
            "max_gap_ms": self.max_gap_ms,
        }

    def line(self) -> str:
        """The check in one line."""
        verdict = "OK" if self.ok else "FAILED"
        return (
            f"drill {verdict}: sent {self.sent}, confirmed {self.confirmed}, "
            f"received {self.received}, lost {self.lost}, duplicated {self.duplicated}, "
            f"unconfirmed {self.unconfirmed}, nacked {self.nacked}, "
            f"confirm gaps {self.gaps}, max gap {self.max_gap_ms:.1f} ms"
        )


class DrillCore:
    """The drill's accounts and gap detection, fed by the shell. THREAD UNSAFE: the caller
    serializes calls (the shell holds one lock).

    The publisher asks :meth:`publish` for each message's number, then reports
    :meth:`confirmed` or :meth:`nacked`; the consumer reports :meth:`delivered`; both report
    :meth:`connected` and :meth:`disconnected`. Methods that may have something to log
    return a list of :class:`DrillEvent`. Messages still unconfirmed when the publisher loses
    its connection are in doubt: neither confirmed nor lost if they never arrive.
    """

    def __init__(self, gap_threshold: float = DEFAULT_GAP_THRESHOLD) -> None:
        if not gap_threshold >= 0 or math.isinf(gap_threshold):
            raise ValueError(f"gap threshold must be a finite number >= 0: {gap_threshold!r}")
        self.gap_threshold = gap_threshold
        self.sent = 0
        self._outstanding: set[int] = set()
        self._confirmed: set[int] = set()
        self._nacked: set[int] = set()
        self._received: set[int] = set()
        self.deliveries = 0
        self.foreign = 0
        self.gaps = 0
        self.max_gap = 0.0
        self.epoch: int | None = None  # the highest any broker announced
        self._last_confirm: float | None = None
        self._waiting_since: float | None = None  # the publisher waits for a confirm
        self._down_since: dict[str, float] = {}
        self._connected: set[str] = set()
        self._ever_connected: set[str] = set()

    # -- publisher ------------------------------------------------------------------------
    def publish(self, now: float) -> int:
        """A message is about to be sent: its number (0, 1, 2, ...)."""
        number = self.sent
        self.sent += 1
        self._outstanding.add(number)
        if self._waiting_since is None:
            self._waiting_since = now
        return number

    def confirmed(self, number: int, now: float) -> list[DrillEvent]:
        """The broker confirmed message ``number``: a ``confirm_gap`` if it came late."""
        if number not in self._outstanding:
            return []  # not sent, already settled, or in doubt since a lost connection
        self._outstanding.discard(number)
        self._confirmed.add(number)
        events: list[DrillEvent] = []
        previous = self._last_confirm
        if previous is not None:
            self.max_gap = max(self.max_gap, now - previous)
        waited = now - self._waiting_since if self._waiting_since is not None else 0.0
        if waited > self.gap_threshold:
            self.gaps += 1
            events.append(
                DrillEvent(
                    "confirm_gap",
                    "warning",
                    {
                        "gap_ms": _ms(now - previous) if previous is not None else None,
                        "stall_ms": _ms(waited),
                        "last_confirm_ts": format_ts(previous) if previous is not None else None,
                        "first_confirm_ts": format_ts(now),
                        "message": number,
                    },
                )
            )
        self._last_confirm = now
        self._waiting_since = now if self._outstanding else None
        return events

    def nacked(self, number: int, now: float) -> None:
        """The broker refused message ``number`` (basic.nack): not confirmed, not lost."""
        if number in self._outstanding:
            self._outstanding.discard(number)
            self._nacked.add(number)
            if not self._outstanding:
                self._waiting_since = None

    # -- consumer -------------------------------------------------------------------------
    def delivered(self, number: int | None) -> None:
        """The consumer got message ``number`` (None: not one of this drill's messages)."""
        if number is None or not 0 <= number < self.sent:
            self.foreign += 1
            return
        self.deliveries += 1
        self._received.add(number)

    # -- connections ----------------------------------------------------------------------
    def connected(self, role: str, address: str, epoch: int | None, now: float) -> list[DrillEvent]:
        """``role`` connected to ``address`` (the broker announced ``epoch``)."""
        _check_role(role)
        if epoch is not None:
            self.epoch = epoch if self.epoch is None else max(self.epoch, epoch)
        self._connected.add(role)
        down_since = self._down_since.pop(role, None)
        first = role not in self._ever_connected
        self._ever_connected.add(role)
        fields: dict[str, Any] = {"role": role, "address": address, "epoch": epoch}
        if down_since is not None:
            return [
                DrillEvent(
                    "client_reconnected", "info", {**fields, "outage_ms": _ms(now - down_since)}
                )
            ]
        if first:
            return [DrillEvent("client_connected", "info", fields)]
        return []

    def disconnected(self, role: str, address: str, reason: str, now: float) -> list[DrillEvent]:
        """``role`` lost its connection to ``address``."""
        _check_role(role)
        if role not in self._connected:
            return []
        self._connected.discard(role)
        self._down_since[role] = now
        if role == "publisher":
            self._outstanding.clear()  # in doubt from now on
            if self._waiting_since is None:
                self._waiting_since = now
        return [
            DrillEvent(
                "client_disconnected",
                "warning",
                {"role": role, "address": address, "reason": reason},
            )
        ]

    def gave_up(self, role: str, reason: str) -> list[DrillEvent]:
        """``role`` could not reconnect in time and stops."""
        _check_role(role)
        return [DrillEvent("client_gave_up", "error", {"role": role, "reason": reason})]

    def ever_connected(self, role: str) -> bool:
        return role in self._ever_connected

    # -- results --------------------------------------------------------------------------
    @property
    def confirmed_count(self) -> int:
        return len(self._confirmed)

    def drained(self) -> bool:
        """Every confirmed message has been received."""
        return self._confirmed <= self._received

    def check(self) -> DrillCheck:
        settled = self._confirmed | self._nacked
        unconfirmed = set(range(self.sent)) - settled
        return DrillCheck(
            sent=self.sent,
            confirmed=len(self._confirmed),
            received=len(self._received),
            lost=len(self._confirmed - self._received),
            duplicated=self.deliveries - len(self._received),
            nacked=len(self._nacked),
            unconfirmed=len(unconfirmed),
            unconfirmed_received=len(unconfirmed & self._received),
            foreign=self.foreign,
            gaps=self.gaps,
            max_gap_ms=_ms(self.max_gap),
        )

    def finished(self) -> list[DrillEvent]:
        check = self.check()
        return [DrillEvent("drill_finished", "info" if check.ok else "error", check.fields())]


def _check_role(role: str) -> None:
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}: expected one of {', '.join(ROLES)}")


# -- the shell: pika clients in threads -----------------------------------------------------


def parse_drill_url(text: str) -> tuple[BrokerUrl, str]:
    """A URL list and its virtual host, from our grammar (``amqp:guest/guest@h1,h2:5673``,
    :func:`common.url.parse_url`) or the AMQP URI form with a host list
    (``amqp://guest:guest@h1:5672,h2:5672/vhost``, credentials and vhost percent-encoded).

    :raises ValueError: naming ``text`` and what is wrong.
    """
    stripped = text.strip()
    if stripped[:7].lower() != "amqp://":
        return parse_url(stripped), "/"
    rest = stripped[7:]
    hosts, slash, path = rest.partition("/")
    vhost = urllib.parse.unquote(path) if slash and path else "/"
    user: str | None = None
    password: str | None = None
    if "@" in hosts:
        credentials, hosts = hosts.rsplit("@", 1)
        name, colon, secret = credentials.partition(":")
        user = urllib.parse.unquote(name)
        password = urllib.parse.unquote(secret) if colon else None
    try:
        url = parse_url(hosts)
        return BrokerUrl(url.addresses, user or None, password if user else None), vhost
    except ValueError as exc:
        raise ValueError(f"invalid broker URL {text!r}: {exc}") from None


@dataclass
class DrillSettings:
    url: BrokerUrl
    vhost: str = "/"
    queue: str = field(default_factory=lambda: f"qpid-ha-drill-{uuid.uuid4().hex[:8]}")
    delete_queue: bool = True  # the drill named the queue: delete it at the end if empty
    rate: float = 100.0  # messages/s; 0: as fast as confirms allow
    duration: float | None = 10.0
    count: int | None = None
    gap_threshold: float = DEFAULT_GAP_THRESHOLD
    drain_timeout: float = 30.0
    connect_timeout: float = 30.0
    scenario: str | None = None
    prefetch: int = 100


class Unreachable(Exception):
    """No broker of the URL list could be reached within the connect timeout."""


class DrillRun:
    """Runs one drill: the publisher and consumer threads, the drain, the check.

    ``clock`` returns UNIX seconds; the default ticks with the monotonic clock from the
    wall-clock time at start, so a clock step does not make a gap.
    """

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
            except (pika.exceptions.AMQPError, OSError) as exc:
                reason = _reason(exc)
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
                        "gap_threshold_ms": _ms(s.gap_threshold),
                        "run_id": self._run_id,
                    },
                )
            ]
        )
        consumer = threading.Thread(target=self._consumer, name="drill-consumer", daemon=True)
        publisher = threading.Thread(target=self._publisher, name="drill-publisher", daemon=True)
        consumer.start()
        publisher.start()
        try:
            publisher.join()
            deadline = time.monotonic() + s.drain_timeout
            while self._unreachable is None and time.monotonic() < deadline:
                with self._lock:
                    if self.core.drained():
                        break
                self._stop_consuming.wait(0.02)
        finally:
            self._stop_publishing.set()
            self._stop_consuming.set()
            publisher.join()
            consumer.join(30)
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


# -- the command ----------------------------------------------------------------------------


class UsageError(Exception):
    pass


def _duration(option: str, text: str | None, *, positive: bool = False) -> float | None:
    if text is None:
        return None
    try:
        value = parse_duration(text)
    except ValueError as exc:
        raise UsageError(f"{option}: {exc}") from None
    if positive and value <= 0:
        raise UsageError(f"{option}: must be more than 0: {text!r}")
    return value


def _number(option: str, text: str | None, kind: type[int] | type[float]) -> Any:
    if text is None:
        return None
    try:
        value = kind(text)
    except ValueError:
        name = "a whole number" if kind is int else "a number"
        raise UsageError(f"{option}: expected {name}, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise UsageError(f"{option}: must be a finite number >= 0, got {text!r}")
    return value


def _settings(
    url: str | None,
    brokers: list[str],
    queue: str | None,
    rate: str,
    duration: str | None,
    count: str | None,
    gap_threshold: str,
    drain_timeout: str,
    connect_timeout: str,
    scenario: str | None,
) -> DrillSettings:
    if url is not None and brokers:
        raise UsageError("give either --url or --broker, not both")
    if url is None and not brokers:
        raise UsageError("give the brokers: --url URL_LIST or --broker HOST:PORT (repeated)")
    try:
        if url is not None:
            broker_url, vhost = parse_drill_url(url)
        else:
            parts = [parse_drill_url(b) for b in brokers]
            credentials = {(p.user, p.password) for p, _ in parts if p.user is not None}
            if len(credentials) > 1:
                raise UsageError("--broker: the brokers give different credentials")
            user, password = next(iter(credentials), (None, None))
            addresses = tuple(a for p, _ in parts for a in p.addresses)
            broker_url, vhost = BrokerUrl(addresses, user, password), parts[0][1]
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    rate_value = _number("--rate", rate, float)
    count_value = _number("--count", count, int)
    if count_value == 0:
        raise UsageError("--count: must be at least 1")
    duration_value = _duration("--duration", duration, positive=True)
    if duration_value is None and count_value is None:
        duration_value = 10.0
    if queue is not None and not 0 < len(queue.encode()) <= 255:
        raise UsageError(f"--queue: a queue name has 1 to 255 bytes: {queue!r}")
    settings = DrillSettings(
        url=broker_url,
        vhost=vhost,
        rate=rate_value,
        duration=duration_value,
        count=count_value,
        gap_threshold=_duration("--gap-threshold", gap_threshold) or 0.0,
        drain_timeout=_duration("--drain-timeout", drain_timeout) or 0.0,
        connect_timeout=_duration("--connect-timeout", connect_timeout, positive=True) or 0.0,
        scenario=scenario,
    )
    if queue is not None:
        settings.queue, settings.delete_queue = queue, False
    return settings


def _fail(message: str, code: DrillExit) -> typer.Exit:
    typer.echo(f"qpid-ha drill: error: {message}", err=True)
    return typer.Exit(int(code))


def drill(
    url: Annotated[
        str | None,
        typer.Option(
            "--url",
            metavar="URL_LIST",
            help="fail-over URL list: amqp:guest/guest@h1:5672,h2:5672 (or the AMQP URI "
            "form amqp://guest:guest@h1:5672,h2:5672/vhost)",
        ),
    ] = None,
    broker: Annotated[
        list[str] | None,
        typer.Option(
            "--broker",
            metavar="ADDRESS",
            help="a broker address \\[user/password@]host\\[:port]; repeat for each",
        ),
    ] = None,
    queue: Annotated[
        str | None,
        typer.Option(
            metavar="NAME", help="queue to use (default: a new one, deleted at the end if empty)"
        ),
    ] = None,
    rate: Annotated[
        str,
        typer.Option(
            metavar="PER_SECOND",
            help="messages per second, at most (one message awaits its confirm at a time);"
            " 0: as fast as confirms allow",
        ),
    ] = "100",
    duration: Annotated[
        str | None,
        typer.Option(
            metavar="DURATION",
            help="publish for this long: 10, 2.5s, 500ms (default 10 s without --count)",
        ),
    ] = None,
    count: Annotated[
        str | None, typer.Option(metavar="N", help="publish until this many messages are confirmed")
    ] = None,
    gap_threshold: Annotated[
        str,
        typer.Option(
            metavar="DURATION", help="log a confirm_gap when waiting for a confirm longer than this"
        ),
    ] = "50ms",
    drain_timeout: Annotated[
        str,
        typer.Option(
            metavar="DURATION", help="after publishing, wait this long for every confirmed message"
        ),
    ] = "30",
    connect_timeout: Annotated[
        str,
        typer.Option(metavar="DURATION", help="try the URL list this long to connect or reconnect"),
    ] = "30",
    node: Annotated[
        str, typer.Option(metavar="NAME", help="the node field of the drill's log events")
    ] = "drill",
    cluster: Annotated[
        str | None, typer.Option(metavar="NAME", help="the cluster field of the drill's log events")
    ] = None,
    scenario: Annotated[
        str | None,
        typer.Option(metavar="LABEL", help="a label for this run, logged on drill_started"),
    ] = None,
    log_file: Annotated[
        str | None,
        typer.Option(metavar="FILE", help="append JSON events to this file (default: stderr)"),
    ] = None,
    log_level: Annotated[
        str, typer.Option(metavar="LEVEL", help="debug, info, warning, error")
    ] = "info",
    log_format: Annotated[str, typer.Option(metavar="FORMAT", help="json or console")] = "json",
) -> None:
    """Run a fail-over drill: publish with confirms and consume over the URL list, log every
    gap, then check sent, confirmed, received, lost, duplicated. Exit 1 if anything
    confirmed was lost, 3 if no broker could be reached."""
    try:
        settings = _settings(
            url,
            broker or [],
            queue,
            rate,
            duration,
            count,
            gap_threshold,
            drain_timeout,
            connect_timeout,
            scenario,
        )
        configure_logging(
            level=log_level,
            fmt=log_format,
            file=log_file,
            node=node,
            component="drill",
            cluster=cluster,
        )
    except (UsageError, ValueError) as exc:
        raise _fail(str(exc), DrillExit.USAGE) from None
    except OSError as exc:
        raise _fail(f"--log-file: {exc.strerror or exc}: {log_file}", DrillExit.USAGE) from None
    try:
        run = DrillRun(settings)
    except ImportError as exc:
        raise _fail(f"the drill needs pika (pip install pika): {exc}", DrillExit.USAGE) from None
    try:
        check = run.run()
    except Unreachable as exc:
        raise _fail(
            f"no broker of {settings.url.redacted()} could be reached: {exc}",
            DrillExit.UNREACHABLE,
        ) from None
    typer.echo(check.line())
    if not check.ok:
        raise typer.Exit(int(DrillExit.ERROR))
