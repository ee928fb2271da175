"""The phases of a fail-over: their names, order, instants and arithmetic, in one place.

:Status: Stable (the analytics report, ``docs/analytics.md`` "Phases, exactly", and the web
    console's fail-over timeline, ``docs/console.md``, both speak in these words)

A fail-over to epoch ``E`` is a row of instants (seconds or microseconds, any one clock):

``failure``
    the old primary failed or was fenced: the fault the drill injected, as it recorded it
    (:data:`FAULT_RECORDS`), else the earliest evidence of it from any node (the old
    primary's first failure event, the backups' link-down);
``resigned``
    the old primary's agent resigned (``agent_fenced``, ``election_withdraw``);
``detected``
    the earlier of ``resigned`` and ``won`` (only once ``failure`` is known);
``won``
    the new primary's agent won the election (its last ``election_won`` before promoting);
``promoted``
    the new primary's agent finished promoting (``agent_promoted``);
``recovering``
    the new primary's broker moved to recovering with epoch ``E``;
``active``
    the new primary's broker moved to active with epoch ``E``.

:func:`durations` turns them into the phases (:data:`PHASES`, in order): a phase whose
instants are not both known is ``None``, never a guess. Pure functions, no I/O; PySpark's
``analytics.failover`` computes the same columns over DataFrames, and the console computes
them over what one broker saw.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "BROKER_FAILURE_EVENTS",
    "CLIENT_INSTANTS",
    "CLIENT_OUTAGE",
    "FAULT_RECORDS",
    "INSTANTS",
    "PHASES",
    "RESIGN_EVENTS",
    "Phase",
    "client_outage",
    "detected",
    "durations",
]

#: The instants of a fail-over, in the order they normally happen.
INSTANTS = ("failure", "resigned", "detected", "won", "promoted", "recovering", "active")

#: Agent events by which the old primary's agent resigns (``analytics.failover``).
RESIGN_EVENTS = ("agent_fenced", "election_withdraw")

#: Broker events that end a broker's serving (``analytics.states.BROKER_END_EVENTS``).
BROKER_FAILURE_EVENTS = ("broker_stopped", "ha_fenced", "ha_illegal_transition")

#: The nemesis drill's records of a fault that stops the primary serving at once (its
#: ``target`` the primary's node, its time the exact instant of ``failure``), and the kind
#: of failure each is (``qpid_ha_cli/nemesis/nemeses.py``). ``zk-loss`` is not here: the
#: primary serves on through ZooKeeper's loss until its agent fences it, so its failure is
#: that fence. ``stale-backup`` kills the primary's node (``node_sigkilled``) in a cycle
#: of its own name.
FAULT_RECORDS = {
    "broker_sigkilled": "kill",
    "node_sigkilled": "kill-node",
    "broker_paused": "pause",
    "node_paused": "pause-node",
    "node_partitioned": "partition",
}


@dataclass(frozen=True)
class Phase:
    """One phase: the time from its ``start`` instant to its ``end`` instant (its
    ``fallback`` instant when ``end`` is unknown and a fallback is named)."""

    name: str
    end: str
    start: str
    meaning: str
    fallback: str | None = None


#: The phases in order; ``failover`` is the sum of the four before it.
PHASES = (
    Phase("detection", "detected", "failure", "until the old agent resigns or another wins"),
    Phase("election", "won", "detected", "until the next agent leads (0: the win detected)"),
    Phase("promotion", "recovering", "won", "epoch, promote call, broker promoted", "promoted"),
    Phase("recovering", "active", "recovering", "the new primary waits for its backups"),
    Phase("failover", "active", "failure", "the service is back"),
)

#: The clients' side, measured by the drill (``qpid-ha drill``), not by the brokers.
CLIENT_OUTAGE = "client_outage"

#: The clients' return as the new primary sees it, best first: its first publisher confirm
#: (``ha_first_client_confirm``) and its first client connection
#: (``ha_first_client_connection``) since its promotion (the web console's timeline).
CLIENT_INSTANTS = ("client_confirmed", "client_connected")


def detected(instants: Mapping[str, float | None]) -> float | None:
    """The earlier of ``resigned`` and ``won`` (the one known when only one is), for a
    fail-over whose ``failure`` is known; ``None`` without one (an initial election has
    nothing to detect, so neither detection nor election is defined, as in the report)."""
    if instants.get("failure") is None:
        return None
    known = [t for t in (instants.get("resigned"), instants.get("won")) if t is not None]
    return min(known) if known else instants.get("detected")


def durations(instants: Mapping[str, float | None]) -> dict[str, float | None]:
    """Each phase of :data:`PHASES` as ``end - start`` in the instants' unit, ``None`` when
    one of its instants is unknown. A phase with a ``fallback`` uses it for a missing end:
    ``promotion`` is ``promoted - won`` without a ``recovering`` instant, as the analytics
    report does."""
    known = dict(instants)
    known["detected"] = detected(instants)
    result: dict[str, float | None] = {}
    for phase in PHASES:
        end, start = known.get(phase.end), known.get(phase.start)
        if end is None and phase.fallback is not None:
            end = known.get(phase.fallback)
        result[phase.name] = None if end is None or start is None else end - start
    return result


def client_outage(instants: Mapping[str, float | None]) -> tuple[float | None, str | None]:
    """The client outage as a new primary sees it: ``failure`` to its first client confirm
    (the end of the drill's ``confirm_gap``, ``first_confirm_ts``), else to its first client
    connection (the drill's ``client_reconnected``) when no confirm went out yet; with the
    instant it ends at (:data:`CLIENT_INSTANTS`), ``(None, None)`` when either is unknown.

    The report's ``client_outage`` (``docs/analytics.md``) starts at the drill's last
    confirm before the failure, which only the client saw: this one starts at ``failure``,
    so it is shorter by at most the publisher's interval between confirms."""
    failure = instants.get("failure")
    for end in CLIENT_INSTANTS:
        at = instants.get(end)
        if failure is not None and at is not None:
            return at - failure, end
    return None, None
