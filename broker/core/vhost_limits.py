"""Virtual host limits, RabbitMQ's ``max-connections`` and ``max-queues`` (issue 30), sans-I/O.

An administrator sets a limit on a vhost (``PUT /api/vhost-limits/{vhost}/{name}`` with
``{"value": N}``, the console's "Users & vhosts" tab, a definitions file's vhost
``limits``); the primary enforces it, in RabbitMQ's words and codes:

- ``max-connections``: a connection.open (AMQP 0-9-1 or 1.0) to a vhost holding that many
  open connections already is refused with 530 NOT_ALLOWED, ``access to vhost 'v' refused
  for user 'u': connection limit (N) is reached``;
- ``max-queues``: a queue.declare (or a 1.0 attach, a management PUT) of a new queue in a
  vhost holding that many queues already is refused with 406 PRECONDITION_FAILED,
  ``cannot declare queue 'q': queue limit in vhost 'v' (N) is reached``.

A negative value is no limit (RabbitMQ's ``-1``); 0 allows none. Connections and queues
open when a limit is set are kept (only new ones are refused), as in RabbitMQ. What HA
replication or the store's recovery brings is never refused (``replicated``): the primary
counted it. The limits travel with the cluster's users
(:class:`broker.security.cluster_users.ClusterUsers`: kept in the data directory and sent to
every backup in the ``users`` event of replication format 4), so a promoted backup holds
them.

THREAD UNSAFE: the broker's event loop owns it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from broker.core.errors import AmqpError, ReplyCode, precondition_failed

__all__ = ["LIMIT_NAMES", "MAX_CONNECTIONS", "MAX_QUEUES", "VhostLimits", "check_limit"]

MAX_CONNECTIONS = "max-connections"
MAX_QUEUES = "max-queues"
#: The limits a vhost may have (RabbitMQ's).
LIMIT_NAMES = (MAX_CONNECTIONS, MAX_QUEUES)


def check_limit(name: object, value: object) -> tuple[str, int]:
    """(name, value) of a valid limit; ValueError naming what is wrong."""
    if name not in LIMIT_NAMES:
        raise ValueError(f"unknown vhost limit {name!r} (known: {', '.join(LIMIT_NAMES)})")
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name}: the value must be an integer, not {value!r}")
    if not -(2**63) <= value < 2**63:
        raise ValueError(f"{name}: {value} is out of range")
    return str(name), value


class VhostLimits:
    """Each vhost's limits, by name; :meth:`check_connection` and :meth:`check_queue` refuse
    what is over one."""

    def __init__(self) -> None:
        self._limits: dict[str, dict[str, int]] = {}

    def of(self, vhost: str) -> dict[str, int]:
        """``vhost``'s limits (a copy; empty: none)."""
        return dict(self._limits.get(vhost, {}))

    def all(self) -> dict[str, dict[str, int]]:
        """Every vhost with a limit, sorted by name (copies)."""
        return {vhost: dict(limits) for vhost, limits in sorted(self._limits.items())}

    def set(self, vhost: str, name: str, value: int) -> None:
        """:raises ValueError: an unknown name or a value that is not an integer."""
        name, value = check_limit(name, value)
        self._limits.setdefault(vhost, {})[name] = value

    def clear(self, vhost: str, name: str) -> None:
        """:raises KeyError: ``vhost`` has no such limit."""
        limits = self._limits[vhost]
        del limits[name]
        if not limits:
            del self._limits[vhost]

    def vhost_deleted(self, vhost: str) -> bool:
        """A vhost's limits go with it; True if it had any."""
        return self._limits.pop(vhost, None) is not None

    def replace(self, rows: Mapping[str, Mapping[str, Any]]) -> None:
        """Become ``rows`` (:meth:`all`'s form). :raises ValueError: a bad limit (nothing
        changed)."""
        limits: dict[str, dict[str, int]] = {}
        for vhost, named in rows.items():
            for name, value in named.items():
                key, number = check_limit(name, value)
                limits.setdefault(str(vhost), {})[key] = number
        self._limits = limits

    def _limit(self, vhost: str, name: str) -> int | None:
        limits = self._limits.get(vhost)
        value = None if limits is None else limits.get(name)
        return None if value is None or value < 0 else value

    def check_connection(self, vhost: str, user: str | None, open_connections: int) -> None:
        """530 NOT_ALLOWED when ``vhost`` holds its ``max-connections`` already."""
        limit = self._limit(vhost, MAX_CONNECTIONS)
        if limit is not None and open_connections >= limit:
            raise AmqpError(
                ReplyCode.NOT_ALLOWED,
                f"access to vhost '{vhost}' refused for user '{user or ''}':"
                f" connection limit ({limit}) is reached",
                10,
                40,
            )

    def check_queue(self, vhost: str, queue: str, queues: int) -> None:
        """406 PRECONDITION_FAILED when ``vhost`` holds its ``max-queues`` already."""
        limit = self._limit(vhost, MAX_QUEUES)
        if limit is not None and queues >= limit:
            raise precondition_failed(
                f"cannot declare queue '{queue}': queue limit in vhost '{vhost}' ({limit})"
                " is reached"
            )
