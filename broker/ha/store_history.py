"""Whose history a store holds: the store epoch, and a backup's store that diverged.

Each HA broker's store records its *store epoch* (``DIR/store-epoch``): the highest epoch of
a primary whose replication stream was applied to it, or at which this broker was the
primary. A primary announces its *base epoch* in connection.start
(:data:`~broker.ha.names.BASE_EPOCH_PROPERTY`): its store epoch when it was promoted, the
last era its own store holds. Eras are the epochs' (docs/ha-design.md): a store with epoch
``s`` holds messages of eras up to ``s``.

A backup whose store epoch ``s`` lies strictly between the primary's base epoch ``b`` and
the primary's epoch ``e`` (``b < s < e``) holds messages of an era the primary's store never
saw: the primary was promoted from an older store (an operator's manual recovery, a
designated primary). The reconnect handshake would dequeue those messages from the backup
as gone. Instead the backup's store has *diverged*: it is moved aside to
``_cluster.bak.NNNN`` (kept for the operator, never deleted) and the backup starts empty and
catches up (issue 12). The agents' own choice after a total failure never makes this happen
(they promote a store of the last in-sync set, which holds the newest era), so it needs an
operator's override.

``s <= b``: the backup holds eras the primary's store holds too (the handshake reconciles);
``s == e``: it already replicated this primary. A primary older than ``s`` is refused by
epoch fencing before this is asked.

THREAD SAFE: pure functions.
"""

from __future__ import annotations

#: The file of the store epoch in the data directory (moved aside with the store).
STORE_EPOCH_FILE = "store-epoch"
#: A store to move aside at the next start, and why (written by a backup that diverged).
DISCARD_MARKER = "discard-store"


def diverged(store_epoch: int, base_epoch: int | None, primary_epoch: int) -> bool:
    """Whether a store with ``store_epoch`` holds an era the primary's store (promoted at
    ``primary_epoch`` from a store with ``base_epoch``; None: a primary that does not say)
    never saw."""
    if base_epoch is None:
        return False
    return base_epoch < store_epoch < primary_epoch


def divergence_reason(store_epoch: int, base_epoch: int, primary_epoch: int, address: str) -> str:
    return (
        f"this store holds era {store_epoch}, which the primary at {address} (epoch "
        f"{primary_epoch}, promoted from a store of era {base_epoch}) never saw: moved aside "
        "at the next start, and the broker catches up from the primary"
    )
