"""A qpidd in a network namespace of a :class:`tests.netns.Lan`, for the security tests.

The broker runs as ``ip netns exec NS qpidd ...`` (exec: the PID is the broker's, stopped by
PID); its ports are probed from inside the namespace (:func:`tests.netns.call_in`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common.polling import poll_until, port_open
from tests.broker_process import QPIDD
from tests.netns import Host

PORT = 5672
MGMT_PORT = 8672


@dataclass
class NetnsBroker:
    host: Host
    workdir: Path
    args: list[str]
    proc: subprocess.Popen[bytes] | None = None

    @property
    def log_file(self) -> Path:
        return self.workdir / "qpidd.log"

    def start(self) -> NetnsBroker:
        self.workdir.mkdir(parents=True, exist_ok=True)
        argv = [
            QPIDD,
            f"--port={PORT}",
            f"--mgmt-port={MGMT_PORT}",
            f"--log-file={self.log_file}",
            "--log-level=debug",
            *self.args,
        ]
        with open(self.workdir / "stderr", "wb") as stderr:
            self.proc = subprocess.Popen(
                self.host.exec_argv(argv), stdout=subprocess.DEVNULL, stderr=stderr
            )
        proc = self.proc

        def listening() -> bool:
            if proc.poll() is not None:
                raise RuntimeError((self.workdir / "stderr").read_text())
            return self.host.call(lambda: port_open(PORT) and port_open(MGMT_PORT))

        try:
            poll_until(listening, 15, "qpidd in its namespace to listen")
        except BaseException:
            self.stop()
            raise
        return self

    def events(self) -> list[dict[str, Any]]:
        if not self.log_file.exists():
            return []
        out = []
        for line in self.log_file.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return out

    def stop(self) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
