"""Who may be promoted: the agent's rules, as pure functions of what it sees.

:Status: Beta

No I/O here: the agent (:mod:`ha_agent.agent`) reads its broker and ZooKeeper, builds a
:class:`ClusterView` and asks :func:`decide` what to do. The answer is a :class:`Decision`
(the actions, in order, and the reason for each), so every choice is logged with why.

The rules (ARCHITECTURE.md, invariants 2 to 4; seed 001, "Promoting a broker"):

- Only an agent whose broker may be promoted contends in the election:

  * a **ready** backup: it has every confirmed message;
  * a broker that is already the **primary** (active or recovering) and whose agent
    restarted: it contends to take its leadership back, unless ZooKeeper names another
    primary, in which case it is **fenced** (two primaries must never serve);
  * in a **new cluster** (no primary recorded, at least ``cluster_size`` members, every one
    of them joining): only the **most advanced** member (:func:`rank`: highest epoch, then
    replication position, then a clean store before a dirty one, then the node name so the
    choice is the same everywhere). This is also the total-failure rule: after every broker
    restarted, the one that saw the newest epoch and holds the most is chosen, never a
    random one.

- A broker in **catch-up** never contends (seed 001: "still catching up"), nor one that does
  not answer.
- The leader promotes its broker (with the next epoch from ZooKeeper) only after it has
  won and only if the broker may still be promoted; otherwise it resigns.
- A leader whose broker stops answering, or whose ZooKeeper session is in doubt, fences its
  broker (kills it: it comes back as a joining backup) and drops the virtual IP before it
  withdraws, so that no other agent can win while its broker still serves.
- A broker that has not answered for the watchdog timeout is killed and restarted.

Error Handling
==============

Pure functions: they raise nothing for any view; an unknown broker state is treated as a
broker that may not be promoted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from ha_agent.membership import Member

__all__ = [
    "PRIMARY_STATES",
    "Action",
    "BrokerView",
    "ClusterView",
    "Decision",
    "PrimaryRecord",
    "Step",
    "decide",
    "most_advanced",
    "rank",
]

#: States of a broker that serves clients.
PRIMARY_STATES = frozenset({"active", "recovering"})

#: Store statuses from best to worst (seed 002: a clean store before a dirty one).
_STORE_ORDER = {"clean": 3, "empty": 2, "unknown": 1, "dirty": 0}


@dataclass(frozen=True)
class BrokerView:
    """What a health check of the local broker read (``None`` in a view: it did not answer)."""

    ha_state: str
    epoch: int = 0
    replication_position: int = 0
    store_status: str = "unknown"
    pid: int | None = None
    url: str = ""  # the broker's AMQP address as it reports it

    @property
    def is_primary(self) -> bool:
        return self.ha_state in PRIMARY_STATES


@dataclass(frozen=True)
class PrimaryRecord:
    """The content of ``/qpid-ha/<cluster>/primary``: who leads, with which epoch."""

    node: str
    epoch: int
    broker_url: str = ""


class Step(StrEnum):
    """What the agent shell does. Each :class:`Action` carries one, with a reason."""

    CONTEND = "contend"  # join the election
    WITHDRAW = "withdraw"  # leave the election (resign when leading)
    PROMOTE = "promote"  # take the next epoch, promote the broker, record it as primary
    TAKE_VIP = "take_vip"  # make sure the virtual IP is here (idempotent)
    FENCE = "fence"  # kill the broker (it restarts as a backup), drop the VIP, withdraw
    KILL_BROKER = "kill_broker"  # the watchdog: SIGKILL a silent broker (then restart)


@dataclass(frozen=True)
class Action:
    step: Step
    reason: str


@dataclass(frozen=True)
class ClusterView:
    """Everything :func:`decide` looks at, read by the agent at one moment."""

    node: str
    broker: BrokerView | None  # None: the broker did not answer its last check
    members: Mapping[str, Member] = field(default_factory=dict)
    primary: PrimaryRecord | None = None
    #: "idle", "contending", "leading" or "resigning" (ha_agent.election.Leadership)
    leadership: str = "idle"
    #: True once this agent promoted its broker during the current leadership
    promoted: bool = False
    #: False when the session guard fenced: ZooKeeper may have given up on this agent
    session_ok: bool = True
    cluster_size: int = 1
    #: seconds since the broker last answered (0 when it just did)
    broker_silent_for: float = 0.0
    watchdog_timeout: float = 0.0  # 0: no watchdog


@dataclass(frozen=True)
class Decision:
    actions: tuple[Action, ...] = ()
    #: why this agent may or may not be promoted (logged when it changes)
    eligibility: str = ""

    @property
    def steps(self) -> tuple[Step, ...]:
        return tuple(action.step for action in self.actions)


def rank(member: Member) -> tuple[int, int, int, str]:
    """Sort key of promotion candidates: larger is more advanced.

    Highest epoch, then replication position, then store (clean, empty, unknown, dirty);
    the node name last (descending names rank lower) makes the order total, so every agent
    computes the same winner from the same records.
    """
    name_key = "".join(chr(0x10FFFF - ord(c)) for c in member.node)
    store = _STORE_ORDER.get(member.store_status, 1)
    return (member.epoch, member.replication_position, store, name_key)


def most_advanced(members: Mapping[str, Member]) -> Member | None:
    """The member a total failure or a new cluster should promote (None when empty)."""
    return max(members.values(), key=rank, default=None)


def _eligibility(view: ClusterView) -> tuple[bool, str]:
    """May this agent's broker be promoted? And why (or why not)."""
    broker = view.broker
    if broker is None:
        return False, "the broker does not answer"
    state = broker.ha_state
    if broker.is_primary:
        if view.primary is not None and view.primary.node != view.node:
            return (
                False,
                f"ZooKeeper names {view.primary.node} primary (epoch {view.primary.epoch})",
            )
        return True, f"the broker is already the primary ({state})"
    if state == "ready":
        return True, "a ready backup"
    if state == "catch-up":
        return False, "the broker is still catching up"
    if state != "joining":
        return False, f"the broker is {state}"
    if view.primary is not None:
        return False, f"joining a cluster whose primary is {view.primary.node}"
    present = len(view.members)
    if present < view.cluster_size:
        return False, f"a new cluster: waiting for {view.cluster_size} members, {present} present"
    beyond = sorted(n for n, m in view.members.items() if m.ha_state != "joining")
    if beyond:
        return False, f"not every member is joining: {', '.join(beyond)}"
    best = most_advanced(view.members)
    if best is None or best.node != view.node:
        assert best is not None
        return False, (
            f"{best.node} is the most advanced joining member "
            f"(epoch {best.epoch}, position {best.replication_position}, {best.store_status})"
        )
    return True, (
        f"the most advanced of {present} joining members "
        f"(epoch {best.epoch}, position {best.replication_position}, {best.store_status})"
    )


def decide(view: ClusterView) -> Decision:
    """The actions this agent should take now, given ``view``."""
    actions: list[Action] = []
    leadership = view.leadership
    in_election = leadership in ("contending", "leading")
    broker = view.broker

    if not view.session_ok:
        reason = "the ZooKeeper session is in doubt"
        if leadership == "leading" or (broker is not None and broker.is_primary):
            actions.append(Action(Step.FENCE, reason))
        elif in_election:
            actions.append(Action(Step.WITHDRAW, reason))
        return Decision(tuple(actions), reason)

    if broker is None:
        reason = "the broker does not answer"
        if leadership == "leading":
            actions.append(Action(Step.FENCE, reason))
        elif in_election:
            actions.append(Action(Step.WITHDRAW, reason))
        if view.watchdog_timeout > 0 and view.broker_silent_for >= view.watchdog_timeout:
            actions.append(
                Action(
                    Step.KILL_BROKER,
                    f"silent for {view.broker_silent_for:.1f} s "
                    f"(watchdog {view.watchdog_timeout:g} s)",
                )
            )
        return Decision(tuple(actions), reason)

    eligible, why = _eligibility(view)
    if broker.is_primary and not eligible:
        # Another agent won and promoted its broker: two primaries must never serve.
        actions.append(Action(Step.FENCE, why))
        return Decision(tuple(actions), why)
    if leadership == "leading":
        if not view.promoted:
            if eligible:
                actions.append(Action(Step.PROMOTE, why))
                actions.append(Action(Step.TAKE_VIP, "this broker is the primary"))
            else:
                actions.append(Action(Step.WITHDRAW, f"won the election, but {why}"))
        elif broker.is_primary:
            actions.append(Action(Step.TAKE_VIP, "this broker is the primary"))
        else:
            # Promoted, yet no longer primary (restarted behind our back): fence and resign.
            actions.append(Action(Step.FENCE, f"the promoted broker is now {broker.ha_state}"))
        return Decision(tuple(actions), why)
    if eligible and leadership == "idle":
        actions.append(Action(Step.CONTEND, why))
    elif not eligible and leadership == "contending":
        actions.append(Action(Step.WITHDRAW, why))
    return Decision(tuple(actions), why)
