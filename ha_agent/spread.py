"""Spreading several clusters' primaries over the nodes they share: the choice, pure.

:Status: Beta (issue 32, item 4: every core of a machine)

Several HA clusters may run on one ZooKeeper ensemble and one set of nodes, one broker per
core on each node, each broker the member of its own cluster (docs/deploy.md, "Several
clusters on one set of nodes"). Their agents name a node the same way (``--node``: the
machine's name, shared by the agents of one machine; a cluster's member path is
``/qpid-ha/<cluster>/members/<node>``), so each cluster's primary record names the node
its primary runs on, and the *load* of a node is the number of other clusters whose
primary it runs (:func:`node_loads`).

The preference applies only **between candidates the rules already hold equally safe**,
and never waits for anything:

- a new cluster (every member joining, :func:`ha_agent.promotion.eligibility`): among the
  members tied for the most advanced (same epoch, position and store status: the same
  data), the one on the least loaded node, then the node name (:func:`fresh_choice`).
  A member ahead of the others is chosen whatever its node's load;
- a fail-over: among the ready backups of the committed in-sync set (each of which may be
  promoted), a candidate on a node running more primaries lets one on a least loaded node
  go first, but only while that one's agent is contending right now (its status record says
  so, :mod:`ha_agent.agent_status`), so the promotion happens as fast as if that one had won
  the race it would have run anyway (:func:`yield_to`). Nobody waits for an absent,
  silent or idle candidate, and a primary is never moved for balance: a node's loss moves
  only the primaries that were there.

Error Handling
==============

Pure functions: they raise nothing; unknown nodes have load 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ha_agent.cluster_records import InSyncRecord, most_advanced, rank
from ha_agent.membership import Member

__all__ = [
    "CLAIMING",
    "fresh_choice",
    "least_loaded",
    "node_loads",
    "safe_candidates",
    "yield_to",
]

#: The claim states (ha_agent.primary_claim.Leadership) of an agent that is trying now.
CLAIMING = frozenset({"contending", "leading"})


def node_loads(primaries: Mapping[str, str | None]) -> dict[str, int]:
    """How many primaries each node runs, from each cluster's primary node (None: none)."""
    loads: dict[str, int] = {}
    for node in primaries.values():
        if node:
            loads[node] = loads.get(node, 0) + 1
    return loads


def least_loaded(candidates: Iterable[str], loads: Mapping[str, int]) -> frozenset[str]:
    """The candidates on the nodes running the fewest primaries (empty: no candidate)."""
    pool = set(candidates)
    if not pool:
        return frozenset()
    low = min(loads.get(node, 0) for node in pool)
    return frozenset(node for node in pool if loads.get(node, 0) == low)


def fresh_choice(members: Mapping[str, Member], loads: Mapping[str, int]) -> Member | None:
    """The member a new cluster (or a total failure) promotes: the most advanced
    (:func:`~ha_agent.cluster_records.most_advanced`); among members tied with it on
    epoch, position and store status, the one on the least loaded node, then by name as
    before (None when there is no member)."""
    best = most_advanced(members)
    if best is None or not loads:
        return best
    key = rank(best)[:3]
    tied = {n: m for n, m in members.items() if rank(m)[:3] == key}
    low = least_loaded(tied, loads)
    return most_advanced({n: m for n, m in tied.items() if n in low})


def safe_candidates(members: Mapping[str, Member], in_sync: InSyncRecord | None) -> frozenset[str]:
    """Nodes whose broker may be promoted in a fail-over, as their member records show: a
    ready backup in the committed in-sync set (any ready backup without a recorded set),
    the rule of :func:`ha_agent.promotion.eligibility` for a ready backup."""
    return frozenset(
        node
        for node, m in members.items()
        if m.ha_state == "ready"
        and (in_sync is None or (bool(m.broker_id) and m.broker_id in in_sync.broker_ids))
    )


def yield_to(
    node: str,
    candidates: Iterable[str],
    loads: Mapping[str, int],
    claiming: Iterable[str],
) -> str | None:
    """The candidate ``node`` lets go first, or None: a safe ``candidate`` on a less
    loaded node whose agent is ``claiming`` now (the first by name). None when ``node`` is
    not a candidate itself (the rules decide about it), or is on a least loaded node, or
    no less loaded candidate is trying."""
    pool = set(candidates)
    if node not in pool:
        return None
    low = least_loaded(pool, loads)
    if node in low:
        return None
    trying = sorted(low & set(claiming))
    return trying[0] if trying else None
