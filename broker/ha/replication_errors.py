"""Primary and backup side: the replication errors an operator is shown (issue 24, item 2).

A replication failure is an event with a reason, never a silent stall: whoever meets it logs
``ha_replication_error`` (naming the object and why) and closes the link, and records it
here so that ``GET /api/ha``, the web console and ``qpid-ha status`` say which backup, which
object and why:

- on a primary, per backup id: a stream that could not send (``primary: queue 'q' in vhost
  '/': ...``), or the text the backup closed its link with (``backup: queue 'q' in vhost
  '/': ...``): the ``replication_error`` of that backup's row;
- on a backup, its link's last error: ``replication_error`` at the top of its status.

An entry stays until the backup is ready again (the primary's row shows it only while the
backup is not ready) or, on a backup, until a link catches up. Plain data; the clock is
passed in.

THREAD UNSAFE: the broker's event loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

__all__ = [
    "ReplicationError",
    "ReplicationErrors",
    "described",
    "event_object",
    "object_named",
    "queue_object",
    "shown_name",
]


#: Longest name shown whole in an error (a longer one is cut, with its size in bytes).
SHOWN_NAME_CHARS = 64


def shown_name(name: str) -> str:
    """``name`` quoted for an error line; a long one cut: ``'qqq...' (250 bytes)``."""
    if len(name) <= SHOWN_NAME_CHARS:
        return f"'{name}'"
    return f"'{name[:40]}...' ({len(name.encode('utf-8', 'replace'))} bytes)"


def object_named(kind: str, name: object, vhost: object) -> str:
    """An object for an error line: ``queue 'q' in vhost '/'``."""
    return f"{kind} {shown_name(str(name))} in vhost {shown_name(str(vhost or '/'))}"


@dataclass(frozen=True, slots=True)
class ReplicationError:
    """The latest error: ``reason``, first seen at ``since`` (UTC), ``count`` times in a row;
    ``url``: the backup's address (on a primary)."""

    reason: str
    since: float
    count: int
    url: str | None = None

    def view(self) -> dict[str, Any]:
        """As ``/api/ha`` shows it."""
        return {
            "reason": self.reason,
            "since": datetime.fromtimestamp(self.since, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "count": self.count,
        }


class ReplicationErrors:
    """The latest replication error of each key (a backup id; ``link`` on a backup)."""

    def __init__(self, wall_clock: Callable[[], float] = time.time) -> None:
        self._wall_clock = wall_clock
        self._errors: dict[str, ReplicationError] = {}

    def failed(self, key: str, reason: str, url: str | None = None) -> ReplicationError:
        """Replication for ``key`` failed for ``reason``: the record, counted."""
        previous = self._errors.get(key)
        if previous is not None and previous.reason == reason:
            error = ReplicationError(reason, previous.since, previous.count + 1, url)
        else:
            error = ReplicationError(reason, self._wall_clock(), 1, url)
        self._errors[key] = error
        return error

    def cleared(self, key: str) -> None:
        """Replication for ``key`` works again."""
        self._errors.pop(key, None)

    def view(self, key: str) -> dict[str, Any] | None:
        error = self._errors.get(key)
        return None if error is None else error.view()

    def views(self, skip: Callable[[str], bool]) -> list[dict[str, Any]]:
        """Every error but those whose key ``skip`` says works again, with its ``backup``
        (the key) and ``url``: a primary's list of failed backups, linked or not."""
        return [
            {"backup": key, "url": error.url, **error.view()}
            for key, error in sorted(self._errors.items())
            if not skip(key)
        ]


def event_object(event: object) -> str:
    """What a configuration event is about, for an error: ``queue-declared queue 'q' in
    vhost '/'`` (``configuration stream`` when it cannot tell)."""
    if not isinstance(event, dict):
        return "configuration stream"
    kind = str(event.get("type"))
    for field in ("queue", "exchange", "binding"):
        config = event.get(field)
        if isinstance(config, dict):
            name = config.get("name") or config.get("queue") or config.get("destination")
            return f"{kind} " + object_named(field, name, config.get("vhost"))
    if "name" in event:
        return f"{kind} " + object_named("object", event["name"], event.get("vhost"))
    return f"configuration stream ({kind} event)"


def queue_object(queue: Any) -> str:
    """A queue (anything with ``name`` and ``vhost``) for an error line."""
    return object_named("queue", queue.name, queue.vhost)


def described(exc: BaseException) -> str:
    """An exception as one line: its type and text (no traceback)."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
