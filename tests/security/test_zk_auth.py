"""ZooKeeper digest ACLs for the agent (issue 13, item 5): with ``--zk-auth`` the znodes
the agent's session creates are its user's alone; another digest, or none, is denied.
Real ZooKeeper (the session fixture)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from ha_agent.zk_auth import ZkAuth, ensure_shared_root, parse_zk_auth, zk_security
from tests.zookeeper import ZooKeeper

AGENT = str(Path(sys.executable).with_name("qpid-ha-agent"))


def test_parse_zk_auth(tmp_path: Path) -> None:
    assert parse_zk_auth("agent:s3cret") == ZkAuth("agent", "s3cret")
    assert "s3cret" not in repr(parse_zk_auth("agent:s3cret"))
    secret = tmp_path / "zk-auth"
    secret.write_text("agent:from-file\n")
    assert parse_zk_auth(f"@{secret}") == ZkAuth("agent", "from-file")
    for bad in ("agent", "agent:", ":pw", f"@{tmp_path / 'missing'}"):
        with pytest.raises(ValueError) as info:
            parse_zk_auth(bad)
        assert "pw" not in str(info.value) or bad == ":pw"
    assert zk_security(None) == {}


def test_another_digest_is_denied_on_the_agents_znodes(zookeeper: ZooKeeper, cluster: str) -> None:
    agent = KazooClient(hosts=zookeeper.hosts, **zk_security(ZkAuth("agent", "right")))
    intruder = KazooClient(hosts=zookeeper.hosts, auth_data=[("digest", "agent:wrong")])
    anonymous = KazooClient(hosts=zookeeper.hosts)
    clients = [agent, intruder, anonymous]
    for client in clients:
        client.start(timeout=15)
    try:
        path = f"/qpid-ha/{cluster}/primary"
        ensure_shared_root(agent, ZkAuth("agent", "right"))  # as the agent does at start
        agent.create(path, b"node1", makepath=True)
        assert agent.get(path)[0] == b"node1"
        for client in (intruder, anonymous):
            with pytest.raises(NoAuthError):
                client.get(path)
            with pytest.raises(NoAuthError):
                client.set(path, b"me")
            with pytest.raises(NoAuthError):
                client.create(f"/qpid-ha/{cluster}/x", b"")
        assert agent.get(path)[0] == b"node1"
        # /qpid-ha is every cluster's: another (no credentials) still makes its own there
        anonymous.create(f"/qpid-ha/{cluster}-open/primary", b"n", makepath=True)
        anonymous.delete(f"/qpid-ha/{cluster}-open/primary")  # the root's children stay
    finally:
        for client in clients:
            client.stop()
            client.close()


def test_a_bad_zk_auth_is_one_line_and_exit_2() -> None:
    result = subprocess.run(
        [AGENT, "--zk", "127.0.0.1:1", "--cluster", "c", "--node", "n", "--broker",
         "127.0.0.1:1", "--zk-auth", "no-colon"],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert "--zk-auth: expected USER:PASSWORD" in result.stderr
    assert "Traceback" not in result.stderr


def test_agents_with_zk_auth_settle_and_keep_others_out(
    zookeeper: ZooKeeper, cluster: str, tmp_path: Path
) -> None:
    from ha_agent.primary_record import read_primary
    from tests.agent.agent_cluster import AgentCluster

    agents = AgentCluster(tmp_path, zookeeper.hosts, cluster, size=2)
    agents.zk.stop()
    agents.zk.close()
    agents.zk = KazooClient(hosts=zookeeper.hosts, **zk_security(ZkAuth("agent", "zk-pw")))
    agents.zk.start(timeout=10)
    try:
        agents.start("--zk-auth=agent:zk-pw", session_timeout=6.0)  # slack for a loaded machine
        primary = agents.wait_settled(timeout=90)
        record = agents.primary_record()
        assert record is not None and record.node == primary.name
        outsider = KazooClient(hosts=zookeeper.hosts, auth_data=[("digest", "agent:wrong")])
        outsider.start(timeout=10)
        try:
            with pytest.raises(NoAuthError):
                read_primary(outsider, cluster)
        finally:
            outsider.stop()
            outsider.close()
        for node in agents.nodes:
            assert "zk-pw" not in node.agent_log.read_text()
    finally:
        agents.stop()
