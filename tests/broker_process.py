"""Start real ``qpidd`` processes on free loopback ports for end-to-end tests."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

QPIDD = str(Path(sys.executable).with_name("qpidd"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(predicate: Any, timeout: float = 10.0, interval: float = 0.02) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"condition not met within {timeout} s: {predicate}")
        time.sleep(interval)


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


@dataclass
class BrokerProcess:
    """A running qpidd; stop() by PID, always."""

    workdir: Path
    args: list[str] = field(default_factory=list)
    port: int = 0
    mgmt_port: int = 0
    proc: subprocess.Popen[bytes] | None = None

    @property
    def log_file(self) -> Path:
        return self.workdir / "qpidd.log"

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"

    def start(self, timeout: float = 15.0) -> BrokerProcess:
        self.port = self.port or free_port()
        self.mgmt_port = self.mgmt_port or free_port()
        cmd = [
            QPIDD,
            "--interface=127.0.0.1",
            f"--port={self.port}",
            "--mgmt-interface=127.0.0.1",
            f"--mgmt-port={self.mgmt_port}",
            f"--log-file={self.log_file}",
            "--log-format=json",
            "--log-level=debug",
            *self.args,
        ]
        self.workdir.mkdir(parents=True, exist_ok=True)
        with open(self.workdir / "stderr", "wb") as stderr:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=stderr)
        deadline = time.monotonic() + timeout
        while not (port_open(self.port) and port_open(self.mgmt_port)):
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"qpidd exited with {self.proc.returncode}: "
                    + (self.workdir / "stderr").read_text()
                )
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("qpidd did not start listening in time")
            time.sleep(0.02)
        return self

    def events(self) -> list[dict[str, Any]]:
        if not self.log_file.exists():
            return []
        events = []
        for line in self.log_file.read_text().splitlines():
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:  # the last line may be half written
                continue
        return events

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> int | None:
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            os.kill(proc.pid, sig)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=timeout)
        return proc.returncode
