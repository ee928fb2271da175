"""Real qpidd processes on one data directory, started again and again (store tests).

:class:`StoreBrokers` starts each run in its own work directory (its own log file) on the
same ``--data-dir``, and stops every process it started, by PID, at the end of the test.
"""

from __future__ import annotations

import json
import signal
import subprocess
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pika

from tests.broker_process import QPIDD, BrokerProcess

PERSISTENT = pika.BasicProperties(delivery_mode=2)
TRANSIENT = pika.BasicProperties(delivery_mode=1)


@dataclass
class StoreBrokers:
    """The brokers of one test, all on ``data`` (see the module docstring)."""

    root: Path
    args: list[str] = field(default_factory=list)
    started: list[BrokerProcess] = field(default_factory=list)

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def store(self) -> Path:
        return self.data / "store"

    def start(self, *extra: str) -> BrokerProcess:
        run = len(self.started) + 1
        broker = BrokerProcess(
            self.root / f"run{run}", [f"--data-dir={self.data}", *self.args, *extra]
        )
        self.started.append(broker)
        return broker.start()

    def fail_to_start(self, *extra: str, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        """Run qpidd on the data directory expecting it to exit by itself."""
        return subprocess.run(
            [
                QPIDD,
                "--interface=127.0.0.1",
                "--port=0",
                "--mgmt-port=0",
                "--log-format=json",
                f"--log-file={self.root / 'refused.log'}",
                f"--data-dir={self.data}",
                *self.args,
                *extra,
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def stop_all(self) -> None:
        for broker in self.started:
            broker.stop(signal.SIGKILL)

    def segments(self) -> list[Path]:
        return sorted(self.store.glob("*.seg"))


def status(broker: BrokerProcess) -> dict[str, Any]:
    url = f"http://127.0.0.1:{broker.mgmt_port}/api/status"
    with urllib.request.urlopen(url, timeout=10) as response:
        result: dict[str, Any] = json.load(response)
    return result


def connect(broker: BrokerProcess) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.URLParameters(broker.url))


def drain(channel: Any, queue: str) -> list[tuple[bytes, bool, Any]]:
    """Take every message of ``queue`` (auto-ack): (body, redelivered, properties)."""
    taken: list[tuple[bytes, bool, Any]] = []
    while True:
        method, properties, body = channel.basic_get(queue, auto_ack=True)
        if method is None:
            return taken
        taken.append((body, bool(method.redelivered), properties))


def events(broker: BrokerProcess, name: str) -> list[dict[str, Any]]:
    return [e for e in broker.events() if e.get("event") == name]
