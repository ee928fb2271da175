"""What the console adds to the HA role's status (``GET /api/ha``'s body) for its pages:
each backup's lag in body bytes per queue, and the agent that manages this broker.

:Status: Beta

Pure functions over the status and the queues; no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from broker.core.vhost import VHOST
from broker.core.vhosts import queue_key
from broker.management.managed import ManagedBroker
from common.slices import SLICE, Steps, run_steps

__all__ = [
    "LAG_BYTES_SCAN",
    "agent_option",
    "lag_bytes",
    "with_lag_bytes",
    "with_lag_bytes_steps",
    "with_managed_by",
]


#: Entries counted at most per backup and queue for ``lag_bytes`` (past it: a lower bound).
LAG_BYTES_SCAN = 100_000


def lag_bytes(queue: Any, last_sent: int) -> tuple[int, bool]:
    """Body bytes of ``queue``'s messages past ``last_sent`` (what the primary still has to
    send a backup), and whether the count stopped at :data:`LAG_BYTES_SCAN` entries."""
    total = 0
    for counted, entry in enumerate(reversed(queue.entries())):
        if entry.position <= last_sent:
            return total, False
        if counted >= LAG_BYTES_SCAN:
            return total, True
        total += len(entry.message.body)
    return total, False


#: Entries of a backlog counted by :func:`lag_bytes` that weigh as much as a queue's row in
#: a slice of :func:`with_lag_bytes_steps`.
ENTRIES_PER_ROW = 50


def with_lag_bytes(queues: Mapping[str, Any], ha_status: dict[str, Any] | None) -> Any:
    """``/api/ha``'s body with each backup's queue rows given ``lag_bytes`` (and
    ``lag_bytes_partial``): the primary counts its backlog in messages only."""
    return run_steps(with_lag_bytes_steps(queues, ha_status))


def with_lag_bytes_steps(queues: Mapping[str, Any], ha_status: dict[str, Any] | None) -> Steps[Any]:
    """:func:`with_lag_bytes` in slices of :data:`~common.slices.SLICE` rows, a backlog's
    :data:`ENTRIES_PER_ROW` entries counted weighing a row: a long backlog (one count of up
    to :data:`LAG_BYTES_SCAN` entries) ends its slice. Two backups of 10,000 queues in one
    step were 131 and 171 ms of CPU at load 25, collections of 33 and 85 ms included
    (issue 25)."""
    if not ha_status or not ha_status.get("backups"):
        return ha_status
    backups = []
    work = 0
    for backup in ha_status["backups"]:
        rows = []
        for row in backup.get("queues", []):
            if work >= SLICE:
                work = 0
                yield
            work += 1
            queue = queues.get(queue_key(str(row.get("vhost") or VHOST), str(row.get("queue"))))
            last_sent = row.get("last_sent_id")
            lag = row.get("lag")
            if queue is None or not isinstance(last_sent, int) or not lag:
                rows.append({**row, "lag_bytes": 0, "lag_bytes_partial": False})
                continue
            work += min(int(lag), LAG_BYTES_SCAN) // ENTRIES_PER_ROW
            counted, partial = lag_bytes(queue, last_sent)
            rows.append({**row, "lag_bytes": counted, "lag_bytes_partial": partial})
        backups.append({**backup, "queues": rows})
    return {**ha_status, "backups": backups}


def agent_option(broker: ManagedBroker) -> str | None:
    """The agent named by ``ha-agent`` (the broker is managed by it from its start)."""
    agent = getattr(broker.options, "ha_agent", None)
    return agent if isinstance(agent, str) else None


def with_managed_by(ha_status: dict[str, Any] | None, agent: str | None) -> Any:
    """``/api/ha``'s ``managed_by`` (the agent that manages this broker: a promotion by
    hand is refused), which the HA role's own status does not hold."""
    return None if ha_status is None else {**ha_status, "managed_by": agent}
