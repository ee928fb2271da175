"""Node.js amqplib (npm) against a real qpidd: a confirm channel, an exchange-to-exchange
binding, a priority queue, consume with acks and a direct reply-to RPC
(tests/compat/node/amqplib_client.js). ``make test`` installs Node and the package."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.broker_process import BrokerProcess

NODE_DIR = Path(__file__).resolve().parent / "node"


def test_amqplib_publishes_with_confirms_and_consumes(shared_broker: BrokerProcess) -> None:
    node = shutil.which("node")
    if node is None or not (NODE_DIR / "node_modules" / "amqplib").is_dir():
        pytest.fail("Node.js or amqplib missing: run `make test` (it installs both)")
    url = f"amqp://guest:guest@127.0.0.1:{shared_broker.port}"
    done = subprocess.run(
        [node, str(NODE_DIR / "amqplib_client.js"), url, "20"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    # priorities 1 first (odd numbers), then 0; arrival order within each
    odd = [f"m{i}" for i in range(1, 20, 2)]
    even = [f"m{i}" for i in range(0, 20, 2)]
    assert result["received"] == odd + even
    assert result["reply"] == "PING"
    assert result["server"] == "qpidd"
