"""kazoo's logging goes through structlog, rate-limited (issue 15): ``qpid-ha-agent`` with
ZooKeeper down printed kazoo's plain-text lines on stderr, about three a second."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.log import configure_logging, reset_logging
from common.polling import free_port, poll_until
from ha_agent.kazoo_log import KazooLogBridge, route_kazoo_logging

AGENT = str(Path(sys.executable).with_name("qpid-ha-agent"))


def _events(path: Path) -> list[dict[str, object]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture
def log_file(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "agent.log"
    configure_logging(level="debug", fmt="json", file=str(path), node="n1", component="agent")
    yield path
    kazoo = logging.getLogger("kazoo")
    kazoo.handlers.clear()
    kazoo.propagate = True
    kazoo.setLevel(logging.NOTSET)
    reset_logging()


def test_one_event_per_message_per_interval_then_the_count_left_out(log_file: Path) -> None:
    now = [100.0]
    bridge = route_kazoo_logging()
    bridge.clock = lambda: now[0]
    bridge.interval = 30.0
    kazoo = logging.getLogger("kazoo.client")
    for second in range(10):  # ~3 a second, as kazoo with ZooKeeper down
        now[0] = 100.0 + second
        for _ in range(3):
            kazoo.warning("Connection dropped: %s", "socket connection error: Connection refused")
    kazoo.info("Connecting to %s", "127.0.0.1:1")
    now[0] = 131.0
    kazoo.warning("Connection dropped: %s", "socket connection error: Connection refused")
    events = [e for e in _events(log_file) if e["event"] == "zookeeper_client_log"]
    assert [(e["level"], e["suppressed"]) for e in events] == [
        ("warning", 0),
        ("debug", 0),
        ("warning", 29),
    ]
    assert events[0]["message"] == "Connection dropped: socket connection error: Connection refused"
    assert events[0]["logger"] == "kazoo.client" and events[0]["component"] == "agent"
    assert [h for h in logging.getLogger("kazoo").handlers if isinstance(h, KazooLogBridge)] == [
        bridge
    ]


def test_agent_with_zookeeper_down_writes_no_plain_text(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    argv = [
        AGENT,
        f"--zk=127.0.0.1:{free_port()}",
        "--cluster=c",
        "--node=n1",
        "--broker=127.0.0.1:1",
        "--session-timeout=2",
        f"--log-file={log}",
    ]
    with open(tmp_path / "stderr", "wb") as err:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err)
    try:
        # kazoo gives up its first connection round after the session timeout: by then it
        # has logged a refused connection several times.
        poll_until(lambda: any(e["event"] == "zookeeper_unreachable" for e in _events(log)), 20)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
    assert (tmp_path / "stderr").read_text() == ""
    kazoo = [e for e in _events(log) if e["event"] == "zookeeper_client_log"]
    assert kazoo and all(str(e["logger"]).startswith("kazoo") for e in kazoo)
    messages = [e["message"] for e in kazoo]
    assert len(messages) == len(set(messages))  # each once: the rest are counted, not written
