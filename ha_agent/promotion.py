"""Who may be promoted: the agent's rules, as pure functions of what it sees.

:Status: Beta

No I/O here: the agent (:mod:`ha_agent.agent`) reads its broker and ZooKeeper, builds a
:class:`ClusterView` and asks :func:`decide` what to do. The answer is a :class:`Decision`
(the actions, in order, and the reason for each), so every choice is logged with why.

The rules (ARCHITECTURE.md, invariants 2 to 4; seed 001, "Promoting a broker"):

- Only an agent whose broker may be promoted contends in the election:

  * a **ready** backup in the committed **in-sync set** (:class:`InSyncRecord`, written by
    the primary's agent, :mod:`ha_agent.in_sync`): it has every confirmed message. A backup
    that is ready in its own eyes but out of the set never contends, even when every member
    of the set is gone (the cluster waits for one of them). Without a recorded set (a
    cluster older than the set) a ready backup contends as before;
  * a broker that is already the **primary** (active or recovering) and whose agent
    restarted: it contends to take its leadership back, unless ZooKeeper names another
    primary, in which case it is **fenced** (two primaries must never serve);
  * in a **new cluster** (no primary recorded, at least ``cluster_size`` members, every one
    of them joining): only the **most advanced** member (:func:`rank`: highest epoch, then
    replication position, then a clean store before a dirty one; among members equal on
    those, the one on the node running the fewest primaries of the other clusters on the
    same ZooKeeper, :mod:`ha_agent.spread`; then the node name so the choice is the same
    everywhere). This is also the total-failure rule: after every broker
    restarted, the one that saw the newest epoch and holds the most is chosen, never a
    random one. Once an in-sync set is recorded, it applies only when no live member is in
    the set and no live member is ready (every broker restarted: their ids are new).

- A broker in **catch-up** never contends (seed 001: "still catching up"), nor one that does
  not answer.
- The leader promotes its broker (with the next epoch from ZooKeeper) only after it has
  won and only if the broker may still be promoted; otherwise it resigns.
- A leader whose broker stops answering, or whose ZooKeeper session is in doubt, fences its
  broker (kills it: it comes back as a joining backup) and drops the virtual IP before it
  withdraws, so that no other agent can win while its broker still serves.
- A broker that has not answered for the watchdog timeout is killed and restarted; its
  silence counts only once it has answered since it was last killed or restarted
  (:class:`ha_agent.watchdog.BrokerWatch`).
- A broker view is combined only with a cluster view at most as fresh as itself: a view
  read before the ZooKeeper connection was last (re)established, or before the broker was
  last killed or seen exiting, is **stale** (:func:`stale_view`), and the agent checks the
  broker again (:attr:`Step.RECHECK`) before anything else. After a healed partition the
  cluster read shows what happened during the cut (another primary); the broker view read
  before the cut shows a broker that is gone (the fence killed it, and it came back as a
  backup): acting on the two together killed a ready backup. Likewise the cluster part:
  records whose last successful read was sent before that connection (a read that failed
  leaves the older ones) are **stale** (:func:`stale_cluster`): nothing is decided on them
  but what the session and the broker's answer decide alone; the next check reads again.
- A primary broker whose epoch is older than the in-sync set's is fenced: the set was taken
  over by a newer primary (:func:`isr_update` and :func:`releasable` keep the set of the
  primary that owns it).
- A broker that **fenced itself** is no primary, whatever its state says while it stops
  (:attr:`BrokerView.fenced`): it never contends, and a leader that promoted it fences it
  (it exits at once) and resigns.

Error Handling
==============

Pure functions: they raise nothing for any view; an unknown broker state is treated as a
broker that may not be promoted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from ha_agent.cluster_records import (
    PRIMARY_STATES,
    BrokerInSync,
    BrokerView,
    InSyncMember,
    InSyncRecord,
    PrimaryRecord,
    most_advanced,
    rank,
)
from ha_agent.membership import Member
from ha_agent.spread import fresh_choice
from ha_agent.store_choice import choose_store, restart_to_join

__all__ = [
    "PRIMARY_STATES",
    "Action",
    "BrokerInSync",
    "BrokerView",
    "ClusterView",
    "Decision",
    "InSyncMember",
    "InSyncRecord",
    "PrimaryRecord",
    "Step",
    "decide",
    "eligibility",
    "isr_update",
    "known_gone",
    "most_advanced",
    "promotion_in_sync",
    "rank",
    "releasable",
    "stale_cluster",
    "stale_view",
]


class Step(StrEnum):
    """What the agent shell does. Each :class:`Action` carries one, with a reason."""

    CONTEND = "contend"  # join the election
    WITHDRAW = "withdraw"  # leave the election (resign when leading)
    PROMOTE = "promote"  # take the next epoch, promote the broker, record it as primary
    TAKE_VIP = "take_vip"  # make sure the virtual IP is here (idempotent)
    FENCE = "fence"  # kill the broker (it restarts as a backup), drop the VIP, withdraw
    KILL_BROKER = "kill_broker"  # the watchdog: SIGKILL a silent broker (then restart)
    #: a broker stuck in catch-up whose store is needed: restart it to join with its store
    RESTART_BROKER = "restart_broker"
    RECHECK = "recheck"  # the broker view is stale: read the broker again, then decide


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
    #: "idle", "contending", "leading" or "resigning" (ha_agent.primary_claim.Leadership)
    leadership: str = "idle"
    #: True once this agent promoted its broker during the current leadership
    promoted: bool = False
    #: False when the session guard fenced: ZooKeeper may have given up on this agent
    session_ok: bool = True
    cluster_size: int = 1
    #: seconds since the broker last answered (0 when it just did)
    broker_silent_for: float = 0.0
    watchdog_timeout: float = 0.0  # 0: no watchdog
    #: the last check timed out (the broker may be slow): not refused, not an error answer
    broker_timed_out: bool = False
    #: how long a leader's broker may leave checks unanswered by timing out before the agent
    #: fences it (``--broker-timeout``; 0: at the first one)
    broker_timeout: float = 0.0
    #: the committed in-sync set (None: none recorded, a new or an older cluster)
    in_sync: InSyncRecord | None = None
    #: why the in-sync set could not be read ("" when it could): then nobody contends
    in_sync_error: str = ""
    #: a ZooKeeper record of a format this agent cannot read ("" none): a backup's agent
    #: does not contend (ha_agent.zk_format)
    format_error: str = ""
    # Freshness (the agent's monotonic clock; None: unknown, no constraint):
    #: when the broker check behind ``broker`` was sent
    broker_read_at: float | None = None
    #: when the ZooKeeper connection the cluster was read over was established
    connected_at: float | None = None
    #: when the broker was last killed by the agent or seen exiting
    broker_reset_at: float | None = None
    #: when the last cluster read that succeeded (members, primary record, in-sync set)
    #: was sent; a failed read leaves the older one in the view
    cluster_read_at: float | None = None
    #: primaries each node runs in the other clusters on this ZooKeeper (read while the
    #: cluster has no primary; empty: not read): a new cluster's tie between equally
    #: advanced members goes to the least loaded node (ha_agent.spread)
    node_loads: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Decision:
    actions: tuple[Action, ...] = ()
    #: why this agent may or may not be promoted (logged when it changes)
    eligibility: str = ""

    @property
    def steps(self) -> tuple[Step, ...]:
        return tuple(action.step for action in self.actions)


def _live_in_sync(view: ClusterView, record: InSyncRecord) -> list[str]:
    """Nodes of the live members whose broker is in ``record`` (by broker id)."""
    ids = record.broker_ids
    return sorted(n for n, m in view.members.items() if m.broker_id and m.broker_id in ids)


def _set_names(record: InSyncRecord) -> str:
    return ", ".join(sorted(m.node or m.broker_id for m in record.members))


def eligibility(view: ClusterView) -> tuple[bool, str]:
    """May this agent's broker be promoted? And why (or why not)."""
    broker = view.broker
    if broker is None:
        return False, "the broker does not answer"
    state = broker.ha_state
    record = view.in_sync
    if broker.fenced:
        # It serves no more and is stopping, though its state still says so until it
        # exits (issue 26: its agent, its session lost at a ZooKeeper outage, took an epoch
        # for it: an empty set naming its store, and a minute of churn).
        return False, f"the broker fenced itself ({state} while it stops): it serves no more"
    if broker.is_primary:
        # A record of another node at an older epoch than the broker's is one this agent's
        # promotion has not replaced yet (epochs come from ZooKeeper's counter: the newer
        # promotion is this one); the older primary is fenced by the newer epoch.
        if (
            view.primary is not None
            and view.primary.node != view.node
            and view.primary.epoch >= broker.epoch
        ):
            return (
                False,
                f"ZooKeeper names {view.primary.node} primary (epoch {view.primary.epoch})",
            )
        if record is not None and record.epoch > broker.epoch:
            return False, (
                f"the in-sync set is at epoch {record.epoch}, newer than the broker's "
                f"{broker.epoch}: another primary took it over"
            )
        return True, f"the broker is already the primary ({state})"
    if view.format_error:
        return False, f"a ZooKeeper record this agent cannot read: {view.format_error}"
    if state in ("ready", "joining") and view.in_sync_error:
        return False, f"the in-sync set cannot be read: {view.in_sync_error}"
    if state == "ready":
        if record is None:
            return True, "a ready backup (no in-sync set recorded)"
        if broker.broker_id and broker.broker_id in record.broker_ids:
            return True, f"a ready backup in the in-sync set (epoch {record.epoch})"
        out = f"a ready backup out of the in-sync set (epoch {record.epoch})"
        live = _live_in_sync(view, record)
        if live:
            return False, f"{out}: {', '.join(live)} in it"
        if view.primary is None and record.store_ids:
            return _by_store(view, record)  # empty, or no member live in it
        if not record.members:
            hint = (
                ""
                if view.primary is not None
                else " (a record without stores: for an operator to restart the backups:"
                " they join, and the most advanced wins)"
            )
            return False, f"{out}, which is empty: waiting for the primary to add it{hint}"
        return False, (
            f"a ready backup out of the in-sync set (epoch {record.epoch}: {_set_names(record)}),"
            " whose members are all gone: waiting for one of them to return"
        )
    if state == "catch-up":
        return False, "the broker is still catching up"
    if state != "joining":
        return False, f"the broker is {state}"
    if view.primary is not None:
        return False, f"joining a cluster whose primary is {view.primary.node}"
    if record is not None:
        live = _live_in_sync(view, record)
        if live:
            return False, f"{', '.join(live)} in the in-sync set (epoch {record.epoch})"
        if record.store_ids:
            # After the set (a total failure, or the set empty or gone): only a store the
            # record names holds every confirmed message; the other brokers' states do
            # not matter (issue 25, item 3).
            return _by_store(view, record)
    present = len(view.members)
    if present < view.cluster_size:
        return False, f"a new cluster: waiting for {view.cluster_size} members, {present} present"
    beyond = sorted(n for n, m in view.members.items() if m.ha_state != "joining")
    if beyond:
        return False, f"not every member is joining: {', '.join(beyond)}"
    among = f"{present} joining members"
    best = fresh_choice(view.members, view.node_loads)
    if best is None or best.node != view.node:
        assert best is not None
        return False, (
            f"{best.node} is the most advanced of {among} "
            f"(epoch {best.epoch}, position {best.replication_position}, {best.store_status})"
        )
    return True, (
        f"the most advanced of {among} "
        f"(epoch {best.epoch}, position {best.replication_position}, {best.store_status})"
    )


def _by_store(view: ClusterView, record: InSyncRecord) -> tuple[bool, str]:
    """Eligible when this node's store is the one :func:`choose_store` chooses."""
    choice = choose_store(view.members, record, view.cluster_size)
    if choice.chosen == view.node:
        return True, f"its store is chosen: {choice.reason}"
    broker = view.broker
    outside = broker is not None and broker.store_id not in record.store_ids
    if outside and broker is not None and broker.epoch <= record.epoch:
        named = f"the stores the in-sync record of epoch {record.epoch} names"
        return False, f"its store is not one of {named}: {choice.reason}"
    return False, choice.reason


def isr_update(
    record: InSyncRecord | None,
    broker_in_sync: BrokerInSync,
    members_now: Mapping[str, Member] | None = None,
) -> tuple[str, ...] | None:
    """The in-sync set (broker ids, sorted) the primary's agent should write, given the
    committed ``record``, the primary broker's ``in_sync`` and the member records
    (``members_now``); None when nothing changes.

    The set becomes what the broker counts as in sync (``wanted``) less the backups whose
    removal waits (``pending_removal``) and the awaited backups known gone
    (:func:`known_gone`). Adding a backup is safe once the broker counts it (it is guarded:
    no confirm goes out without it); removing one is always safe for the data (fewer
    backups may be promoted), and it is what lets the broker release it.
    """
    gone = known_gone(record, broker_in_sync, members_now)
    members = broker_in_sync.wanted - broker_in_sync.pending_removal - gone
    if record is not None and members == record.broker_ids:
        return None
    return tuple(sorted(members))


def known_gone(
    record: InSyncRecord | None,
    broker_in_sync: BrokerInSync,
    members_now: Mapping[str, Member] | None,
) -> frozenset[str]:
    """The awaited backups (a recovering primary's expected, not connected) that will not
    come: the set names the node of each, and that node's agent record is gone (its agent's
    session ended) or names another broker (it restarted: the instance awaited is no
    more). Issue 26, item 3: their removal is committed at once instead of after
    ``ha-backup-timeout``; the broker releases them only once it is committed. A backup
    whose node the record does not name is not known gone."""
    if record is None or members_now is None:
        return frozenset()
    nodes = {m.broker_id: m.node for m in record.members}
    return frozenset(
        backup_id
        for backup_id in broker_in_sync.awaited
        if _member_gone(nodes.get(backup_id, ""), backup_id, members_now)
    )


def _member_gone(node: str, broker_id: str, members_now: Mapping[str, Member]) -> bool:
    """The set's member ``broker_id`` on ``node`` will not come: its node's agent record
    is gone, or names another broker (it restarted). Never for an unnamed node."""
    if not node:
        return False
    now = members_now.get(node)
    return now is None or bool(now.broker_id and now.broker_id != broker_id)


def releasable(record: InSyncRecord | None, broker_in_sync: BrokerInSync) -> tuple[str, ...]:
    """The pending-removal and awaited backups whose removal ``record`` (committed) shows:
    the primary may release their held confirms (sorted; empty without a record)."""
    if record is None:
        return ()
    left = broker_in_sync.pending_removal | broker_in_sync.awaited
    return tuple(sorted(left - record.broker_ids))


def promotion_in_sync(
    record: InSyncRecord | None,
    broker: BrokerView,
    members_now: Mapping[str, Member] | None = None,
) -> tuple[InSyncMember, ...]:
    """The in-sync set a promotion of ``broker`` writes (at the new epoch) and hands the
    broker to expect: the committed set less the broker itself and less the members known
    gone in ``members_now`` (the member records: :func:`known_gone`'s rule; issue 26, item
    3: the new primary neither waits for them nor needs their member-lease grant, where
    it waited for the next check's commit). A joining broker (a new cluster, total
    failure) starts with an empty set: the old members' broker ids belong to brokers that
    have all restarted since (ids are new at each start). Leaving a member out is always
    safe for the data: fewer brokers may be promoted."""
    if record is None or broker.ha_state == "joining":
        return ()
    kept = (m for m in record.members if m.broker_id != broker.broker_id)
    if members_now is None:
        return tuple(kept)
    return tuple(m for m in kept if not _member_gone(m.node, m.broker_id, members_now))


def stale_view(view: ClusterView) -> str:
    """Why ``view.broker`` is too old to act on ("" when it is not): read before the
    ZooKeeper connection was (re)established, or before the broker was killed or exited."""
    read_at = view.broker_read_at
    if read_at is None:
        return ""
    if view.connected_at is not None and read_at < view.connected_at:
        ago = view.connected_at - read_at
        return f"the broker was read {ago:.3f} s before the ZooKeeper connection"
    if view.broker_reset_at is not None and read_at < view.broker_reset_at:
        ago = view.broker_reset_at - read_at
        return f"the broker was read {ago:.3f} s before it was killed or exited"
    return ""


def stale_cluster(view: ClusterView) -> str:
    """Why the cluster part of ``view`` is too old to decide on ("" when it is not): its
    last successful read was sent before the ZooKeeper connection was (re)established. A
    read that failed leaves the older records in the view: after ZooKeeper's return, those
    from before its loss (issue 26)."""
    read_at, connected_at = view.cluster_read_at, view.connected_at
    if read_at is None or connected_at is None or read_at >= connected_at:
        return ""
    return f"the cluster was read {connected_at - read_at:.3f} s before the ZooKeeper connection"


def slow_not_gone(view: ClusterView) -> bool:
    """A leader's broker whose checks time out is given ``broker_timeout`` to answer again
    before its agent fences it: a broker starved of CPU is slow, not gone, and fencing it is
    a fail-over. Not when the check was refused or answered with an error (the broker is
    gone or unwell), nor when it has not answered since it was (re)started (its silence is
    unknown). Availability only: the broker's lease still ends its service if the agent
    cannot renew it, and the session still decides who may be primary."""
    return (
        view.broker_timed_out
        and view.broker_timeout > 0
        and 0 < view.broker_silent_for < view.broker_timeout
    )


def decide(view: ClusterView) -> Decision:
    """The actions this agent should take now, given ``view``."""
    actions: list[Action] = []
    leadership = view.leadership
    in_election = leadership in ("contending", "leading")
    broker = view.broker

    stale = stale_view(view)
    if stale:
        # Nothing is decided on a stale broker view, not even a fence: the session
        # watcher fences by itself, and the check again follows at once.
        return Decision((Action(Step.RECHECK, stale),), stale)

    if not view.session_ok:
        reason = "the ZooKeeper session is in doubt"
        if broker is not None and broker.on_grants:
            # Issue 26, item 2: its lease ran out with the session's, no renewal follows;
            # it serves on its members' grants and fences itself at the first lapse (a
            # member is promoted only once its own grant lapsed). Not killed for this alone.
            reason += ": the primary serves on its members' grants"
        elif leadership == "leading" or (broker is not None and broker.is_primary):
            actions.append(Action(Step.FENCE, reason))
        elif in_election:
            actions.append(Action(Step.WITHDRAW, reason))
        return Decision(tuple(actions), reason)

    if broker is None:
        reason = "the broker does not answer"
        if leadership == "leading":
            if slow_not_gone(view):
                reason += (
                    f" (slow: silent for {view.broker_silent_for:.1f} s of"
                    f" --broker-timeout {view.broker_timeout:g} s)"
                )
            else:
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

    stale = stale_cluster(view)
    if stale:
        # Nothing is decided on it, not even a fence (the session watcher and the broker's
        # own lease and epoch fence by themselves): the next check reads the cluster again.
        return Decision((), stale)
    eligible, why = eligibility(view)
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
            # Promoted, yet no longer primary (restarted behind our back, or it fenced
            # itself): fence (a fenced one exits at once) and resign.
            actions.append(Action(Step.FENCE, f"the promoted broker is now {broker.state_named}"))
        return Decision(tuple(actions), why)
    if eligible and leadership == "idle":
        actions.append(Action(Step.CONTEND, why))
    elif not eligible and leadership == "contending":
        actions.append(Action(Step.WITHDRAW, why))
    record = view.in_sync
    if record is not None and view.primary is None and not _live_in_sync(view, record):
        restart = restart_to_join(view.members, record, broker.ha_state, broker.store_id)
        if restart:
            actions.append(Action(Step.RESTART_BROKER, restart))
            why = f"{why}: {restart}"
    return Decision(tuple(actions), why)
