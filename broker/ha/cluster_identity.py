"""The cluster-id of an HA broker's store (seed 002): created by the cluster's first primary,
copied by every backup, checked before a backup replicates.

A primary announces its cluster's id in its connection.start server properties
(:data:`~broker.ha.names.CLUSTER_ID_PROPERTY`). A backup reads it when it dials (before it
replicates anything) and applies :func:`broker.store.identity.join_decision`: it keeps or
adopts the id (written to its data directory before the link goes on), or refuses a
primary of another cluster: the broker then stops with one line naming both ids
(``ha_cluster_id_mismatch``) and exit code 1, as Qpid's brokers do on a mismatched
store; ``qpidd --truncate yes`` moves the old store aside and lets it join.

Without a data directory the id lives in memory (a broker that keeps nothing has nothing
to mismatch).
"""

from __future__ import annotations

import asyncio
from typing import Any

from broker.ha.names import CLUSTER_ID_PROPERTY
from broker.store.data_dir import DataDir
from broker.store.identity import Adopt, RefuseJoin, join_decision, new_id


class ClusterIdentity:
    """The cluster id of one broker's store; see the module docstring."""

    def __init__(self, data_dir: DataDir | None, log: Any) -> None:
        self.data_dir = data_dir
        self.log = log
        self._cluster_id = None if data_dir is None else data_dir.cluster_id

    @property
    def cluster_id(self) -> str | None:
        return self._cluster_id

    def _record(self, cluster_id: str) -> None:
        if self.data_dir is not None:
            self.data_dir.set_cluster_id(cluster_id)
        self._cluster_id = cluster_id

    async def promoted(self) -> None:
        """This broker became the primary: a cluster's first primary creates its id (the
        file written in a thread, awaited: durable when this returns, the loop free)."""
        if self._cluster_id is None:
            cluster_id = new_id()
            if self.data_dir is not None:
                await asyncio.to_thread(self.data_dir.set_cluster_id, cluster_id)
            self._cluster_id = cluster_id
            self.log.info("ha_cluster_id_created", cluster_id=cluster_id)

    def check_primary(self, primary_cluster_id: str | None, address: str) -> str | None:
        """The primary at ``address`` announced ``primary_cluster_id``: None to join it
        (adopting its id if this store had none), else why not (naming both ids)."""
        empty = self._cluster_id is None  # a store that joined no cluster holds none of one
        decision = join_decision(
            store_cluster_id=self._cluster_id,
            store_empty=empty,
            primary_cluster_id=primary_cluster_id,
        )
        if isinstance(decision, Adopt):
            previous = self._cluster_id
            self._record(decision.cluster_id)
            self.log.info(
                "ha_cluster_id_adopted",
                cluster_id=decision.cluster_id,
                previous=previous,
                primary=address,
            )
        elif isinstance(decision, RefuseJoin):
            self.log.error(
                "ha_cluster_id_mismatch",
                cluster_id=self._cluster_id,
                primary_cluster_id=primary_cluster_id,
                primary=address,
                reason=decision.reason,
            )
            return decision.reason
        return None

    def server_properties(self) -> dict[str, Any]:
        """What connection.start announces: the cluster id, once there is one."""
        return {} if self._cluster_id is None else {CLUSTER_ID_PROPERTY: self._cluster_id}
