"""What a drill runs with: :class:`DrillSettings`, and how the command's option strings
become them (:func:`settings_from_options`, :func:`parse_drill_url`).

Contract
========

- Pure: parses and checks text, opens nothing, talks to nobody.
- Every bad value raises :class:`UsageError` (a :class:`common.exit_status.CommandError`
  with status USAGE) whose message is one line naming the option and the value; the
  command prints it and exits 2.
"""

from __future__ import annotations

import math
import urllib.parse
import uuid
from dataclasses import dataclass, field
from typing import Any

from common.duration import parse_duration
from common.exit_status import CommandError, ExitStatus
from common.url import BrokerUrl, parse_url
from qpid_ha_cli.drill.core import DEFAULT_GAP_THRESHOLD

__all__ = ["QUEUE_TYPES", "DrillSettings", "UsageError", "parse_drill_url", "settings_from_options"]


class UsageError(CommandError):
    """A bad option or value of the drill: exit 2 with this one line."""

    def __init__(self, message: str) -> None:
        super().__init__(message, ExitStatus.USAGE)


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


#: the ``x-queue-type`` values ``--queue-type`` takes (RabbitMQ's; qpidd's queues are classic)
QUEUE_TYPES = ("classic", "quorum")


@dataclass
class DrillSettings:
    """One drill's parameters, in seconds and counts (parsed, checked)."""

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
    #: ``x-queue-type`` of the queue the drill declares (None: the broker's default); RabbitMQ
    #: refuses a declare of its quorum queue without it (bench/failover_targets.py)
    queue_type: str | None = None


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


def settings_from_options(
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
    queue_type: str | None = None,
) -> DrillSettings:
    """The command's option strings as settings. :raises UsageError: naming the option."""
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
    if queue_type is not None and queue_type not in QUEUE_TYPES:
        raise UsageError(f"--queue-type: expected one of {', '.join(QUEUE_TYPES)}: {queue_type!r}")
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
        queue_type=queue_type,
    )
    if queue is not None:
        settings.queue, settings.delete_queue = queue, False
    return settings
