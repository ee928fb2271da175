"""A store's identity (seed 002, "Persistent Cluster Restart"): the rules, free of I/O.

Three UUIDs are kept in a data directory beside the store:

- ``store-id``: this store, created when the data directory is first used, kept across
  restarts, replaced only when the store is moved aside (a new, empty store is another
  store);
- ``cluster-id``: the cluster the store belongs to, created when the cluster's first primary
  is promoted and copied by every backup from its primary;
- ``shutdown-id``: the clean all-stop (``qpid-ha shutdown --all``) that stopped the broker,
  the same in every store that stopped at that point (the content of ``clean-shutdown``).

:func:`join_decision` is the rule a backup applies when its primary announces the cluster's
id. :func:`next_backup_name` numbers the directories discarded stores are moved to.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "BACKUP_PREFIX",
    "CLUSTER_ID",
    "STORE_ID",
    "Adopt",
    "JoinDecision",
    "Keep",
    "RefuseJoin",
    "join_decision",
    "new_id",
    "next_backup_name",
    "parse_id",
]

#: The files, in the data directory.
STORE_ID = "store-id"
CLUSTER_ID = "cluster-id"

#: A discarded store goes to ``<data-dir>/_cluster.bak.NNNN`` (Qpid's name; higher is newer).
BACKUP_PREFIX = "_cluster.bak."
_BACKUP_NAME = re.compile(r"_cluster\.bak\.([0-9]{4,})")
#: The highest number of four digits; past it the number simply grows a digit.
_FOUR_DIGITS = 9999


def new_id() -> str:
    """A new random id (UUID 4, canonical text)."""
    return str(uuid.uuid4())


def parse_id(text: str) -> str | None:
    """The canonical UUID in ``text`` (surrounding white space allowed), or None."""
    try:
        return str(uuid.UUID(text.strip()))
    except ValueError:
        return None


def next_backup_name(existing: Iterable[str]) -> str:
    """The name for the next discarded store: one more than the highest
    ``_cluster.bak.NNNN`` among ``existing`` names (``0001`` for the first), so a higher
    number is always newer and an old one is never reused."""
    numbers = [int(m.group(1)) for name in existing if (m := _BACKUP_NAME.fullmatch(name))]
    number = max(numbers, default=0) + 1
    return f"{BACKUP_PREFIX}{number:04d}" if number <= _FOUR_DIGITS else f"{BACKUP_PREFIX}{number}"


@dataclass(frozen=True, slots=True)
class Keep:
    """The store already belongs to the primary's cluster."""


@dataclass(frozen=True, slots=True)
class Adopt:
    """The store belongs to no cluster yet: write the primary's cluster id into it."""

    cluster_id: str


@dataclass(frozen=True, slots=True)
class RefuseJoin:
    """The store belongs to another cluster: do not join (the reason names both ids)."""

    reason: str


JoinDecision = Keep | Adopt | RefuseJoin


def join_decision(
    *, store_cluster_id: str | None, store_empty: bool, primary_cluster_id: str | None
) -> JoinDecision:
    """What a backup does with its store when its primary announces ``primary_cluster_id``.

    - the primary announces none (it has no id yet, or an older broker): keep;
    - the same id: keep;
    - the store has no id (new, or written before cluster ids): adopt the primary's;
    - an empty store adopts whatever it had (nothing in it belongs to anyone);
    - a non-empty store of another cluster: refuse, naming both ids. Joining would let
      replication overwrite another cluster's messages; ``qpidd --truncate yes`` moves
      the store aside first.
    """
    if primary_cluster_id is None or store_cluster_id == primary_cluster_id:
        return Keep()
    if store_cluster_id is None or store_empty:
        return Adopt(primary_cluster_id)
    return RefuseJoin(
        f"the store belongs to cluster {store_cluster_id}, the primary's cluster is"
        f" {primary_cluster_id}: not joining (to discard this store, moving it aside, start"
        " qpidd with --truncate yes)"
    )
