"""One set of settings (issue 26): every timing is the same in the built-in defaults,
``deploy/qpidd.conf`` (and ``qpidd-hardened.conf``), ``deploy/zoo.cfg`` and
``deploy/systemd/agent.env``, the demo (``deploy/demo.py``) and the drill (``qpid-ha drill
--nemesis``). The values and why they were chosen: docs/deploy.md, "One set of settings".

The demo's and the drill's command lines are built by their own code (nothing started), and
read back with the broker's own option parser.
"""

from __future__ import annotations

import inspect
import re
import shlex
import sys
from pathlib import Path

from broker.ha.member_lease import LeaseTimes
from broker.options import BrokerOptions, parse_options
from ha_agent.settings import AgentSettings
from qpid_ha_cli.drill.command import drill
from qpid_ha_cli.nemesis.processes import Node, NodeSettings, ZooKeeperServer
from qpid_ha_cli.nemesis.topology import Host
from tests.deploy.conftest import DEPLOY

sys.path.insert(0, str(DEPLOY))
from demo import LocalCluster

#: The broker's timings and the chosen value of each.
BROKER_TIMINGS = {
    "link_heartbeat_interval": 1.0,
    "link_maintenance_interval": 0.1,
    "ha_backup_timeout": 5.0,
    "ha_member_lease": 0.8,
    "ha_clock_drift": 0.01,
}
#: The agent's timings (its options) and the chosen value of each.
AGENT_TIMINGS = {
    "session-timeout": 4.0,
    "check-interval": 0.5,
    "broker-timeout": 2.0,
    "watchdog-timeout": 10.0,
}
#: ZooKeeper's server settings that time a fail-over.
ZOOKEEPER_TIMINGS = {
    "tickTime": "100",
    "minSessionTimeout": "1000",
    "maxSessionTimeout": "60000",
}
#: An ensemble's limits, in ticks: how long a new leader waits for its followers to sync
#: (5 s: a leader's loss costs at most about that, the cluster serving on grants meanwhile)
#: and how far a follower may lag (2.5 s).
ENSEMBLE_TIMINGS = {"initLimit": "50", "syncLimit": "25"}


def broker_timings(options: BrokerOptions) -> dict[str, float]:
    return {name: getattr(options, name) for name in BROKER_TIMINGS}


def agent_timings(argv: list[str]) -> dict[str, float]:
    """The agent's timings in ``argv``, each at its built-in default unless given."""
    defaults = AgentSettings("zk", "c", "n", "b")
    timings = {
        "session-timeout": defaults.session_timeout,
        "check-interval": defaults.check_interval,
        "broker-timeout": defaults.broker_timeout,
        "watchdog-timeout": defaults.watchdog_timeout,
    }
    for arg in argv:
        name, _, value = arg.removeprefix("--").partition("=")
        if name in timings:
            timings[name] = float(value)
    return timings


def zoo_settings(text: str, names: dict[str, str] = ZOOKEEPER_TIMINGS) -> dict[str, str]:
    lines = (line.strip() for line in text.splitlines())
    pairs = (line.partition("=") for line in lines if line and not line.startswith("#"))
    return {key: value for key, _, value in pairs if key in names}


def broker_argv(agent_argv: list[str]) -> list[str]:
    (command,) = [a for a in agent_argv if a.startswith("--broker-command=")]
    return shlex.split(command.removeprefix("--broker-command="))[1:]


def drill_node(tmp_path: Path) -> Node:
    """A node of the drill's cluster, at the drill's default settings (nothing started)."""
    defaults = inspect.signature(drill).parameters
    settings = NodeSettings(
        cluster="drill",
        session_timeout=defaults["session_timeout"].default,
        link_heartbeat_interval=defaults["link_heartbeat_interval"].default,
        brokers_url="10.78.0.1,10.78.0.2,10.78.0.3",
        zk_hosts="10.78.0.251:2181",
    )
    return Node(Host("n1", "qpid-drill-n1", "10.78.0.1"), tmp_path, settings)


def test_the_broker_timings_are_one_set(tmp_path: Path) -> None:
    sources = {
        "built-in defaults": BrokerOptions(),
        "deploy/qpidd.conf": parse_options(["--config", str(DEPLOY / "qpidd.conf")]),
        "deploy/qpidd-hardened.conf": parse_options(
            ["--config", str(DEPLOY / "qpidd-hardened.conf")]
        ),
        "the demo": parse_options(LocalCluster(tmp_path / "demo").broker_command("node1")[1:]),
        "the drill": parse_options(drill_node(tmp_path / "drill").broker_command()[1:]),
    }
    for source, options in sources.items():
        assert broker_timings(options) == BROKER_TIMINGS, source


def test_the_agent_timings_are_one_set(tmp_path: Path) -> None:
    env = (DEPLOY / "systemd" / "agent.env").read_text()
    options = re.search(r"^QPID_HA_AGENT_OPTIONS=(.*)$", env, re.MULTILINE)
    assert options is not None
    demo = LocalCluster(tmp_path / "demo").agent_command("node1")
    sources = {
        "built-in defaults": [],
        "deploy/systemd/agent.env": [
            arg.replace(" ", "=") for arg in re.findall(r"--\S+ \S+", options.group(1))
        ],
        "the demo": demo,
        "the drill": drill_node(tmp_path / "drill").agent_command(),
    }
    for source, argv in sources.items():
        assert agent_timings(argv) == AGENT_TIMINGS, source
    # the agent.env's broker is deploy/qpidd.conf's: checked above; the demo's and the
    # drill's brokers are the ones their agents supervise
    assert parse_options(broker_argv(demo)).link_heartbeat_interval == 1.0


def test_the_zookeeper_timings_are_one_set(tmp_path: Path) -> None:
    zk = [Host(f"zk{i}", f"qpid-drill-zk{i}", f"10.78.0.25{i}") for i in (1, 2, 3)]
    sources = {
        "deploy/zoo.cfg": (DEPLOY / "zoo.cfg").read_text(),
        "the demo": LocalCluster(tmp_path / "demo").zoo_cfg(),
        "the drill's ensemble (zk-loss, zk-server, zk-ensemble)": ZooKeeperServer(
            zk[0], tmp_path / "zk", 1, zk
        ).config(),
    }
    for source, text in sources.items():
        assert zoo_settings(text) == ZOOKEEPER_TIMINGS, source
        assert zoo_settings(text, ENSEMBLE_TIMINGS) == ENSEMBLE_TIMINGS, source
    alone = ZooKeeperServer(zk[0], tmp_path / "zk1", 1).config()  # the other nemeses' one
    assert zoo_settings(alone) == ZOOKEEPER_TIMINGS, "the drill's single server"
    # the agents' session timeout lies within what the servers grant
    low = int(ZOOKEEPER_TIMINGS["minSessionTimeout"]) / 1000
    high = int(ZOOKEEPER_TIMINGS["maxSessionTimeout"]) / 1000
    assert low <= AGENT_TIMINGS["session-timeout"] <= high


def test_a_lost_backup_never_closes_the_primarys_clients() -> None:
    """Why the close grace is twice the link heartbeat and two maintenance intervals: a
    backup lost without a FIN lets its member-lease grant (0.8 s) lapse before its link is
    found dead (twice the heartbeat); the primary holds its output meanwhile, and closes its
    clients only if it still does not serve once that backup is known to be leaving."""
    options = BrokerOptions()
    found_dead = 2 * options.link_heartbeat_interval + options.link_maintenance_interval
    broker = LeaseTimes.for_links(
        options.ha_member_lease,
        options.ha_clock_drift,
        options.link_heartbeat_interval,
        options.link_maintenance_interval,
    )
    assert broker.close_after > found_dead
    assert broker.close_after >= broker.interval
