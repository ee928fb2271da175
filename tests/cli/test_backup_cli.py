"""``qpid-ha backup``'s refusals in process: no broker (exit 3), a broker without a store
(exit 1, the broker's reason), a wrong use (exit 2); one line each, no copy left."""

from __future__ import annotations

from pathlib import Path

from tests.broker_process import BrokerProcess, free_port
from tests.cli.conftest import address, qpid_ha


def test_backup_refusals_are_one_line(solo: BrokerProcess, tmp_path: Path) -> None:
    target = str(tmp_path / "b")
    unreachable = qpid_ha("-b", f"127.0.0.1:{free_port()}", "backup", "--to", target)
    assert unreachable.exit_code == 3, unreachable.stderr
    no_store = qpid_ha("-b", address(solo), "backup", "--to", target)
    assert no_store.exit_code == 1, no_store.stderr
    assert "this broker has no store (no --data-dir)" in no_store.stderr
    missing = qpid_ha("-b", address(solo), "backup")
    assert missing.exit_code == 2 and "--to" in missing.stderr
    for result in (unreachable, no_store, missing):
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert not (tmp_path / "b" / "manifest.json").exists()
