"""Issue 10, item 7: the agent counts the session timeout ZooKeeper granted, not the one it
asked for, and refuses to run with a grant far from its ``--session-timeout``.

Real ZooKeeper servers whose ``minSessionTimeout``/``maxSessionTimeout`` are narrowed, a real
kazoo client, the agent in this process and as a process (``qpid-ha-agent``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from common.polling import free_port, poll_until
from ha_agent.agent import Agent
from ha_agent.fencing import SessionGuard
from ha_agent.session_grant import GRANT_TOLERANCE, GrantProbe, judge_grant
from ha_agent.settings import AgentSettings
from tests.agent.conftest import FAST_RECONNECT
from tests.zookeeper import ZooKeeperProcess, session_timeout_ms

pytestmark = pytest.mark.timeout(90)

AGENT = Path(sys.executable).parent / "qpid-ha-agent"


@pytest.fixture
def narrow_zookeeper(tmp_path: Path) -> Iterator[ZooKeeperProcess]:
    """A server granting 1.5 to 3 s whatever is asked."""
    server = ZooKeeperProcess(tmp_path / "zk", min_session_ms=1500, max_session_ms=3000)
    server.start()
    try:
        yield server
    finally:
        server.stop()


# -- the rule ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("requested", "granted", "refused"),
    [
        (1.0, 1.0, False),
        (4.0, 3.0, False),  # within the tolerance: run, counting 3 s
        (2.0, 3.0, False),
        (1.0, 2.0, True),  # fail-over twice as slow as set
        (4.0, 20.0, True),
        (10.0, 4.0, True),  # a pause of 4 s fails over
    ],
)
def test_a_grant_far_from_the_request_is_refused(
    requested: float, granted: float, refused: bool
) -> None:
    judgement = judge_grant(requested, granted)
    assert bool(judgement.refusal) is refused
    assert judgement.timeout == granted
    if refused:
        assert f"{granted:g} s" in judgement.refusal
        assert f"--session-timeout {requested:g}" in judgement.refusal
    ratio = granted / requested
    assert refused is not (1 / GRANT_TOLERANCE <= ratio <= GRANT_TOLERANCE)


def test_bad_timeouts_are_value_errors() -> None:
    with pytest.raises(ValueError, match="positive"):
        judge_grant(0, 1.0)


def test_a_new_grant_retimes_the_guard_and_its_lease() -> None:
    guard = SessionGuard(4.0)
    guard.contact(100.0)
    assert guard.deadline == pytest.approx(103.6)
    guard.retime(2.0)  # a new session on another server granted 2 s
    assert guard.session_timeout == 2.0
    assert guard.margin == pytest.approx(0.2)
    assert guard.deadline == pytest.approx(101.8)
    assert guard.poll(101.9) is not None


# -- the probe against a real server ------------------------------------------------------


@pytest.mark.parametrize(("asked", "expected"), [(1.0, 1.5), (2.0, 2.0), (8.0, 3.0)])
def test_the_probe_reads_what_the_server_granted(
    narrow_zookeeper: ZooKeeperProcess, asked: float, expected: float
) -> None:
    client = KazooClient(
        hosts=narrow_zookeeper.hosts, timeout=asked, connection_retry=dict(FAST_RECONNECT)
    )
    seen: list[float] = []
    probe = GrantProbe(client, on_grant=seen.append)
    try:
        client.start(timeout=10)
        assert probe.granted == expected
        assert seen == [expected]  # before start() returned: before CONNECTED was reported
        server = session_timeout_ms("127.0.0.1", narrow_zookeeper.client_port, client.client_id[0])
        assert server == expected * 1000
    finally:
        client.stop()
        client.close()


def test_a_client_without_a_connection_handler_is_refused() -> None:
    with pytest.raises(TypeError, match="session timeout"):
        GrantProbe(object())


# -- the agent ------------------------------------------------------------------------------


def settings(zookeeper: ZooKeeperProcess, session_timeout: float) -> AgentSettings:
    return AgentSettings(
        zk_hosts=zookeeper.hosts,
        cluster="grant",
        node="n1",
        broker=f"guest/guest@127.0.0.1:{free_port()}",  # no broker: the loop sees none
        session_timeout=session_timeout,
        check_interval=0.1,
    )


def test_the_agent_counts_the_granted_timeout(narrow_zookeeper: ZooKeeperProcess) -> None:
    agent = Agent(settings(narrow_zookeeper, 4.0))  # granted 3 s: within the tolerance
    thread = threading.Thread(target=agent.run, name="agent-under-test")
    thread.start()
    try:
        watcher = poll_until(lambda: agent.watcher, 20, "the session watcher")
        assert agent.granted_timeout == 3.0
        assert watcher.guard.session_timeout == 3.0
        assert watcher.guard.margin == pytest.approx(0.3)
        assert watcher.heartbeat == pytest.approx(1.2)
        assert agent.session_timeout == 3.0
        assert agent.promoter is not None and agent.promoter.guard is watcher.guard
    finally:
        agent.stop()
        thread.join(20)
    assert not thread.is_alive()
    assert agent.refusal == ""


def test_the_agent_refuses_a_grant_far_from_its_setting(
    narrow_zookeeper: ZooKeeperProcess, tmp_path: Path
) -> None:
    """``--session-timeout 8`` against a server granting at most 3 s: exit 2, one line
    naming both values and the setting to change, no traceback; the log says it too."""
    log = tmp_path / "agent.log"
    result = subprocess.run(
        [
            str(AGENT),
            f"--zk={narrow_zookeeper.hosts}",
            "--cluster=grant",
            "--node=n1",
            f"--broker=guest/guest@127.0.0.1:{free_port()}",
            "--session-timeout=8",
            f"--log-file={log}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("qpid-ha-agent: error: ZooKeeper granted a 3 s session")
    assert "--session-timeout 8" in lines[0] and "maxSessionTimeout" in lines[0]
    events = [json.loads(line) for line in log.read_text().splitlines()]
    refused = [e for e in events if e["event"] == "zookeeper_session_refused"]
    assert refused and refused[0]["requested"] == 8.0 and refused[0]["granted"] == 3.0
    assert "agent_stopped" in [e["event"] for e in events]
