"""``qpid-ha-agent`` stops at once on SIGTERM while ZooKeeper does not answer: it waited for
the rest of kazoo's connection timeout and then for a session grant, about 7 s with the
defaults (a systemd stop or an operator's ctrl-C waited that long for nothing)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from common.polling import free_port, poll_until

AGENT = str(Path(sys.executable).with_name("qpid-ha-agent"))
#: Measured 0.3-0.4 s on 2 cores at load 13 (it was 5-7 s, never under 4 s: the rest of the
#: 4 s connection wait, then the grant's); the deadline leaves room for a loaded machine.
STOP_DEADLINE = 3.0


def test_sigterm_without_zookeeper_exits_at_once(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    argv = [AGENT, f"--zk=127.0.0.1:{free_port()}", "--cluster=c", "--node=n1",
            "--broker=127.0.0.1:1", f"--log-file={log}"]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:

        def events() -> list[str]:
            lines = log.read_text().splitlines() if log.exists() else []
            return [json.loads(line)["event"] for line in lines if line.strip()]

        # agent_started comes after the signal handlers are in place; the first refused
        # connection shows it is waiting for ZooKeeper (session timeout 4 s by default)
        poll_until(lambda: "zookeeper_client_log" in events(), 15, "the agent to try ZooKeeper")
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = poll_until(lambda: proc.poll() is not None, STOP_DEADLINE, "the agent to exit")
        took = time.monotonic() - sent
        assert code and proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
        seen = events()
        assert "agent_stopping" in seen and seen[-1] == "agent_stopped"  # an orderly stop
        assert took < STOP_DEADLINE
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
