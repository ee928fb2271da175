"""Prometheus text exposition (format version 0.0.4) of a broker's state.

:func:`render_metrics` is a pure function of the broker it is given (and of ``now``): no
I/O, no registry, no global state, so it is tested without HTTP. The HTTP handler in
:mod:`broker.management.status` only sets the content type and returns the text.

The broker is described structurally (:class:`BrokerView` and friends) rather than by
importing :class:`broker.server.Broker`, so that this module and the management API depend
only on the plain core objects and can be driven by a test double.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

from broker import __version__
from broker.core.vhost import VirtualHost
from broker.liveness import Durations
from broker.loop_steps import LoopSteps

#: The Content-Type of the text format, as Prometheus expects it.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


# -- what the renderer (and the HTTP API) reads of a broker -----------------------------
class ConnectionView(Protocol):
    """What is shown of one AMQP connection (:class:`broker.amqp.connection.Connection`)."""

    @property
    def id(self) -> int: ...

    @property
    def name(self) -> str: ...

    @property
    def peer(self) -> str: ...

    @property
    def user(self) -> str | None: ...

    @property
    def state(self) -> Enum: ...

    @property
    def client_properties(self) -> Mapping[str, Any]: ...

    @property
    def channels(self) -> Mapping[int, object]: ...

    @property
    def heartbeat(self) -> int: ...

    @property
    def frame_max(self) -> int: ...

    @property
    def messages_published(self) -> int: ...

    @property
    def messages_delivered(self) -> int: ...

    @property
    def recv_oct(self) -> int: ...

    @property
    def send_oct(self) -> int: ...

    @property
    def protocol(self) -> str:
        """``AMQP 0-9-1`` or ``AMQP 1.0``."""
        ...


class ContextView(Protocol):
    """The connection registry and counters (:class:`broker.amqp.context.BrokerContext`)."""

    @property
    def connections(self) -> Mapping[int, ConnectionView]: ...

    @property
    def connections_1_0(self) -> Mapping[int, ConnectionView]: ...

    @property
    def connections_opened_total(self) -> int: ...

    @property
    def connections_refused_total(self) -> int: ...

    @property
    def protocol_errors_total(self) -> int: ...


class OptionsView(Protocol):
    """The options read here (:class:`broker.options.BrokerOptions`)."""

    @property
    def node_name(self) -> str: ...


class BrokerView(Protocol):
    """What is read of a broker (:class:`broker.server.Broker`)."""

    @property
    def options(self) -> OptionsView: ...

    @property
    def vhost(self) -> VirtualHost: ...

    @property
    def context(self) -> ContextView: ...

    @property
    def ha_state(self) -> str: ...

    @property
    def started_at(self) -> float: ...


# -- the text format ---------------------------------------------------------------------
def escape_label_value(value: str) -> str:
    """A label value as the text format writes it: backslash, double quote, newline."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(text: str) -> str:
    """HELP text as the text format writes it: backslash and newline."""
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float) -> str:
    """A sample value: integers exactly, floats in Go's notation for the special values."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


@dataclass(slots=True)
class Family:
    """One metric family: its HELP and TYPE lines and its samples."""

    name: str
    type: str
    help: str
    samples: list[tuple[dict[str, str], float]] = field(default_factory=list)

    def add(self, value: float, **labels: str) -> None:
        self.samples.append((labels, value))

    def render(self) -> Iterable[str]:
        yield f"# HELP {self.name} {escape_help(self.help)}"
        yield f"# TYPE {self.name} {self.type}"
        for labels, value in self.samples:
            if labels:
                text = ",".join(f'{k}="{escape_label_value(v)}"' for k, v in labels.items())
                yield f"{self.name}{{{text}}} {format_value(value)}"
            else:
                yield f"{self.name} {format_value(value)}"


def _gauge(name: str, help: str, value: float | None = None) -> Family:
    family = Family(name, "gauge", help)
    if value is not None:
        family.add(value)
    return family


def _counter(name: str, help: str, value: float | None = None) -> Family:
    family = Family(name, "counter", help)
    if value is not None:
        family.add(value)
    return family


#: Per-queue families: (name, type, help, attribute of broker.core.queue.Queue).
QUEUE_FAMILIES: tuple[tuple[str, str, str, str], ...] = (
    ("qpidd_queue_messages", "gauge", "Messages ready for delivery.", "message_count"),
    (
        "qpidd_queue_messages_unacked",
        "gauge",
        "Messages delivered and not yet acknowledged.",
        "unacked",
    ),
    ("qpidd_queue_consumers", "gauge", "Consumers of the queue.", "consumer_count"),
    ("qpidd_queue_bytes", "gauge", "Body bytes of the ready messages.", "bytes"),
    (
        "qpidd_queue_enqueued_total",
        "counter",
        "Messages enqueued since the queue was declared.",
        "enqueued_total",
    ),
    (
        "qpidd_queue_delivered_total",
        "counter",
        "Messages delivered to consumers or fetched with basic.get.",
        "delivered_total",
    ),
    ("qpidd_queue_acked_total", "counter", "Messages acknowledged.", "acked_total"),
    ("qpidd_queue_expired_total", "counter", "Messages that expired (TTL).", "expired_total"),
    (
        "qpidd_queue_dropped_total",
        "counter",
        "Messages dropped from the head by a length limit.",
        "dropped_total",
    ),
    (
        "qpidd_queue_rejected_publishes_total",
        "counter",
        "Publishes the queue refused (x-overflow reject-publish or the default byte limit).",
        "rejected_publishes",
    ),
)


def collect(
    broker: BrokerView, now: float | None = None, *, with_queues: bool = True
) -> list[Family]:
    """Every metric family of ``broker``, at wall-clock time ``now`` (default: now);
    ``with_queues`` False: the broker's own only (:func:`render_slices` adds the queues')."""
    now = time.time() if now is None else now
    # every vhost (a broker with one has only ``vhost``); a queue outside "/" is labelled
    # with its vhost too, so that two vhosts' queues of one name are two series
    vhosts: list[VirtualHost] = list(getattr(broker, "vhosts", None) or [broker.vhost])
    ctx = broker.context
    info = _gauge("qpidd_info", "Broker identity; the value is always 1.")
    info.add(1, node=broker.options.node_name, version=__version__, ha_state=broker.ha_state)
    families = [
        _gauge("qpidd_up", "1 while the broker serves its management API.", 1),
        info,
        _gauge(
            "qpidd_uptime_seconds",
            "Seconds since the broker started.",
            round(max(0.0, now - broker.started_at), 3),
        ),
        _gauge(
            "qpidd_connections",
            "AMQP connections of either protocol (in any state).",
            len(ctx.connections) + len(ctx.connections_1_0),
        ),
        _gauge(
            "qpidd_connections_amqp_1_0",
            "AMQP 1.0 connections (in any state; counted in qpidd_connections too).",
            len(ctx.connections_1_0),
        ),
        _counter(
            "qpidd_connections_opened_total",
            "AMQP connections accepted since the broker started.",
            ctx.connections_opened_total,
        ),
        _counter(
            "qpidd_connections_refused_total",
            "AMQP connections refused (limits, authentication, HA role).",
            ctx.connections_refused_total,
        ),
        _counter(
            "qpidd_protocol_errors_total",
            "Connections closed for a protocol error.",
            ctx.protocol_errors_total,
        ),
        _gauge("qpidd_queues", "Queues in the virtual hosts.", sum(len(v.queues) for v in vhosts)),
        _gauge(
            "qpidd_exchanges",
            "Exchanges in the virtual hosts (built-in ones included).",
            sum(len(v.exchanges) for v in vhosts),
        ),
        _counter(
            "qpidd_messages_published_total",
            "Messages published to an exchange.",
            sum(v.published_total for v in vhosts),
        ),
        _counter(
            "qpidd_messages_unroutable_total",
            "Published messages that no queue took.",
            sum(v.unroutable_total for v in vhosts),
        ),
        _counter(
            "qpidd_messages_dead_lettered_total",
            "Messages republished to a dead-letter exchange.",
            sum(v.dead_letters.total for v in vhosts),
        ),
    ]
    liveness = getattr(broker, "liveness", None)
    lag = getattr(liveness, "lag", None)
    if isinstance(lag, Durations):
        families.extend(_loop_lag(lag))
    steps = getattr(liveness, "steps", None)
    if isinstance(steps, LoopSteps):
        families.extend(_loop_steps(steps))
    if not with_queues:
        return families
    queues = _queues(vhosts)
    for name, kind, help, attribute in QUEUE_FAMILIES:
        family = Family(name, kind, help)
        _add_queues(family, attribute, queues)
        families.append(family)
    return families


def _queues(vhosts: Iterable[VirtualHost]) -> list[Any]:
    """Every queue, those of vhost ``/`` first, by vhost and name."""
    return sorted(
        (q for v in vhosts for q in v.queues.values()),
        key=lambda q: (q.vhost != "/", q.vhost, q.name),
    )


def _add_queues(family: Family, attribute: str, queues: Iterable[Any]) -> None:
    for queue in queues:
        if queue.vhost == "/":
            family.add(getattr(queue, attribute), queue=queue.name)
        else:
            family.add(getattr(queue, attribute), queue=queue.name, vhost=queue.vhost)


def _loop_lag(lag: Durations) -> list[Family]:
    """The event loop's lag (:mod:`broker.liveness`: the scheduling delay of its 50 ms
    progress timer): quantiles of the last window (10 s, the ``loop_lag`` event's), the
    samples and the largest since the start."""
    window = lag.last
    quantiles = Family(
        "qpidd_loop_lag_seconds",
        "gauge",
        "Scheduling delay of the event loop's 50 ms progress timer, last 10 s.",
    )
    for q, value in (("0.5", window.p50), ("0.99", window.p99), ("1", window.max)):
        quantiles.add(round(value, 6), quantile=q)
    return [
        quantiles,
        _counter("qpidd_loop_lag_samples_total", "Loop lag samples taken.", sum(lag.total)),
        _gauge(
            "qpidd_loop_lag_max_seconds",
            "The longest scheduling delay of the progress timer since the broker started.",
            round(lag.total_max, 6),
        ),
    ]


def _loop_steps(steps: LoopSteps) -> list[Family]:
    """The event loop's steps as CPU time (:mod:`broker.loop_steps`: the work between two
    turns of its tick, every 10 ms, 40 ms idle, other threads' garbage collections
    included): quantiles of the last window (10 s, the ``loop_lag`` event's), the count
    and the longest since the start; the garbage collector's pauses."""
    window = steps.steps.last
    quantiles = Family(
        "qpidd_loop_step_seconds",
        "gauge",
        "CPU time of the event loop's steps (between two turns of its tick), last 10 s.",
    )
    for q, value in (("0.5", window.p50), ("0.99", window.p99), ("1", window.max)):
        quantiles.add(round(value, 6), quantile=q)
    view = steps.view(0.0)
    return [
        quantiles,
        _counter("qpidd_loop_steps_total", "Loop steps measured.", sum(steps.steps.total)),
        _gauge(
            "qpidd_loop_step_max_seconds",
            "The longest step of the event loop (CPU time) since the broker started.",
            round(view["step_max_ms"] / 1000.0, 6),
        ),
        _counter(
            "qpidd_loop_long_steps_total",
            "Steps of the event loop of 100 ms of CPU or more since the broker started.",
            steps.long_total,
        ),
        _counter("qpidd_gc_pauses_total", "Garbage collections (any thread).", steps.gc.count),
        _counter(
            "qpidd_gc_pause_seconds_total",
            "CPU time of garbage collections.",
            round(steps.gc.total, 6),
        ),
        _gauge(
            "qpidd_gc_pause_max_seconds",
            "The longest garbage collection (CPU time) since the broker started.",
            round(steps.gc.longest, 6),
        ),
    ]


#: Samples rendered in one slice of :func:`render_slices`.
SLICE = 500


def render_slices(
    broker: BrokerView, now: float | None = None, size: int = SLICE, *, per_queue: bool = True
) -> Iterator[str]:
    """The Prometheus text exposition of ``broker`` in slices of about ``size`` samples
    (the text is their concatenation; it ends with a newline). The management API renders
    one slice per turn of the event loop: with thousands of queues, the whole text in one
    callback held the loop for tens of milliseconds. The queues are listed once, first;
    the counters each slice reads are those of its own turn (a scrape is no atomic snapshot
    either way). Without ``per_queue``, the aggregates only (no queue name)."""
    vhosts: list[VirtualHost] = list(getattr(broker, "vhosts", None) or [broker.vhost])
    queues = _queues(vhosts) if per_queue else []
    lines: list[str] = []
    for family in collect(broker, now, with_queues=False):
        lines.extend(family.render())
    yield "\n".join(lines) + "\n"
    if not per_queue:
        return
    for name, kind, help, attribute in QUEUE_FAMILIES:
        for start in range(0, max(1, len(queues)), size):
            family = Family(name, kind, help)
            _add_queues(family, attribute, queues[start : start + size])
            rendered = list(family.render())
            if start:
                rendered = rendered[2:]  # HELP and TYPE once, before the first slice
            if rendered:
                yield "\n".join(rendered) + "\n"


def render_metrics(broker: BrokerView, now: float | None = None, per_queue: bool = True) -> str:
    """The Prometheus text exposition of ``broker`` (ends with a newline): aggregates, and
    the per-queue series with ``per_queue``."""
    return "".join(render_slices(broker, now, per_queue=per_queue))
