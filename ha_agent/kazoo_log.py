"""kazoo's own logging, routed into the agent's structlog events and rate-limited.

kazoo logs through the standard ``logging`` module (loggers under ``kazoo``). Left alone,
with no handler configured, Python prints its warnings as plain text on stderr: with
ZooKeeper down, about three lines a second ("Connection dropped: ...", "Failed connecting to
Zookeeper within the connection retry policy."), mixed into the agent's JSON lines.
:func:`route_kazoo_logging` sends them through structlog instead, as ``zookeeper_client_log``
events, and keeps at most one event per kazoo message (its format string, so "Connection
dropped: %s" counts as one whatever the error) per ``interval`` seconds; the next one says
how many were left out (``suppressed``).

Contract
========

- Levels: kazoo's WARNING and above keep their level (``warning``, ``error``); INFO and
  below become ``debug``.
- Nothing of kazoo reaches stderr any more unless the agent logs there (the events go where
  :func:`common.log.configure_logging` sends them).
- Thread safe: kazoo logs from its own threads; ``logging.Handler`` serialises ``emit``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from common.log import get_logger

__all__ = ["DEFAULT_INTERVAL", "KazooLogBridge", "route_kazoo_logging"]

#: At most one event per kazoo message per this many seconds.
DEFAULT_INTERVAL = 30.0


class KazooLogBridge(logging.Handler):
    """A logging handler that turns kazoo's records into rate-limited structlog events."""

    def __init__(
        self, interval: float = DEFAULT_INTERVAL, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__(logging.DEBUG)
        self.interval = interval
        self.clock = clock
        self._last: dict[tuple[str, str], float] = {}
        self._suppressed: dict[tuple[str, str], int] = {}
        self._log = get_logger("agent")

    def emit(self, record: logging.LogRecord) -> None:
        key = (record.name, str(record.msg))
        now = self.clock()
        last = self._last.get(key)
        if last is not None and now - last < self.interval:
            self._suppressed[key] = self._suppressed.get(key, 0) + 1
            return
        self._last[key] = now
        suppressed = self._suppressed.pop(key, 0)
        try:
            message = record.getMessage()
        except (TypeError, ValueError):  # a bad format in kazoo: keep what there is
            message = str(record.msg)
        level = "debug"
        if record.levelno >= logging.ERROR:
            level = "error"
        elif record.levelno >= logging.WARNING:
            level = "warning"
        fields: dict[str, object] = {"logger": record.name, "message": " ".join(message.split())}
        if record.exc_info and record.exc_info[1] is not None:
            fields["reason"] = repr(record.exc_info[1])
        getattr(self._log, level)("zookeeper_client_log", suppressed=suppressed, **fields)


def route_kazoo_logging(interval: float = DEFAULT_INTERVAL) -> KazooLogBridge:
    """Send the ``kazoo`` loggers' records to structlog (replacing an earlier bridge); call
    after :func:`common.log.configure_logging`. Returns the handler."""
    logger = logging.getLogger("kazoo")
    for handler in list(logger.handlers):
        if isinstance(handler, KazooLogBridge):
            logger.removeHandler(handler)
    bridge = KazooLogBridge(interval)
    logger.addHandler(bridge)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    return bridge
