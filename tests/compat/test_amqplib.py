"""Node.js amqplib (npm) against a real qpidd: a confirm channel, an exchange-to-exchange
binding, a priority queue, consume with acks and a direct reply-to RPC
(tests/compat/node/amqplib_client.js); a consumer cancelled by its queue's deletion
(tests/compat/node/cancelled_consumer.js). ``make test`` installs Node and the
package."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.broker_process import BrokerProcess
from tests.e2e.conftest import StartBroker

NODE_DIR = Path(__file__).resolve().parent / "node"


def run_node(script: str, broker: BrokerProcess, *args: str) -> Any:
    """What ``script`` printed last (one JSON line), run against ``broker``."""
    node = shutil.which("node")
    if node is None or not (NODE_DIR / "node_modules" / "amqplib").is_dir():
        pytest.fail("Node.js or amqplib missing: run `make test` (it installs both)")
    url = f"amqp://guest:guest@127.0.0.1:{broker.port}"
    done = subprocess.run(
        [node, str(NODE_DIR / script), url, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_amqplib_publishes_with_confirms_and_consumes(shared_broker: BrokerProcess) -> None:
    result = run_node("amqplib_client.js", shared_broker, "20")
    # priorities 1 first (odd numbers), then 0; arrival order within each
    odd = [f"m{i}" for i in range(1, 20, 2)]
    even = [f"m{i}" for i in range(0, 20, 2)]
    assert result["received"] == odd + even
    assert result["reply"] == "PING"
    assert result["server"] == "qpidd"


def test_a_deleted_queue_cancels_its_consumer_with_the_delete_ok(
    start_broker: StartBroker, tmp_path: Path
) -> None:
    """amqplib's "cancelled consumer": basic.cancel went out when the durable queue was
    deleted, delete-ok once the store had the deletion; the suite closes its channel on the
    cancel, amqplib drops the delete-ok that follows its close ("Channel ended, no reply
    will be forthcoming", an unhandled rejection that fails the suite's file). Now the
    cancel, too, waits for the store (and an HA primary's backups), as RabbitMQ 3.10.8
    sends both together."""
    broker = start_broker(f"--data-dir={tmp_path / 'data'}")
    assert run_node("cancelled_consumer.js", broker, "10") == [{"messageCount": 0}] * 10
