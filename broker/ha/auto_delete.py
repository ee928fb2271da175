"""Orphaned auto-delete queues of a new primary, as a decision without I/O.

An auto-delete queue goes when its last consumer leaves. A backup holds replicas of the
primary's auto-delete queues but none of their consumers: those were clients of the old
primary, and their connections died with it. Left alone, such a queue would stay on the new
primary until some client consumes from it and leaves again, which may be never. As in
Qpid, the new primary deletes a replicated auto-delete queue that has no consumer a grace
period after the promotion; a client that re-attaches (basic.consume) within the grace
period keeps it, and from then on the ordinary auto-delete rule applies.

The grace period of a queue is its ``qpid.auto_delete_timeout`` argument (seconds, Qpid's
queue setting) when it has one, else ``default_grace`` (the broker uses
``ha-backup-timeout``: the time a recovering primary gives the old cluster to come back,
which is also about the time clients need to find the new primary).

Exclusive queues need no grace: their owner connection is gone for good, so the promotion
deletes them at once (:meth:`broker.ha.ha_broker.HaBroker.promote`).

Time is a number given to each call (the shell passes its clock); the shell deletes what
:meth:`OrphanedQueues.due` returns, so the deletion replicates like any other.

THREAD UNSAFE: the primary's event loop owns it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from broker.core.queue import Queue
from broker.core.vhosts import key_of

#: Queue argument: seconds an unused auto-delete queue waits before it goes (Qpid's name).
AUTO_DELETE_TIMEOUT_ARG = "qpid.auto_delete_timeout"


def grace_of(queue: Queue, default_grace: float) -> float:
    """The grace period of ``queue``: its ``qpid.auto_delete_timeout``, else the default.

    A value that is not a finite number of seconds >= 0 is ignored (the default applies).
    """
    value = queue.arguments.get(AUTO_DELETE_TIMEOUT_ARG)
    if isinstance(value, bool) or not isinstance(value, (int, float, str, bytes)):
        return default_grace
    try:
        seconds = float(value)
    except ValueError:
        return default_grace
    if not math.isfinite(seconds) or seconds < 0:
        return default_grace
    return seconds


@dataclass(frozen=True, slots=True)
class Orphan:
    """An auto-delete queue waiting for a consumer until ``deadline``."""

    queue: Queue
    deadline: float


class OrphanedQueues:
    """The auto-delete queues a new primary deletes unless a consumer comes in time."""

    def __init__(self, queues: Iterable[Queue], *, now: float, default_grace: float) -> None:
        self._orphans: dict[str, Orphan] = {
            key_of(q): Orphan(q, now + grace_of(q, default_grace))
            for q in queues
            if q.auto_delete and not q.deleted and q.consumer_count == 0
        }

    def due(self, now: float) -> list[Queue]:
        """The queues to delete now, by name.

        A queue that was deleted, or that has a consumer again, is forgotten: the ordinary
        auto-delete rule covers it from then on.
        """
        expired: list[Queue] = []
        for name, orphan in sorted(self._orphans.items()):
            queue = orphan.queue
            if queue.deleted or queue.consumer_count > 0:
                del self._orphans[name]
            elif now >= orphan.deadline:
                del self._orphans[name]
                expired.append(queue)
        return expired

    def waiting(self, now: float) -> dict[str, float]:
        """Queue name -> seconds left before it goes, to the millisecond (``/api/ha``)."""
        return {
            name: round(max(0.0, orphan.deadline - now), 3)
            for name, orphan in sorted(self._orphans.items())
            if not orphan.queue.deleted and orphan.queue.consumer_count == 0
        }

    def __len__(self) -> int:
        return len(self._orphans)
