"""The records the agent's rules read: its broker's view, the primary record, the in-sync set.

:Status: Beta

Plain frozen dataclasses, no I/O: the agent fills them from its broker's ``/api/ha``
(:mod:`ha_agent.broker_check`) and from ZooKeeper (:mod:`ha_agent.primary_record`,
:mod:`ha_agent.in_sync`); the rules (:mod:`ha_agent.promotion`,
:mod:`ha_agent.store_choice`) read them. :func:`rank` orders promotion candidates.

Error Handling
==============

Raises nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ha_agent.membership import Member

__all__ = [
    "PRIMARY_STATES",
    "BrokerInSync",
    "BrokerView",
    "InSyncMember",
    "InSyncRecord",
    "PrimaryRecord",
    "most_advanced",
    "rank",
]

#: States of a broker that serves clients.
PRIMARY_STATES = frozenset({"active", "recovering"})

#: Store statuses from best to worst (seed 002: a clean store before a dirty one).
_STORE_ORDER = {"clean": 3, "empty": 2, "unknown": 1, "dirty": 0}


@dataclass(frozen=True)
class BrokerInSync:
    """A primary broker's ``/api/ha`` ``in_sync``: the backups it counts as in sync now
    (``wanted``), those gone while in sync whose held confirms wait for a committed removal
    (``pending_removal``), and the broker ids' AMQP addresses from its ``backups``."""

    wanted: frozenset[str] = frozenset()
    pending_removal: frozenset[str] = frozenset()
    urls: tuple[tuple[str, str], ...] = ()  # (broker id, url) of the backups it knows
    #: a recovering primary's expected backups not connected yet (``awaited``): left out
    #: of a committed set, they are released (issue 26, item 3)
    awaited: frozenset[str] = frozenset()
    #: the committed set the broker was last told (``committed``: epoch, broker ids; epoch
    #: 0: none since its promotion; None: a broker that does not say): the member lease
    #: counts the grants of its members
    committed: tuple[int, frozenset[str]] | None = None


@dataclass(frozen=True)
class BrokerView:
    """What a health check of the local broker read (``None`` in a view: it did not answer)."""

    ha_state: str
    epoch: int = 0
    replication_position: int = 0
    store_status: str = "unknown"
    pid: int | None = None
    url: str = ""  # the broker's AMQP address as it reports it
    broker_id: str = ""  # new at each broker start ("" from a broker that does not say)
    #: the broker's store (its data directory's id, kept across restarts; "" unknown)
    store_id: str = ""
    in_sync: BrokerInSync | None = None  # on a primary that reports it
    #: a backup's replication link: True up, False down (with ``link_error``), None: not a
    #: backup, or a broker that does not say
    link_up: bool | None = None
    link_error: str = ""  # why the backup's link is down, as the broker reports it
    #: the replication formats the broker speaks, "LOW-HIGH" ("" from one that does not say)
    replication_formats: str = ""
    #: a primary whose member lease is in force with a non-empty committed set: past its
    #: agent's lease it serves on its members' grants and fences itself at the first lapse
    #: (issue 26, item 2), so a ZooKeeper outage alone does not make the agent kill it
    on_grants: bool = False
    #: the broker fenced itself (``member_lease.fenced``: a newer epoch seen, its lease or a
    #: member's grant lapsed): it serves no more, never again, and is stopping, though its
    #: state still says "active" until it exits (issue 26: its agent took that for a primary
    #: and took an epoch for it)
    fenced: bool = False

    @property
    def is_primary(self) -> bool:
        """A primary that may serve: never one that fenced itself (it stops)."""
        return self.ha_state in PRIMARY_STATES and not self.fenced

    @property
    def state_named(self) -> str:
        """Its state as the agent's reasons name it ("fenced" for a fenced primary)."""
        return "fenced" if self.fenced else self.ha_state


@dataclass(frozen=True)
class PrimaryRecord:
    """The content of ``/qpid-ha/<cluster>/primary``: who leads, with which epoch."""

    node: str
    epoch: int
    broker_url: str = ""


@dataclass(frozen=True)
class InSyncMember:
    """One backup of the in-sync set: its broker id (what counts while it runs), node and
    URL (to show), and its store id (what counts after a total failure; "" unknown)."""

    broker_id: str
    node: str = ""
    url: str = ""
    store_id: str = ""


@dataclass(frozen=True)
class InSyncRecord:
    """The content of ``/qpid-ha/<cluster>/in-sync``: the backups that hold every confirmed
    message of the primary of ``epoch`` (the primary itself is not a member)."""

    epoch: int
    members: tuple[InSyncMember, ...] = ()
    #: the store of the primary that keeps the set ("" unknown, or a record before stores)
    primary_store_id: str = ""
    #: the node of that primary (only shown: which broker is needed; "" unknown)
    primary_node: str = ""

    @property
    def broker_ids(self) -> frozenset[str]:
        return frozenset(m.broker_id for m in self.members)

    @property
    def store_ids(self) -> frozenset[str]:
        """The stores that hold every confirmed message of this epoch: the primary's and
        its in-sync backups' (each confirm waited for their disks). Empty when the record
        names none (written before stores had ids): then nothing is known of them."""
        ids = {m.store_id for m in self.members} | {self.primary_store_id}
        ids.discard("")
        return frozenset(ids)


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
