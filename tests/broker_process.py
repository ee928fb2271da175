"""Start real ``qpidd`` processes on free loopback ports for end-to-end tests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common.polling import PollTimeout, free_port, poll_until

QPIDD = str(Path(sys.executable).with_name("qpidd"))

__all__ = ["QPIDD", "BrokerProcess", "free_port", "wait_until"]


def wait_until(predicate: Any, timeout: float = 10.0, interval: float = 0.02) -> Any:
    """:func:`common.polling.poll_until` with a default timeout of 10 s, for the tests that
    import it from here (new code: call ``poll_until`` itself)."""
    return poll_until(predicate, timeout, interval=interval)


@dataclass
class BrokerProcess:
    """A running qpidd; stop() by PID, always."""

    workdir: Path
    args: list[str] = field(default_factory=list)
    port: int = 0
    mgmt_port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    #: Environment variables added to the broker's (e.g. a test-only format override).
    env: dict[str, str] = field(default_factory=dict)
    #: The qpidd program (a release's, tests/upgrade; default: the tree's).
    program: str = QPIDD

    @property
    def log_file(self) -> Path:
        return self.workdir / "qpidd.log"

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"

    def start(self, timeout: float = 30.0) -> BrokerProcess:
        self.port = self.port or free_port()
        self.mgmt_port = self.mgmt_port or free_port()
        cmd = [
            self.program,
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
        earlier_log = self.log_file.stat().st_size if self.log_file.exists() else 0
        with open(self.workdir / "stderr", "wb") as stderr:
            env = {**os.environ, **self.env} if self.env else None
            self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=stderr, env=env)
        proc = self.proc

        def listening() -> bool:
            # Open ports alone do not say it is this qpidd that listens: another process
            # may hold the management port while qpidd's bind of it is about to fail (a CI
            # run took such a dead broker for started). broker_started comes after both.
            if proc.poll() is None and self._started_logged(earlier_log):
                return True
            if proc.poll() is not None:
                raise RuntimeError(
                    f"qpidd exited with {proc.returncode}: " + (self.workdir / "stderr").read_text()
                )
            return False

        try:
            poll_until(listening, timeout, f"qpidd to listen on {self.port}, {self.mgmt_port}")
        except PollTimeout:
            self.stop()
            raise RuntimeError("qpidd did not start listening in time") from None
        return self

    def _started_logged(self, since: int) -> bool:
        """Whether the log says ``broker_started`` after its first ``since`` bytes (those
        of earlier runs in the same directory)."""
        try:
            with open(self.log_file, "rb") as log:
                log.seek(since)
                return any(b'"event": "broker_started"' in line for line in log)
        except FileNotFoundError:
            return False

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
