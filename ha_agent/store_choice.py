"""Which store to promote when no live member of the in-sync set can be (issue 25, item 3).

:Status: Beta

No I/O: pure functions of the member records and the last committed in-sync record.

The committed in-sync record of epoch E names the stores that hold every confirmed message
of E: the primary's (``primary_store_id``) and each member's (``store_id``): each confirm
waited for those disks (ARCHITECTURE.md, invariant 1). Any newer promotion writes a newer
record first, so while E's record is the last one, those stores still hold everything
confirmed. When the set is empty, or none of its members is live in the set (they
restarted with new broker ids, are catching up, or are gone), the agents need no operator:
they promote the **most advanced of the named stores** that are back (:func:`rank`: epoch,
replication position, store status, node), as after a total failure, and whatever state
the other brokers are in. They choose once every named store is back, or once the
cluster's ``--cluster-size`` members are present (the total-failure rule), so that the
choice is the same whatever order the stores come back in (issue 12). A store the record
does not name is never promoted: it may lack confirmed messages. A store at an epoch newer
than the record's served (or followed) a primary promoted without ZooKeeper
(``--designated-primary``): what that primary confirmed is on it, and it ranks first by its
epoch.

A candidate's broker must be promotable: joining (it recovered its store) or ready; a
broker in catch-up is not (seed 001), nor one that does not answer. While a member serves
as primary with no primary record (its agent restarting), nobody is chosen. Where nothing
can be chosen, :attr:`StoreChoice.needed` says which broker is needed and why: the agents
log it (``promotion_eligibility``), publish it in their status record
(:mod:`ha_agent.agent_status`), and ``qpid-ha status`` and the console show it.

:func:`choose_store` is the rule; :func:`named_stores` the stores a record names, with the
node of each as far as known.

Error Handling
==============

Pure functions: they raise nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ha_agent.cluster_records import PRIMARY_STATES, InSyncRecord, most_advanced
from ha_agent.membership import Member

__all__ = ["PROMOTABLE", "StoreChoice", "choose_store", "named_stores", "restart_to_join"]

#: Broker states a named store may be promoted from.
PROMOTABLE = frozenset({"joining", "ready"})


@dataclass(frozen=True)
class StoreChoice:
    """The node whose store is chosen (None: none can be), why, and, when none can be,
    which broker is needed and why (one line, "" when a store is chosen)."""

    chosen: str | None
    reason: str
    needed: str = ""


def named_stores(members: Mapping[str, Member], record: InSyncRecord) -> list[tuple[str, str]]:
    """(store id, who: the node whose member record holds it now, else the node the record
    names, else the store id's first 8 characters) of each store ``record`` names, the
    primary's first, said so."""
    where = {m.store_id: n for n, m in members.items() if m.store_id}
    out: list[tuple[str, str]] = []
    if record.primary_store_id:
        sid = record.primary_store_id
        who = where.get(sid) or record.primary_node
        out.append(
            (sid, f"{who} (the primary's store)" if who else f"the primary's store {sid[:8]}")
        )
    for m in sorted(record.members, key=lambda m: m.node or m.store_id):
        if m.store_id and m.store_id != record.primary_store_id:
            out.append((m.store_id, where.get(m.store_id) or m.node or m.store_id[:8]))
    return out


def choose_store(
    members: Mapping[str, Member], record: InSyncRecord, cluster_size: int | None = 1
) -> StoreChoice:
    """The most advanced promotable member whose store ``record`` names (see the module
    docstring), once every named store is back or ``cluster_size`` members are present
    (None: not known here, as in ``qpid-ha``: it waits for every named store).
    ``record.store_ids`` must not be empty (a record before stores had ids names none: the
    caller keeps the older rules)."""
    stores = record.store_ids
    held = f"the stores the in-sync record of epoch {record.epoch} names"
    serving = sorted(n for n, m in members.items() if m.ha_state in PRIMARY_STATES)
    if serving:
        return StoreChoice(
            None,
            f"{', '.join(serving)} serves as primary without a primary record: waiting for it",
        )
    named = {n: m for n, m in members.items() if m.store_id in stores or m.epoch > record.epoch}
    candidates = {n: m for n, m in named.items() if m.ha_state in PROMOTABLE}
    names = named_stores(members, record)
    missing = [who for sid, who in names if not any(m.store_id == sid for m in named.values())]
    if candidates and missing and (cluster_size is None or len(members) < cluster_size):
        # Wait for the rest: every agent that chooses has then seen the same stores, so
        # the choice does not depend on the order they come back in (issue 12).
        size = (
            "the agents' --cluster-size members"
            if cluster_size is None
            else f"{cluster_size} members ({len(members)} present)"
        )
        needed = (
            f"{', '.join(missing)} (of {held}) or {size} are needed before the most"
            " advanced is chosen"
        )
        return StoreChoice(None, f"waiting: {needed}", needed)
    best = most_advanced(candidates)
    if best is not None:
        return StoreChoice(
            best.node,
            f"{best.node} is the most advanced of {held} that are back"
            f" ({', '.join(sorted(candidates))}; epoch {best.epoch}, position"
            f" {best.replication_position}, {best.store_status})",
        )
    listed = ", ".join(who for _, who in names)
    unfit = [f"{n} is {m.ha_state}" for n, m in sorted(named.items())]
    why = "; ".join(unfit + ([f"{', '.join(missing)}: not back"] if missing else []))
    one = f"{listed} is" if len(names) == 1 else f"one of {listed} is"
    needed = (
        f"{one} needed: only {held} hold every confirmed message ({why});"
        " a broker in catch-up is promotable once restarted (it joins with its store)"
        if unfit
        else f"{one} needed: only {held} hold every confirmed message ({why})"
    )
    return StoreChoice(None, f"no safe choice: {needed}", needed)


def restart_to_join(
    members: Mapping[str, Member], record: InSyncRecord, state: str, store_id: str
) -> str:
    """Why a broker in catch-up (``state``, with ``store_id``) should be restarted, "" when
    it should not: its store is one ``record`` names, no named store is on a promotable
    broker and none serves. A backup whose primary died while it caught up stays in
    catch-up (seed 001: never promoted); restarted, it recovers its store and joins, and
    the named stores can be chosen from again. Its agent restarts it (a supervised broker)."""
    if state != "catch-up" or not store_id or store_id not in record.store_ids:
        return ""
    for m in members.values():
        named = m.store_id in record.store_ids or m.epoch > record.epoch
        if m.ha_state in PRIMARY_STATES or (named and m.ha_state in PROMOTABLE):
            return ""
    return (
        f"its store is one the in-sync record of epoch {record.epoch} names and no other"
        " named store can be promoted; in catch-up it cannot be: restarted, it joins with"
        " its store"
    )
