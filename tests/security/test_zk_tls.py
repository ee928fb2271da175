"""TLS to ZooKeeper and ``qpid-ha --zk`` with the agents' digest (issue 13, item 5).

A real ZooKeeper (the Debian package, 3.8) serving TLS on its secureClientPort (Netty, PEM
key store) beside its plain port: an agent and its broker settle over TLS with digest ACLs;
``qpid-ha --zk`` reads that cluster over TLS with the agents' ``--zk-auth``, is denied
without it (exit 3, one line) and refuses a bad value (exit 2); a CA that did not sign
ZooKeeper's certificate, or TLS to the plain port, is one line naming the reason."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from broker.management.console.agents_view import AgentsView, cluster_paths, zk_access
from broker.options import parse_options
from ha_agent.zk_auth import ZkAuth, ensure_shared_root, zk_security
from tests.agent.agent_cluster import AgentCluster
from tests.security.certs import Certs, make_certs
from tests.zookeeper import ZOOKEEPER_JAR, ZooKeeperProcess

BIN = Path(sys.executable).parent
AGENT, QPID_HA = str(BIN / "qpid-ha-agent"), str(BIN / "qpid-ha")

pytestmark = pytest.mark.skipif(not ZOOKEEPER_JAR.exists(), reason="needs the zookeeper package")


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def tls_zookeeper(
    tmp_path_factory: pytest.TempPathFactory, certs: Certs
) -> Iterator[ZooKeeperProcess]:
    workdir = tmp_path_factory.mktemp("zk-tls")
    bundle = workdir / "server-key-and-cert.pem"  # ZooKeeper's PEM key store: key, then chain
    bundle.write_bytes(certs.server[1].read_bytes() + certs.server[0].read_bytes())
    server = ZooKeeperProcess(workdir, tls_key_and_cert=bundle, tls_ca=certs.ca.cert).start()
    try:
        yield server
    finally:
        server.stop()


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)


def test_wrong_ca_or_plain_port_is_one_line(tls_zookeeper: ZooKeeperProcess, certs: Certs) -> None:
    agent = [AGENT, "--cluster", "c", "--node", "n", "--broker", "127.0.0.1:1"]
    wrong_ca = run(*agent, "--zk", tls_zookeeper.secure_hosts,
                   f"--zk-ssl-ca-file={certs.other_ca.cert}")  # fmt: skip
    assert wrong_ca.returncode == 2, wrong_ca.stderr
    assert wrong_ca.stderr.strip() == (
        f"qpid-ha-agent: error: ZooKeeper {tls_zookeeper.secure_hosts}: TLS: certificate"
        " verify failed: unable to get local issuer certificate"
    )
    plain = run(*agent, "--zk", tls_zookeeper.hosts, f"--zk-ssl-ca-file={certs.ca.cert}")
    assert plain.returncode == 2 and "is it ZooKeeper's secureClientPort?" in plain.stderr
    missing = run(*agent, "--zk", tls_zookeeper.secure_hosts, "--zk-ssl-ca-file=/nonexistent")
    assert missing.returncode == 2
    assert missing.stderr.strip().endswith("--zk-ssl-ca-file: no such file '/nonexistent'")
    for result in (wrong_ca, plain, missing):
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_agent_over_tls_and_qpid_ha_with_the_digest(
    tls_zookeeper: ZooKeeperProcess, certs: Certs, tmp_path: Path
) -> None:
    cluster = f"t-{uuid.uuid4().hex[:12]}"
    agents = AgentCluster(tmp_path, tls_zookeeper.hosts, cluster, size=1)  # observer: plain
    agents.zk_hosts = tls_zookeeper.secure_hosts  # the agent: TLS only
    agents.zk.stop()
    agents.zk.close()
    agents.zk = KazooClient(hosts=tls_zookeeper.hosts, **zk_security(ZkAuth("agent", "zk-pw")))
    agents.zk.start(timeout=10)
    ca = f"--zk-ssl-ca-file={certs.ca.cert}"
    try:
        agents.start("--zk-auth=agent:zk-pw", ca, session_timeout=6.0)
        primary = agents.wait_settled(timeout=60)
        started = [e for e in primary.agent_events() if e["event"] == "agent_started"]
        assert started and started[0]["zk"] == tls_zookeeper.secure_hosts

        zk = ("--zk", tls_zookeeper.secure_hosts, "--cluster", cluster)
        status = run(QPID_HA, *zk, ca, "--zk-auth=agent:zk-pw", "status", "--all")
        assert status.returncode == 0, status.stderr
        assert primary.name in status.stdout and "active" in status.stdout

        denied = run(QPID_HA, *zk, ca, "status", "--all")
        assert denied.returncode == 3
        assert denied.stderr.strip() == (
            f"qpid-ha: error: ZooKeeper at {tls_zookeeper.secure_hosts} denied reading cluster"
            f" {cluster!r} to no credentials (NoAuth): give the agents' --zk-auth"
        )
        other = run(QPID_HA, *zk, ca, "--zk-auth=agent:wrong", "status", "--all")
        assert other.returncode == 3 and "to user 'agent' (NoAuth)" in other.stderr
        assert "wrong" not in other.stderr.replace("to user 'agent'", "")

        bad = run(QPID_HA, *zk, ca, "--zk-auth=no-colon", "status", "--all")
        assert bad.returncode == 2 and "expected USER:PASSWORD" in bad.stderr
        wrong_ca = run(QPID_HA, *zk, f"--zk-ssl-ca-file={certs.other_ca.cert}",
                       "--zk-auth=agent:zk-pw", "status", "--all")  # fmt: skip
        assert wrong_ca.returncode == 3 and "certificate verify failed" in wrong_ca.stderr
        for result in (denied, other, bad, wrong_ca):
            assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert "zk-pw" not in primary.agent_log.read_text()
    finally:
        agents.stop()


def test_the_web_consoles_view_over_tls_with_the_digest(
    tls_zookeeper: ZooKeeperProcess, certs: Certs
) -> None:
    """The broker's console reads the agents' znodes as ``qpid-ha --zk`` does: over TLS
    with ``--console-zk-ssl-ca-file``, with the agents' digest (``--console-zk-auth``);
    NoAuth without it, one line for a CA that did not sign ZooKeeper's certificate."""
    cluster = f"v-{uuid.uuid4().hex[:12]}"
    paths = cluster_paths(cluster)
    digest = ZkAuth("agent", "zk-pw")
    writer = KazooClient(hosts=tls_zookeeper.hosts, **zk_security(digest))
    writer.start(timeout=10)
    try:
        ensure_shared_root(writer, digest)
        member = b'{"ha_state": "active", "epoch": 4}'
        writer.create(f"{paths['members']}/n1", member, makepath=True)
        writer.create(paths["primary"], b'{"node": "n1", "epoch": 4}')
    finally:
        writer.stop()
        writer.close()

    def read(*options: str, timeout: float = 5.0) -> dict[str, Any]:
        access = zk_access(parse_options(options))
        view = AgentsView(tls_zookeeper.secure_hosts, cluster, timeout=timeout, access=access)
        try:
            asyncio.run(view.refresh())
        finally:
            view.close()
        assert view.view is not None
        return view.view

    ca = f"--console-zk-ssl-ca-file={certs.ca.cert}"
    good = read(ca, "--console-zk-auth=agent:zk-pw")
    assert good["error"] is None and good["primary"] == "n1" and good["members"][0]["epoch"] == 4
    assert read(ca)["error"] == (  # the cluster's znodes are the agents' alone
        f"ZooKeeper denied reading cluster {cluster!r} to no credentials (NoAuth): give the"
        " agents' --zk-auth as console-zk-auth"
    )
    other = read(ca, "--console-zk-auth=agent:wrong")["error"]
    assert "to user 'agent' (NoAuth)" in other and "wrong" not in other
    other_ca = f"--console-zk-ssl-ca-file={certs.other_ca.cert}"
    wrong = read(other_ca, "--console-zk-auth=agent:zk-pw", timeout=1.0)  # kazoo: a timeout
    assert wrong["error"] == (
        f"ZooKeeper {tls_zookeeper.secure_hosts}: TLS: certificate verify failed: unable to"
        " get local issuer certificate"
    )
