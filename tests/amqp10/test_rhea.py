"""node's rhea (npm, an AMQP 1.0 client) against a real broker: a sender whose durable
messages are each accepted, a receiver that gets them back with their application
properties and accepts them (tests/compat/node/rhea_client.js). ``make test`` installs
Node.js (Debian's ``nodejs``) and rhea (tests/compat/node/package-lock.json, through
deploy/node_lock_install.py), as for amqplib."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.amqp10.helpers import declare
from tests.broker_process import BrokerProcess

NODE_DIR = Path(__file__).resolve().parents[1] / "compat" / "node"
N = 20


def test_rhea_sends_and_receives(broker: BrokerProcess) -> None:
    node = shutil.which("node")
    if node is None or not (NODE_DIR / "node_modules" / "rhea").is_dir():
        pytest.fail("Node.js or rhea missing: run `make test` (it installs both)")
    declare(broker, "rhea-q")
    done = subprocess.run(
        [node, str(NODE_DIR / "rhea_client.js"), "127.0.0.1", str(broker.port), "rhea-q", str(N)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["accepted"] == N and result["product"] == "qpidd"
    assert result["received"] == [
        {
            "body": f"r{i}",
            "colour": "red" if i % 2 else "blue",
            "durable": True,
            "delivery_count": 0,
        }
        for i in range(N)
    ]
