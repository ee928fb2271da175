"""The sample configurations in deploy/: qpidd.conf, zoo.cfg and the Pacemaker commands."""

from __future__ import annotations

import re
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

from broker.options import parse_options
from common.polling import free_port, poll_until
from tests.broker_process import BrokerProcess
from tests.deploy.conftest import AGENT_SOURCE, DEPLOY, QPID_HA
from tests.security.users import write_users

SEED_BROKERS = "20.0.20.1,20.0.20.2,20.0.20.3"


def test_sample_qpidd_conf_is_a_cluster_member_as_in_seed_001() -> None:
    options = parse_options(["--config", str(DEPLOY / "qpidd.conf")])
    assert options.ha_cluster is True
    assert options.ha_brokers_url == SEED_BROKERS
    assert options.ha_replicate == "all"
    # Backups dial the primary from the other nodes: not guest, who logs in from loopback
    # only (loopback-users, docs/security.md), but a user of the users file.
    loopback_users = {u.strip() for u in options.loopback_users.split(",")}
    assert options.ha_username not in loopback_users, options.ha_username
    assert options.sasl_users == "/etc/qpidd/users"
    # Faster than seed 001's "Slow recovery times" example (heartbeat 5 s): the one set of
    # settings (tests/deploy/test_one_set_of_settings.py).
    assert options.link_maintenance_interval == 0.1
    assert options.link_heartbeat_interval == 1.0
    assert options.data_dir == "/var/lib/qpidd/node1"
    assert options.node_name == "node1"


def test_qpidd_starts_with_the_sample_conf_as_a_joining_backup(tmp_path: Path) -> None:
    """A real broker reads the file; only the machine-specific settings are overridden
    (loopback ports, a temporary data dir, and brokers on loopback instead of 20.0.20.x)."""
    broker = BrokerProcess(tmp_path / "qpidd")
    broker.port = port = free_port()
    users = write_users(tmp_path / "users", {"guest": "guest", "replicator": "CHANGE-ME"})
    broker.args = [
        f"--config={DEPLOY / 'qpidd.conf'}",
        f"--data-dir={tmp_path / 'data'}",
        f"--ha-brokers-url=127.0.0.1:{port}",
        f"--sasl-users={users}",
    ]
    broker.start()
    try:

        def status() -> str:
            result = subprocess.run(
                [str(QPID_HA), "-b", f"127.0.0.1:{broker.mgmt_port}", "status"],
                capture_output=True,
                text=True,
                check=False,
            )
            lines = result.stdout.splitlines()
            return lines[0] if lines else ""  # the state; then link: and store: lines

        assert poll_until(lambda: status() == "joining", 15)
        started = [e for e in broker.events() if e.get("event") == "ha_started"]
        assert started and started[0]["node"] == "node1"
    finally:
        assert broker.stop() == 0


def test_sample_zoo_cfg_is_a_three_server_ensemble() -> None:
    settings: dict[str, str] = {}
    for line in (DEPLOY / "zoo.cfg").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, equals, value = line.partition("=")
            assert equals, line
            assert key not in settings, f"{key} set twice"
            settings[key] = value
    servers = {k: v for k, v in settings.items() if k.startswith("server.")}
    assert sorted(servers) == ["server.1", "server.2", "server.3"]
    for address in servers.values():
        assert re.fullmatch(r"[\w.-]+:\d+:\d+", address), address
    for key in ("tickTime", "initLimit", "syncLimit", "dataDir", "clientPort"):
        assert key in settings
    assert settings["admin.enableServer"] == "false"
    # The agents' sample session timeout (4 s) lies in the range ZooKeeper grants: the
    # min/maxSessionTimeout given, else 2 to 20 ticks.
    tick = int(settings["tickTime"]) / 1000
    low = int(settings.get("minSessionTimeout", 2000 * tick)) / 1000
    high = int(settings.get("maxSessionTimeout", 20000 * tick)) / 1000
    agent_env = (DEPLOY / "systemd" / "agent.env").read_text()
    session = re.search(r"--session-timeout (\S+)", agent_env)
    assert session is not None
    assert low <= float(session.group(1)) <= high
    zk = re.search(r"^QPID_HA_ZK=(.*)$", agent_env, re.MULTILINE)
    assert zk is not None
    hosts = {address.split(":")[0] for address in servers.values()}
    assert {h.split(":")[0] for h in zk.group(1).split(",")} == hosts


def agent_parameters() -> set[str]:
    meta = subprocess.run(
        ["/bin/sh", str(AGENT_SOURCE), "meta-data"], capture_output=True, text=True, check=True
    )
    return {str(p.get("name")) for p in ET.fromstring(meta.stdout).iter("parameter")}


def test_pacemaker_example_uses_the_agent_as_written() -> None:
    text = (DEPLOY / "pacemaker.md").read_text()
    create = re.search(r"pcs resource create qpidd ocf:qpid:qpidd-ha(.*?)\n\n", text, re.DOTALL)
    assert create is not None
    command = create.group(1).replace("\\\n", " ")
    params = command.split(" op ")[0].split()
    names = {p.split("=", 1)[0] for p in params}
    assert names <= agent_parameters(), names - agent_parameters()
    assert f"brokers_url={SEED_BROKERS}" in params
    assert "promotable promoted-max=1" in command and "clone-max=3" in command
    assert "role=Promoted" in command and "role=Unpromoted" in command
    # The virtual IP of seed 001, with the promoted instance, after the promotion.
    assert "ocf:heartbeat:IPaddr2 ip=20.0.20.200" in text
    assert "pcs constraint colocation add qpid-vip with Promoted qpidd-clone INFINITY" in text
    assert "pcs constraint order promote qpidd-clone then start qpid-vip" in text
    assert "stonith-enabled=true" in text


def test_the_docs_qpid_ha_examples_can_log_in_where_they_point() -> None:
    """The management API listens on loopback by default (mgmt-interface=127.0.0.1, as in
    deploy/qpidd.conf) and guest logs in from loopback only (docs/security.md), yet the
    cluster docs checked a cluster with `qpid-ha -b node1:8672 status --all` and stopped it
    with `qpid-ha -b node1:8672,node2:8672,node3:8672 shutdown --all`: refused on a real
    node (node1 is its own address, not loopback), and guest refused off loopback. Every
    example that points at a node by a non-loopback address names a user (not guest), and
    the sample configuration says how to open the API for them."""
    docs = ["README.md", "docs/deploy.md", "docs/store.md", "deploy/pacemaker.md"]
    loopback = ("127.", "localhost", "[::1]")
    for name in docs:
        text = (DEPLOY.parent / name).read_text(encoding="utf-8")
        for match in re.finditer(r"qpid-ha (?:-b|--broker)[ =]([^ `]+)", text):
            for address in match.group(1).split(","):
                credentials, _, host = address.rpartition("@")
                if host.startswith(loopback) or address.isupper():  # loopback, or ADMIN
                    continue
                user = credentials or match.group(1).split(",")[0].rpartition("@")[0]
                assert user and not user.startswith("guest/"), (name, match.group(0))
    conf = (DEPLOY / "qpidd.conf").read_text(encoding="utf-8")
    assert "# mgmt-interface=" in conf
