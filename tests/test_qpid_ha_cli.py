"""qpid-ha against a real broker: ping, status, unreachable broker, bad usage."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.broker_process import BrokerProcess, free_port

QPID_HA = str(Path(sys.executable).with_name("qpid-ha"))


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([QPID_HA, *args], capture_output=True, text=True, timeout=30)


def test_ping_and_status(broker: BrokerProcess) -> None:
    address = f"127.0.0.1:{broker.mgmt_port}"
    assert run("-b", address, "ping").returncode == 0
    result = run("-b", address, "status")
    assert result.returncode == 0 and result.stdout.strip() == "standalone"
    assert run("-b", address, "status", "--expect=standalone").returncode == 0
    assert run("-b", address, "status", "--expect=active").returncode == 1
    data = json.loads(run("-b", address, "status", "--json").stdout)
    assert data["ha_state"] == "standalone" and data["amqp_port"] == broker.port


def test_unreachable_broker_is_one_line_and_exit_3() -> None:
    result = run("-b", f"127.0.0.1:{free_port()}", "--timeout", "2", "ping")
    assert result.returncode == 3
    assert result.stderr.count("\n") == 1 and "cannot reach broker" in result.stderr
    assert "Traceback" not in result.stderr


def test_bad_broker_address_is_usage_error() -> None:
    result = run("-b", "host:notaport", "ping")
    assert result.returncode == 2
    assert "notaport" in result.stderr and "Traceback" not in result.stderr
