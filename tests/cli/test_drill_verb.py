"""``qpid-ha drill`` in process (the subprocess runs are in tests/drill): a short run
against a real broker, and no broker reachable."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.broker_process import BrokerProcess, free_port
from tests.cli.conftest import qpid_ha

pytestmark = pytest.mark.xdist_group("cli_brokers")  # one solo and one pair (conftest)


def test_drill_counts_every_message(solo: BrokerProcess, tmp_path: Path) -> None:
    log = tmp_path / "drill.log"
    result = qpid_ha(
        "drill", f"--url=127.0.0.1:{solo.port}", "--count=50", "--rate=0", f"--log-file={log}"
    )
    assert (result.exit_code, result.stderr) == (0, ""), result.stderr
    assert result.stdout.startswith("drill OK: sent 50, confirmed 50, received 50, lost 0, ")
    assert json.loads(log.read_text().splitlines()[-1])["event"] == "drill_finished"


def test_drill_with_no_broker_is_one_line_and_exit_3(tmp_path: Path) -> None:
    result = qpid_ha(
        "drill",
        f"--url=127.0.0.1:{free_port()}",
        "--connect-timeout=0.3",
        f"--log-file={tmp_path / 'drill.log'}",
    )
    assert (result.exit_code, result.stdout) == (3, "")
    assert result.stderr.startswith("qpid-ha drill: error: no broker of amqp:tcp:127.0.0.1:")
    assert result.stderr.count("\n") == 1


def test_drill_that_never_connected_before_its_duration_ended_is_exit_3(tmp_path: Path) -> None:
    """Issue 15: ``--duration`` shorter than ``--connect-timeout`` with nothing listening
    printed "drill OK: sent 0" and exited 0."""
    port = free_port()
    result = qpid_ha(
        "drill",
        f"--url=amqp:guest/guest@127.0.0.1:{port}",
        "--duration=0.5",
        f"--log-file={tmp_path / 'drill.log'}",
    )
    assert (result.exit_code, result.stdout) == (3, "")
    assert result.stderr.startswith(
        f"qpid-ha drill: error: no broker of amqp:guest/***@tcp:127.0.0.1:{port}"
    )
    assert "refused" in result.stderr.lower() and result.stderr.count("\n") == 1
    events = [
        json.loads(line)["event"] for line in (tmp_path / "drill.log").read_text().splitlines()
    ]
    assert events[-1] == "drill_unreachable"
