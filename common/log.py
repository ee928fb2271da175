"""Structured logging: one JSON object a line, the schema ``analytics/`` reads.

Every event carries at least (see :data:`LOG_FIELDS`)::

    ts         UTC time, ISO-8601 with microseconds and "Z": 2026-11-22T07:42:02.123456Z
    level      debug, info, warning, error or critical
    event      what happened, a snake_case name: "broker_started"
    node       this broker's name (--node-name)
    cluster    the HA cluster's name, null outside a cluster
    epoch      the HA epoch, null until the HA code sets it
    component  which part logged it: broker, amqp, ha, management, ...
    schema     the version of this schema, :data:`LOG_SCHEMA_VERSION`

plus the event's own fields. The schema is a public interface: change a field's meaning
only together with :data:`LOG_SCHEMA_VERSION`.

Call :func:`configure_logging` once at start-up, before logging (``hold_stderr=True``: the
lines meant for stderr wait until :func:`release_held_lines`, or are dropped by
:func:`drop_held_lines` when the program fails to start and says why in one line of its
own); :func:`set_log_context`
changes node, cluster or epoch for every later event (the HA code sets the epoch).
:func:`get_logger` returns a structlog logger whose filtered-out levels are no-ops.
In JSON mode an exception becomes a structured ``exception`` field, never a multi-line
traceback. Importing this module does no I/O and does not configure structlog.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Mapping, MutableMapping
from datetime import UTC, datetime
from typing import IO, Any, TextIO, cast

# structlog's dev and tracebacks modules import rich, when installed (typer brings it), for
# their rich renderers alone; this module uses neither (plain tracebacks on the console, no
# locals in JSON). Importing rich was a fifth of a broker's start-up CPU (0.1 s of 0.5 s at
# every qpidd, agent and qpid-ha start), so structlog is imported with rich held out;
# whoever needs rich afterwards (typer's help) imports it as usual.
_HOLD_RICH = "rich" not in sys.modules
if _HOLD_RICH:
    sys.modules["rich"] = None  # type: ignore[assignment]  # "import rich" raises ImportError
try:
    import structlog
    import structlog.tracebacks
finally:
    if _HOLD_RICH:
        del sys.modules["rich"]
from structlog.typing import EventDict, FilteringBoundLogger, Processor, WrappedLogger  # noqa: E402

__all__ = [
    "LEVELS",
    "LOG_FIELDS",
    "LOG_SCHEMA_VERSION",
    "configure_logging",
    "drop_held_lines",
    "get_log_context",
    "get_logger",
    "release_held_lines",
    "reset_logging",
    "set_log_context",
]

LOG_SCHEMA_VERSION = "1"

#: Fields present in every event, in the order the JSON renderer writes them.
LOG_FIELDS = ("ts", "level", "event", "node", "cluster", "epoch", "component", "schema")

LEVELS: dict[str, int] = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}

_RESERVED = frozenset({"ts", "level", "event", "schema"})

_DEFAULT_CONTEXT: dict[str, Any] = {
    "node": None,
    "cluster": None,
    "epoch": None,
    "component": "broker",
    "schema": LOG_SCHEMA_VERSION,
}
# Replaced as a whole (never mutated), so a processor never sees a half-made update.
_context: dict[str, Any] = dict(_DEFAULT_CONTEXT)
_opened: IO[str] | None = None
_configured = False


class _Sink:
    """What every logger writes to: the stream of the latest :func:`configure_logging`, or
    ``sys.stderr`` as it is at each write (``stream`` None).

    A logger is cached on its first use (``cache_logger_on_first_use``) with the stream of
    the configuration of that moment; through this, a logger cached under an earlier
    configuration writes where the latest says, never to a file that configuration closed
    (in-process tests configure again and again), nor to a stderr that was swapped and
    closed: a program swaps it rarely, but a test runner (typer's CliRunner) swaps it for
    each command it runs in process and closes its own afterwards, and a logger cached
    meanwhile wrote to the closed stream ever after (``ValueError: I/O operation on closed
    file`` in later tests on the same worker)."""

    def __init__(self) -> None:
        self.stream: IO[str] | _HeldStream | None = None

    def _target(self) -> IO[str] | _HeldStream:
        return sys.stderr if self.stream is None else self.stream

    def write(self, text: str) -> int:
        return self._target().write(text)

    def flush(self) -> None:
        self._target().flush()

    def isatty(self) -> bool:
        return self._target().isatty()


_SINK = _Sink()


class _HeldStream:
    """stderr, holding the lines written to it until :meth:`release` (then written, and
    every later line at once) or :meth:`drop`. A program's start-up: a failed start prints
    its one-line error alone, not the JSON lines logged before it (a log file gets them)."""

    def __init__(self) -> None:
        self._held: list[str] | None = []

    @property
    def _stream(self) -> IO[str]:
        return sys.stderr  # as it is at each write (see _Sink)

    def write(self, text: str) -> int:
        if self._held is None:
            return self._stream.write(text)
        self._held.append(text)
        return len(text)

    def flush(self) -> None:
        if self._held is None:
            self._stream.flush()

    def isatty(self) -> bool:
        return self._stream.isatty()

    def release(self) -> None:
        held, self._held = self._held, None
        if held:
            self._stream.write("".join(held))
            self._stream.flush()

    def drop(self) -> None:
        if self._held is not None:
            self._held = []


_held: _HeldStream | None = None


def set_log_context(**fields: Any) -> None:
    """Set fields (``node``, ``cluster``, ``epoch``, ``component`` default, ...) that every
    later event carries unless the event or its logger sets them itself."""
    global _context
    bad = _RESERVED.intersection(fields)
    if bad:
        raise ValueError(f"cannot set log field(s) {sorted(bad)} in the context")
    _context = {**_context, **fields}


def _reset_context() -> None:
    global _context
    _context = dict(_DEFAULT_CONTEXT)


def get_log_context() -> dict[str, Any]:
    """A copy of the fields :func:`set_log_context` maintains."""
    return dict(_context)


def _add_context(_: WrappedLogger, __: str, event_dict: EventDict) -> EventDict:
    for key, value in _context.items():
        event_dict.setdefault(key, value)
    return event_dict


#: (second, its text): the timestamp's text up to the second, made once a second.
_second: tuple[int, str] = (-1, "")


def _add_timestamp(_: WrappedLogger, __: str, event_dict: EventDict) -> EventDict:
    """``ts``: 2026-11-22T07:42:02.123456Z. The text up to the second is made once a
    second (``strftime`` was half of a line's cost: a broker logs thousands of lines a
    second when its clients all come or go at once)."""
    global _second
    now = time.time()
    second = int(now)
    if second != _second[0]:
        _second = (second, datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S"))
    event_dict["ts"] = f"{_second[1]}.{int((now - second) * 1_000_000):06d}Z"
    return event_dict


def _order_fields(_: WrappedLogger, __: str, event_dict: EventDict) -> Mapping[str, Any]:
    ordered = {key: event_dict.pop(key) for key in LOG_FIELDS if key in event_dict}
    ordered.update(event_dict)
    return ordered


def configure_logging(
    *,
    level: str,
    fmt: str,
    file: str | None,
    node: str,
    component: str = "broker",
    cluster: str | None = None,
    hold_stderr: bool = False,
) -> None:
    """Send every later event, at ``level`` or above, to ``file`` (appended, line by line)
    or to stderr, as JSON lines (``fmt="json"``) or for humans (``fmt="console"``).
    ``hold_stderr``: lines for stderr wait for :func:`release_held_lines` (a file is
    written at once).

    Can be called again (tests do); a file opened by an earlier call is closed.

    :raises ValueError: for an unknown level or format.
    :raises OSError: if ``file`` cannot be opened.
    """
    global _opened, _configured, _held
    if level not in LEVELS:
        raise ValueError(f"invalid log level {level!r}: expected one of {', '.join(LEVELS)}")
    if fmt not in ("json", "console"):
        raise ValueError(f"invalid log format {fmt!r}: expected json or console")
    stream: IO[str] | _HeldStream | None = None  # None: stderr as it is at each write
    _held = None
    if file is None:
        if hold_stderr:
            stream = _held = _HeldStream()
        opened = None
    else:
        stream = opened = open(file, "a", buffering=1, encoding="utf-8")  # noqa: SIM115
    previous, _opened = _opened, opened
    _reset_context()
    set_log_context(node=node, cluster=cluster, component=component)
    processors: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        _add_context,
        _add_timestamp,
    ]
    if fmt == "json":
        processors += [
            structlog.processors.ExceptionRenderer(
                structlog.tracebacks.ExceptionDictTransformer(show_locals=False)
            ),
            _order_fields,
            structlog.processors.JSONRenderer(),
        ]
    else:
        processors.append(
            structlog.dev.ConsoleRenderer(
                colors=(sys.stderr if stream is None else stream).isatty(),
                exception_formatter=structlog.dev.plain_traceback,
                timestamp_key="ts",
            )
        )
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(LEVELS[level]),
        context_class=dict,
        logger_factory=structlog.WriteLoggerFactory(file=cast(TextIO, _SINK)),
        cache_logger_on_first_use=True,
    )
    _SINK.stream = stream
    _configured = True
    if previous is not None:
        previous.close()


def release_held_lines() -> None:
    """Write the stderr lines held since :func:`configure_logging` (``hold_stderr``) and
    every later one at once: the program has started."""
    if _held is not None:
        _held.release()


def drop_held_lines() -> None:
    """Forget the stderr lines held so far (the program failed to start and prints its
    one-line error instead); later lines are still held until released."""
    if _held is not None:
        _held.drop()


def reset_logging() -> None:
    """Undo :func:`configure_logging`: close its file, restore structlog's defaults and
    the default context (for tests)."""
    global _opened, _configured, _held
    structlog.reset_defaults()
    _configured = False
    _held = None
    _SINK.stream = None  # cached loggers: stderr, not the file closed below
    if _opened is not None:
        _opened.close()
        _opened = None
    _reset_context()


def get_logger(component: str | None = None, **fields: Any) -> FilteringBoundLogger:
    """A logger for ``component`` (default: the one given to :func:`configure_logging`).

    Extra ``fields`` are bound to every event of this logger. Made after
    :func:`configure_logging`, the logger is bound to that configuration at once, and a
    call at a filtered-out level costs about as much as calling an empty function. Made
    before, it is a lazy proxy that takes the configuration in force at its first use
    (slower per call: prefer making loggers after configuring).
    """
    initial: MutableMapping[str, Any] = dict(fields)
    if component is not None:
        initial["component"] = component
    proxy = structlog.get_logger(**initial)
    if _configured:
        return cast(FilteringBoundLogger, proxy.bind())
    return cast(FilteringBoundLogger, proxy)
