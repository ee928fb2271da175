"""The console's fail-over timeline: what one broker saw of each fail-over, as phases.

:Status: Beta

A plain object, no I/O and no clock: :meth:`Timeline.observe` takes the HA events this
broker logs, as they are logged (``broker.ha.ha_broker.HaBroker.listeners``), with their
wall-clock time and the broker's epoch then, and keeps the fail-overs it saw, newest first,
at most :data:`KEEP`. The events are the log's (``docs/log-schema.md``), the ones the
analytics job reads, so the instants are the ones it would find in this broker's log:

- ``failure``: ``ha_link_down`` while a backup (the old primary, as this backup lost it);
- ``recovering`` and ``active``: ``ha_state_changed`` to those states, when this broker is
  the new primary;
- ``relinked``: a backup's ``ha_link_up`` to a new primary (a backup of the new primary);
- ``client_connected`` and ``client_confirmed``: the new primary's first client connection
  and first publisher confirm since its promotion (``ha_first_client_connection``,
  ``ha_first_client_confirm``), maybe after ``active``: the client outage
  (:func:`common.failover_phases.client_outage`).

The agents' instants (``resigned``, ``won``, ``promoted``) are in the agents' logs, not in
the broker: their phases (detection, election, promotion) stay ``None`` here, and the
console shows their sum, ``failure`` to ``recovering``, as "until promoted". With this
node's agent's log (:mod:`~broker.management.console.agent_log`) a new primary's record
gets ``won`` and ``promoted``: then promotion is known, and detection plus election as
"until won". The analytics report (``docs/analytics.md``) splits them from all the logs.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from common.failover_phases import CLIENT_INSTANTS, client_outage, durations

__all__ = ["KEEP", "Failover", "Timeline"]

#: How many fail-overs the console keeps (the newest).
KEEP = 20

#: The new primary's events of its clients' return -> the instants they give.
_CLIENT_EVENTS = dict(
    zip(("ha_first_client_confirm", "ha_first_client_connection"), CLIENT_INSTANTS, strict=True)
)


def _ms(end: float | None, start: float | None) -> float | None:
    return None if end is None or start is None else round((end - start) * 1000, 1)


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
        known = durations(self.instants)
        if self.instants.get("resigned") is None:
            # detected is the earlier of resigned and won: without the old primary's
            # agent's resignation (its log, on its node) neither detection nor election is
            # known, only their sum (until_won_ms)
            known["detection"] = known["election"] = None
        phases = {
            name: None if value is None else round(value * 1000, 1) for name, value in known.items()
        }
        failure = self.instants.get("failure")
        after = self.instants.get("recovering") or self.instants.get("relinked")
        outage, outage_until = client_outage(self.instants)
        return {
            "epoch": self.epoch,
            "initial": self.old_primary is None,
            "seen_by": self.seen_by,
            "old_primary": self.old_primary,
            "new_primary": self.new_primary,
            "instants": dict(self.instants),
            "phases_ms": phases,
            "until_promoted_ms": _ms(after, failure),
            "until_won_ms": _ms(self.instants.get("won"), failure),
            "client_outage_ms": None if outage is None else round(outage * 1000, 1),
            "client_outage_until": outage_until,
            "complete": self.complete,
        }


class Timeline:
    """Fail-overs seen by one broker, from its HA events.

    THREAD UNSAFE: the broker's event loop feeds it.
    """

    def __init__(self) -> None:
        self.failovers: deque[Failover] = deque(maxlen=KEEP)
        self._primary: str | None = None  #: the last primary this broker linked to
        self._failure: float | None = None  #: when that link went down
        self._current: Failover | None = None  #: this broker's own promotion
        self._own: Failover | None = None  #: its last one, completed or not

    def observe(
        self, at: float, event: str, fields: dict[str, Any], epoch: int, own_url: str
    ) -> Failover | None:
        """Take one HA event; return the fail-over it completed, else None."""
        if event == "ha_link_down":
            if self._failure is None:
                self._failure = at
        elif event == "ha_link_up":
            return self._linked(at, str(fields.get("primary")), epoch)
        elif event == "ha_state_changed":
            new = fields.get("new")
            if new == "recovering":
                self._promoted(at, epoch, own_url)
            elif new == "active" and self._current is not None:
                current = self._current
                if current.instants.get("active") is None:
                    current.instants["active"] = at
                    self._primary = own_url
                    self._current = None
                    return current
        elif event in _CLIENT_EVENTS:
            own, instant = self._own, _CLIENT_EVENTS[event]
            if own is not None and own.epoch == epoch and own.instants.get(instant) is None:
                own.instants[instant] = at
        return None

    def _linked(self, at: float, primary: str, epoch: int) -> Failover | None:
        previous, self._primary = self._primary, primary
        failure, self._failure = self._failure, None
        if previous is None or previous == primary:
            return None
        found = Failover(
            epoch=epoch,
            seen_by="backup",
            old_primary=previous,
            new_primary=primary,
            instants={"failure": failure, "relinked": at},
        )
        self.failovers.appendleft(found)
        return found

    def _promoted(self, at: float, epoch: int, own_url: str) -> None:
        self._current = Failover(
            epoch=epoch,
            seen_by="new primary",
            old_primary=self._primary,
            new_primary=own_url,
            instants={"failure": self._failure, "recovering": at},
        )
        self._failure = None
        self._own = self._current
        self.failovers.appendleft(self._current)

    def view(self) -> list[dict[str, Any]]:
        return [failover.view() for failover in self.failovers]
