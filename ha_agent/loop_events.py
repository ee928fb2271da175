"""What the agent's loop thread is told: the events other threads put on its queue.

:Status: Beta

One frozen type each (the role machine's shape, broker/ha/role_events.py): kazoo's thread,
the claim's, the session watcher's, the broker supervisor's and the lease probe's put them
on :attr:`~ha_agent.agent.Agent.events`; only the loop takes them. When nothing comes
before the next check is due, the loop acts as on :class:`CheckDue`.

=================  ===================================================================
event              the loop
=================  ===================================================================
Stop               returns (the agent stops)
CheckDue           checks the broker and reads the cluster (every ``check_interval``)
Granted            judges ZooKeeper's new session grant; a refused one stops the agent
Won                checks the broker at once (this agent's claim leads)
TermEnded          forgets its promotion if made under the claim that ended, then checks
Hinted             checks at once if a backup's link hint names its primary
LinkLost           checks and reads the cluster now (its claim found its broker's link to
                   the primary down and its grant lapsed: its link hint goes out now)
BrokerExited       checks at once (the supervised broker died; it restarts it)
Recheck            checks at once (the last broker view was older than a reset)
SessionFenced      checks (the session watcher fenced; the check then withdraws)
=================  ===================================================================

Error Handling
==============

None: events carry facts; the loop decides.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "BrokerExited",
    "CheckDue",
    "Granted",
    "Hinted",
    "LinkLost",
    "LoopEvent",
    "Recheck",
    "SessionFenced",
    "Stop",
    "TermEnded",
    "Won",
]


@dataclass(frozen=True, slots=True)
class Stop:
    """The agent is stopping."""


@dataclass(frozen=True, slots=True)
class CheckDue:
    """The regular check is due (nothing else came first)."""


@dataclass(frozen=True, slots=True)
class Granted:
    """ZooKeeper granted the session a new timeout on reconnecting."""

    seconds: float


@dataclass(frozen=True, slots=True)
class Won:
    """This agent's claim to the primary record leads."""


@dataclass(frozen=True, slots=True)
class TermEnded:
    """The claim numbered ``term`` ended (its session, a resignation), for ``reason``."""

    reason: str
    term: int = 0

    def ends(self, promoted_term: int | None) -> bool:
        """Does it end the promotion made under the claim numbered ``promoted_term``? Only
        the end of that claim does (None: none recorded, any end). An older claim's end,
        told after a newer claim promoted (its thread told it after the loop had already
        claimed again, on a loaded machine), ends nothing: issue 26, the new primary's
        agent forgot its promotion, promoted its own primary again at the next epoch and
        deleted its record on the way, and the others churned."""
        return promoted_term is None or self.term == promoted_term


@dataclass(frozen=True, slots=True)
class Hinted:
    """A backup published a link hint (its link to the recorded primary went down)."""


@dataclass(frozen=True, slots=True)
class LinkLost:
    """This agent's claim found its broker's link to the recorded primary down and its
    grant to that primary lapsed (:class:`ha_agent.takeover.LapsedGrant`): the other
    members' claims wait for this node's link hint, which a check publishes."""


@dataclass(frozen=True, slots=True)
class BrokerExited:
    """The supervised broker exited with ``code`` (before its supervisor restarts it)."""

    code: int


@dataclass(frozen=True, slots=True)
class Recheck:
    """The last broker view was read before a reset: read the broker again at once."""


@dataclass(frozen=True, slots=True)
class SessionFenced:
    """The session watcher fenced (the lease on the ZooKeeper session ran out, or LOST)."""

    reason: str


LoopEvent = (
    Stop
    | CheckDue
    | Granted
    | Won
    | TermEnded
    | Hinted
    | LinkLost
    | BrokerExited
    | Recheck
    | SessionFenced
)

#: The events after which the loop checks the broker at once, with the cluster as last
#: read (the regular check follows on time).
AT_ONCE: tuple[type[LoopEvent], ...] = (Won, BrokerExited, Recheck, Hinted)
