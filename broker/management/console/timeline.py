"""The console's fail-over timeline: what one broker saw of each fail-over, as phases.

:Status: Beta

A plain object, no I/O and no clock: :meth:`Timeline.observe` takes a :class:`Sample` of
this broker's HA role (state, epoch, the primary it links to, whether that link is up; the
console's sampler takes one every 0.1 s, the resolution of the instants it samples) and
keeps the fail-overs it saw, newest first, at most :data:`KEEP`.

What a broker sees, in the words of :mod:`common.failover_phases`:

- ``failure``: its link to the primary went down while it was a backup (the old primary's
  failure, as this backup saw it), or, for a primary that this broker was, nothing (it
  does not outlive its own failure);
- ``recovering`` and ``active``: this broker's own moves to those states with the new
  epoch, when it is the new primary (recovering as the role recorded it, active when first
  sampled);
- ``relinked``: a backup's link came up to the new primary (a backup of the new primary).

The agents' instants (``resigned``, ``won``, ``promoted``) are in the agents' logs, not in
the broker: their phases (detection, election, promotion) stay ``None`` here and the
console shows their sum, ``failure`` to ``recovering``, as "until promoted". The
analytics report (``docs/analytics.md``) splits them from the logs.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from common.failover_phases import durations

__all__ = ["KEEP", "Failover", "Sample", "Timeline"]

#: How many fail-overs the console keeps (the newest).
KEEP = 20

_PRIMARY = ("recovering", "active")
_BACKUP = ("joining", "catch-up", "ready")


@dataclass(frozen=True)
class Sample:
    """This broker's HA role at one instant (wall-clock seconds)."""

    at: float
    state: str
    epoch: int
    primary: str | None  #: the primary's address (its own URL when primary)
    link_up: bool  #: a backup's link to the primary is up
    recovering_at: float | None = None  #: when the role moved to recovering, if it knows


@dataclass
class Failover:
    """One fail-over (or the initial election, ``old_primary`` None) as this broker saw it."""

    epoch: int
    seen_by: str  #: "new primary" or "backup"
    old_primary: str | None
    new_primary: str | None
    instants: dict[str, float | None] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return self.instants.get("active") is not None or (
            self.instants.get("relinked") is not None
        )

    def view(self) -> dict[str, Any]:
        """JSON-ready: instants in seconds, phases in milliseconds (None: not seen here)."""
        phases = {
            name: None if value is None else round(value * 1000, 1)
            for name, value in durations(self.instants).items()
        }
        failure = self.instants.get("failure")
        recovering = self.instants.get("recovering")
        relinked = self.instants.get("relinked")
        until = None
        if failure is not None and recovering is not None:
            until = round((recovering - failure) * 1000, 1)
        elif failure is not None and relinked is not None:
            until = round((relinked - failure) * 1000, 1)
        return {
            "epoch": self.epoch,
            "initial": self.old_primary is None,
            "seen_by": self.seen_by,
            "old_primary": self.old_primary,
            "new_primary": self.new_primary,
            "instants": dict(self.instants),
            "phases_ms": phases,
            "until_promoted_ms": until,
            "complete": self.complete,
        }


class Timeline:
    """Fail-overs seen by one broker, from samples of its HA role.

    THREAD UNSAFE: the broker's event loop feeds it.
    """

    def __init__(self, own_url: str = "") -> None:
        self.own_url = own_url
        self.failovers: deque[Failover] = deque(maxlen=KEEP)
        self._last: Sample | None = None
        self._primary: str | None = None  #: the last primary seen with a link up
        self._failure: float | None = None  #: when the link to it went down
        self._current: Failover | None = None

    def observe(self, sample: Sample) -> Failover | None:
        """Take a sample; return a fail-over that this sample completed, else None."""
        last, self._last = self._last, sample
        if sample.state in _BACKUP:
            return self._as_backup(last, sample)
        if sample.state in _PRIMARY:
            return self._as_primary(last, sample)
        return None

    def _as_backup(self, last: Sample | None, sample: Sample) -> Failover | None:
        was_up = last is not None and last.state in _BACKUP and last.link_up
        if was_up and not sample.link_up and self._failure is None:
            self._failure = sample.at
        if not sample.link_up or sample.primary is None:
            return None
        previous = self._primary
        new_epoch = last is None or sample.epoch > last.epoch or previous != sample.primary
        self._primary = sample.primary
        if previous is None or previous == sample.primary or not new_epoch:
            self._failure = None
            return None
        found = Failover(
            epoch=sample.epoch,
            seen_by="backup",
            old_primary=previous,
            new_primary=sample.primary,
            instants={"failure": self._failure, "relinked": sample.at},
        )
        self._failure = None
        self.failovers.appendleft(found)
        return found

    def _as_primary(self, last: Sample | None, sample: Sample) -> Failover | None:
        current = self._current
        if current is None or current.epoch != sample.epoch:
            current = self._current = Failover(
                epoch=sample.epoch,
                seen_by="new primary",
                old_primary=self._primary,
                new_primary=sample.primary or self.own_url,
                instants={"failure": self._failure if self._primary else None},
            )
            self.failovers.appendleft(current)
            self._failure = None
        if current.instants.get("recovering") is None:
            current.instants["recovering"] = sample.recovering_at or sample.at
        if sample.state == "active" and current.instants.get("active") is None:
            current.instants["active"] = sample.at
            self._primary = sample.primary or self.own_url
            return current
        return None

    def view(self) -> list[dict[str, Any]]:
        return [failover.view() for failover in self.failovers]
