"""Store identity (seed 002): the rules, and the data directory's id files."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.store.data_dir import DataDir, DataDirError, inspect, mark_clean
from broker.store.identity import (
    Adopt,
    Keep,
    RefuseJoin,
    join_decision,
    new_id,
    next_backup_name,
    parse_id,
)
from tests.cli.conftest import qpid_ha
from tests.store.store_brokers import StoreBrokers, status

A, B = new_id(), new_id()


# -- the rules -------------------------------------------------------------------------
def test_a_store_of_the_primarys_cluster_is_kept() -> None:
    decision = join_decision(store_cluster_id=A, store_empty=False, primary_cluster_id=A)
    assert decision == Keep()


def test_a_store_of_no_cluster_adopts_the_primarys() -> None:
    assert join_decision(store_cluster_id=None, store_empty=False, primary_cluster_id=A) == Adopt(A)
    assert join_decision(store_cluster_id=None, store_empty=True, primary_cluster_id=A) == Adopt(A)


def test_an_empty_store_of_another_cluster_adopts_the_primarys() -> None:
    assert join_decision(store_cluster_id=B, store_empty=True, primary_cluster_id=A) == Adopt(A)


def test_a_primary_without_a_cluster_id_is_joined() -> None:
    assert join_decision(store_cluster_id=B, store_empty=False, primary_cluster_id=None) == Keep()


def test_a_store_of_another_cluster_is_refused_naming_both_ids() -> None:
    decision = join_decision(store_cluster_id=B, store_empty=False, primary_cluster_id=A)
    assert isinstance(decision, RefuseJoin)
    assert A in decision.reason and B in decision.reason and "--truncate" in decision.reason


@given(st.lists(st.integers(min_value=1, max_value=12000), max_size=8), st.lists(st.text()))
def test_the_next_backup_is_numbered_above_every_existing_one(
    numbers: list[int], others: list[str]
) -> None:
    names = [f"_cluster.bak.{n:04d}" for n in numbers] + others
    name = next_backup_name(names)
    assert name not in names
    number = int(name.removeprefix("_cluster.bak."))
    assert number == max([n for n in numbers], default=0) + 1
    assert len(name.removeprefix("_cluster.bak.")) >= 4


def test_backup_names_have_four_digits() -> None:
    assert next_backup_name([]) == "_cluster.bak.0001"
    assert next_backup_name(["_cluster.bak.0001", "store"]) == "_cluster.bak.0002"
    assert next_backup_name(["_cluster.bak.0009"]) == "_cluster.bak.0010"


def test_parse_id() -> None:
    assert parse_id(f" {A}\n") == A
    assert parse_id("not an id") is None


# -- the data directory ----------------------------------------------------------------
def test_the_store_id_is_created_once_and_kept(tmp_path: Path) -> None:
    first = DataDir(tmp_path / "d").open()
    store_id = first.store_id
    assert parse_id(store_id) == store_id
    assert (tmp_path / "d" / "store-id").read_text() == f"{store_id}\n"
    first.close()
    again = DataDir(tmp_path / "d").open()
    assert again.store_id == store_id and again.store_status == "clean"
    again.close(clean=False)
    assert not list((tmp_path / "d").glob(".*tmp"))  # written whole, no temporary left


def test_a_bad_id_file_is_refused_naming_it(tmp_path: Path) -> None:
    (tmp_path / "cluster-id").write_text("garbage")
    with pytest.raises(DataDirError, match="cluster-id does not hold an id"):
        DataDir(tmp_path).open()
    DataDir(tmp_path / "x").open().close()  # the lock of the refused open was released


def test_a_clean_all_stop_leaves_its_shutdown_id(tmp_path: Path) -> None:
    data = DataDir(tmp_path).open()
    data.set_cluster_id(A)
    data.closing_shutdown_id = B
    data.close()
    info = inspect(tmp_path)
    assert (info.status, info.cluster_id, info.shutdown_id) == ("clean", A, B)
    again = DataDir(tmp_path).open()
    assert (again.store_status, again.cluster_id, again.shutdown_id) == ("clean", A, B)
    assert inspect(tmp_path).status == "in use"
    assert inspect(tmp_path).in_use_by == os.getpid()
    again.close(clean=False)
    assert inspect(tmp_path).status == "dirty"


def test_move_store_aside_numbers_and_keeps_everything_but_the_lock(tmp_path: Path) -> None:
    data = DataDir(tmp_path).open()
    old_id = data.store_id
    data.set_cluster_id(A)
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "00000000000000000001.seg").write_bytes(b"x" * 10)
    (tmp_path / "ha-epoch").write_text("7\n")
    first = data.move_store_aside("test one")
    assert first == tmp_path / "_cluster.bak.0001"
    assert (first / "store" / "00000000000000000001.seg").read_bytes() == b"x" * 10
    assert (first / "store-id").read_text().strip() == old_id
    assert (first / "cluster-id").read_text().strip() == A
    assert (first / "ha-epoch").exists() and (first / "reason").read_text() == "test one\n"
    assert (tmp_path / "lock").exists()
    assert data.store_id != old_id and data.cluster_id is None and data.store_status == "empty"
    (tmp_path / "ha-epoch").write_text("8\n")
    second = data.move_store_aside("test two", keep_epoch=True)
    assert second == tmp_path / "_cluster.bak.0002"
    assert (first / "reason").read_text() == "test one\n"  # never overwritten
    assert (tmp_path / "ha-epoch").read_text() == "8\n"
    data.close()
    assert inspect(tmp_path).moved_aside == ("_cluster.bak.0001", "_cluster.bak.0002")


def test_mark_clean_refuses_a_store_in_use(tmp_path: Path) -> None:
    data = DataDir(tmp_path).open()
    with pytest.raises(DataDirError, match=f"in use by pid {os.getpid()}"):
        mark_clean(tmp_path)
    data.close(clean=False)
    shutdown_id = mark_clean(tmp_path)
    info = inspect(tmp_path)
    assert (info.status, info.shutdown_id) == ("clean", shutdown_id)


def test_inspect_a_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(DataDirError, match="no data directory"):
        inspect(tmp_path / "nope")
    assert inspect(tmp_path).status == "empty"


# -- a real broker ---------------------------------------------------------------------
def test_the_broker_reports_its_store_id_across_restarts(brokers: StoreBrokers) -> None:
    broker = brokers.start()
    store_id = status(broker)["store_id"]
    assert (brokers.data / "store-id").read_text().strip() == store_id
    assert broker.stop(signal.SIGTERM) == 0
    broker = brokers.start()
    assert status(broker)["store_id"] == store_id


def test_store_status_as_json(tmp_path: Path) -> None:
    data = DataDir(tmp_path).open()
    data.set_cluster_id(A)
    data.move_store_aside("test")
    data.closing_shutdown_id = B
    data.close()
    result = qpid_ha("store", "status", str(tmp_path), "--json")
    assert result.exit_code == 0
    shown = json.loads(result.stdout)
    assert shown["status"] == "clean" and shown["shutdown_id"] == B
    assert shown["cluster_id"] is None and shown["store_id"] == data.store_id
    assert shown["moved_aside"] == ["_cluster.bak.0001"] and shown["in_use_by"] is None
    assert qpid_ha("store", "status", str(tmp_path)).stdout.splitlines()[-1] == (
        "moved aside: _cluster.bak.0001"
    )
