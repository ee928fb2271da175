"""ClusterIdentity: the cluster-id a primary creates and a backup adopts or refuses."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from broker.ha.cluster_identity import ClusterIdentity
from broker.ha.names import CLUSTER_ID_PROPERTY
from broker.store.data_dir import DataDir, inspect
from broker.store.identity import Adopt, Keep, RefuseJoin, join_decision, new_id


class Log:
    def __init__(self) -> None:
        self.lines: list[tuple[str, dict[str, Any]]] = []

    def info(self, event: str, **fields: Any) -> None:
        self.lines.append((event, fields))

    error = info


def test_the_first_primary_creates_the_id_and_keeps_it(tmp_path: Path) -> None:
    data = DataDir(tmp_path).open()
    log = Log()
    identity = ClusterIdentity(data, log)
    assert identity.server_properties() == {}
    asyncio.run(identity.promoted())
    cluster_id = identity.cluster_id
    assert cluster_id and inspect(tmp_path).cluster_id == cluster_id
    asyncio.run(identity.promoted())  # promoted again (a later epoch): the same cluster
    assert identity.cluster_id == cluster_id
    assert identity.server_properties() == {CLUSTER_ID_PROPERTY: cluster_id}
    assert [event for event, _ in log.lines] == ["ha_cluster_id_created"]
    data.close()
    assert ClusterIdentity(DataDir(tmp_path).open(), log).cluster_id == cluster_id


def test_a_backup_adopts_then_refuses_another_cluster(tmp_path: Path) -> None:
    data = DataDir(tmp_path).open()
    log = Log()
    identity = ClusterIdentity(data, log)
    first, other = new_id(), new_id()
    assert identity.check_primary(None, "p:1") is None and identity.cluster_id is None
    assert identity.check_primary(first, "p:1") is None
    assert inspect(tmp_path).cluster_id == first
    assert identity.check_primary(first, "p:1") is None
    refusal = identity.check_primary(other, "q:2")
    assert refusal is not None and first in refusal and other in refusal
    assert identity.cluster_id == first and inspect(tmp_path).cluster_id == first
    assert [event for event, _ in log.lines] == ["ha_cluster_id_adopted", "ha_cluster_id_mismatch"]
    assert log.lines[1][1]["primary"] == "q:2"


def test_without_a_data_dir_the_id_lives_in_memory() -> None:
    identity = ClusterIdentity(None, Log())
    cluster_id = new_id()
    assert identity.check_primary(cluster_id, "p:1") is None
    assert identity.cluster_id == cluster_id


ids = st.one_of(st.none(), st.sampled_from([new_id() for _ in range(3)]))


@given(ids, st.booleans(), ids)
def test_join_decision_refuses_only_a_used_store_of_another_cluster(
    store: str | None, empty: bool, primary: str | None
) -> None:
    decision = join_decision(store_cluster_id=store, store_empty=empty, primary_cluster_id=primary)
    refused = store is not None and primary is not None and store != primary and not empty
    assert isinstance(decision, RefuseJoin) == refused
    if isinstance(decision, Adopt):
        assert decision.cluster_id == primary != store
    if isinstance(decision, Keep):
        assert primary is None or primary == store
