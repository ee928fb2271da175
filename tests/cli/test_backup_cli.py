"""``qpid-ha backup``'s refusals in process: no broker (exit 3), a broker without a store
(exit 1, the broker's reason), a wrong use (exit 2); one line each, no copy left. And what
backup and restore print about what they copied."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.broker_process import BrokerProcess, free_port
from tests.cli.conftest import address, qpid_ha
from tests.store.store_brokers import PERSISTENT, connect

pytestmark = pytest.mark.xdist_group("cli_brokers")  # one solo and one pair (conftest)


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


def test_backup_and_restore_count_one_queue_and_one_message(tmp_path: Path) -> None:
    """'1 queue, 1 message', not '1 queues, 1 messages'."""
    broker = BrokerProcess(tmp_path / "site", [f"--data-dir={tmp_path / 'site' / 'data'}"])
    try:
        broker.start()
        connection = connect(broker)
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare("orders", durable=True)
        channel.basic_publish("", "orders", b"one", PERSISTENT)
        connection.close()
        result = qpid_ha("-b", address(broker), "backup", "--to", str(tmp_path / "b"))
        assert result.exit_code == 0, result.stderr
    finally:
        broker.stop()
    counts = r": (1 segment|\d+ segments), \d+ bytes, 1 queue, 1 message -> "
    assert re.search(counts, result.stdout), result.stdout
    restored = qpid_ha("restore", str(tmp_path / "b"), "--data-dir", str(tmp_path / "new"))
    assert restored.exit_code == 0, restored.stderr
    assert " (1 queue, 1 message) into " in restored.stdout, restored.stdout
