"""Issue 10, item 7: the backups' broken replication links as an early hint.

The rule without I/O (which view publishes a hint, which hints concern a primary), then real
processes on the real ZooKeeper: three brokers started by the test (not supervised by their
agents, so the primary's agent learns of its broker's death only by checking it) and three
agents, the primary's checking every 5 s, the backups' every 0.1 s.

- SIGKILL of the primary broker: the backups' hints make the primary's agent check at once,
  fence and resign: a backup is promoted long before the primary's next regular check.
- SIGKILL of the primary's broker and agent (node loss): the hints are published, nobody
  acts on them, and no backup is promoted before the dead agent's session can have expired.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from common.polling import free_port, poll_until
from ha_agent.broker_check import broker_view
from ha_agent.link_hint import LinkHint, LinkWatch, hint_for, hints_against
from ha_agent.promotion import BrokerView, PrimaryRecord
from tests.agent.agent_cluster import AGENT, Node, read_events
from tests.zookeeper import ZooKeeper

pytestmark = pytest.mark.timeout(120)

SESSION_TIMEOUT = 10.0
PRIMARY_CHECK = 5.0  # the primary's agent checks rarely: only the hint makes it look early
BACKUP_CHECK = 0.1

# -- the rule ---------------------------------------------------------------------------

RECORD = PrimaryRecord("n1", 7, "127.0.0.1:5672")


@pytest.mark.parametrize(
    ("broker", "primary", "hinted"),
    [
        (BrokerView("ready", link_up=False, link_error="connection refused"), RECORD, True),
        (BrokerView("catch-up", link_up=False), RECORD, True),
        (BrokerView("ready", link_up=True), RECORD, False),
        (BrokerView("ready", link_up=None), RECORD, False),  # a broker that does not say
        (BrokerView("joining", link_up=False), RECORD, False),  # never had a link
        (BrokerView("ready", link_up=False), None, False),  # no primary to hint about
        (BrokerView("ready", link_up=False), PrimaryRecord("n2", 7), False),  # itself
        (None, RECORD, False),
    ],
)
def test_which_backup_publishes_a_hint(
    broker: BrokerView | None, primary: PrimaryRecord | None, hinted: bool
) -> None:
    hint = hint_for("n2", broker, primary)
    assert (hint is not None) is hinted
    if hint is not None:
        assert (hint.node, hint.primary, hint.epoch) == ("n2", "n1", 7)
        assert hint.reason == (broker.link_error if broker and broker.link_error else "link down")
        assert LinkHint.from_json(hint.to_json()) == hint


def test_only_a_link_that_was_up_under_the_recorded_primary_is_hinted() -> None:
    watch = LinkWatch()
    down, up = BrokerView("ready", link_up=False), BrokerView("ready", link_up=True)
    assert watch.observe("n3", down, RECORD) is None  # never linked to n1 at epoch 7
    assert watch.observe("n3", up, RECORD) is None
    assert watch.observe("n3", down, RECORD) == LinkHint("n3", "n1", 7, "link down")
    promoted = PrimaryRecord("n2", 8)  # n1 died, n2 promoted: n3 has not linked to it yet
    assert watch.observe("n3", down, promoted) is None
    assert watch.observe("n3", up, promoted) is None
    assert watch.observe("n3", down, promoted) == LinkHint("n3", "n2", 8, "link down")


def test_a_primary_acts_only_on_hints_about_its_own_epoch() -> None:
    hints = [LinkHint("n2", "n1", 7), LinkHint("n3", "n1", 6), LinkHint("n3", "n2", 7)]
    assert hints_against(hints, "n1", 7) == [LinkHint("n2", "n1", 7)]
    assert hints_against(hints, "n1", None) == []  # not promoted: nothing to check early


@pytest.mark.parametrize("data", [b"", b"[]", b'{"version": 2}', b'{"version": 1, "node": 1}'])
def test_a_bad_hint_is_a_value_error(data: bytes) -> None:
    with pytest.raises(ValueError):
        LinkHint.from_json(data)


def test_the_broker_view_reads_a_backups_link() -> None:
    down = broker_view(
        {"ha_state": "ready"},
        {"primary": None, "link_error": {"reason": "connection refused", "count": 3}},
    )
    assert (down.link_up, down.link_error) == (False, "connection refused")
    up = broker_view({"ha_state": "ready"}, {"primary": "10.0.0.1:5672", "link_error": None})
    assert (up.link_up, up.link_error) == (True, "")
    primary = broker_view({"ha_state": "active"}, {"primary": "10.0.0.1:5672"})
    assert primary.link_up is None


# -- real processes ----------------------------------------------------------------------


class HintCluster:
    """Three brokers the test runs and three agents without ``--broker-command``."""

    def __init__(self, root: Path, zookeeper: ZooKeeper, cluster: str) -> None:
        ports = [free_port() for _ in range(3)]
        url = ",".join(f"127.0.0.1:{p}" for p in ports)
        self.nodes = [Node(root, f"n{i + 1}", p, free_port(), url) for i, p in enumerate(ports)]
        self.zk_hosts = zookeeper.hosts
        self.cluster = cluster
        self.brokers: dict[str, subprocess.Popen[bytes]] = {}
        self.agents: dict[str, subprocess.Popen[bytes]] = {}

    def start(self) -> HintCluster:
        for node in self.nodes:
            with open(node.dir / "qpidd.out", "ab") as out:
                self.brokers[node.name] = subprocess.Popen(
                    node.broker_command, stdout=out, stderr=subprocess.STDOUT
                )
        for node in self.nodes:
            # n1 is the most advanced of three equal joining brokers (the name decides)
            check = PRIMARY_CHECK if node.name == "n1" else BACKUP_CHECK
            with open(node.dir / "agent.err", "ab") as err:
                self.agents[node.name] = subprocess.Popen(
                    [
                        AGENT,
                        f"--zk={self.zk_hosts}",
                        f"--cluster={self.cluster}",
                        f"--node={node.name}",
                        f"--broker=guest/guest@127.0.0.1:{node.mgmt_port}",
                        f"--log-file={node.agent_log}",
                        "--cluster-size=3",
                        f"--session-timeout={SESSION_TIMEOUT}",
                        f"--check-interval={check}",
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=err,
                )
        return self

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    def wait_settled(self) -> None:
        def settled() -> bool:
            if sorted(n.state() for n in self.nodes) != ["active", "ready", "ready"]:
                return False
            # both backups in the set the primary's agent wrote (at one of its checks)
            return self.node("n1").in_sync_written() == ["n2", "n3"]

        poll_until(settled, 60, lambda: f"a settled cluster: {[n.state() for n in self.nodes]}")
        assert self.node("n1").state() == "active"

    def stop(self) -> None:
        for process in self.agents.values():
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGTERM)
        for process in self.agents.values():
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)
        for process in self.brokers.values():
            if process.poll() is None:
                process.kill()
            process.wait(timeout=10)


@pytest.fixture
def hint_cluster(tmp_path: Path, zookeeper: ZooKeeper, cluster: str) -> Iterator[HintCluster]:
    started = HintCluster(tmp_path, zookeeper, cluster)
    try:
        yield started.start()
    finally:
        started.stop()


def events(node: Node, name: str) -> list[dict[str, Any]]:
    return [e for e in read_events(node.agent_log) if e["event"] == name]


def new_primary(cluster: HintCluster) -> Node | None:
    return next(
        (n for n in cluster.nodes[1:] if n.state() in ("recovering", "active")),
        None,
    )


def test_the_backups_hint_makes_the_primarys_agent_fence_its_dead_broker_at_once(
    hint_cluster: HintCluster,
) -> None:
    hint_cluster.wait_settled()
    n1 = hint_cluster.node("n1")
    hint_cluster.brokers["n1"].send_signal(signal.SIGKILL)
    killed = time.monotonic()
    poll_until(lambda: new_primary(hint_cluster), 30, "a backup promoted")
    took = time.monotonic() - killed
    received = events(n1, "link_hint_received")
    fenced = events(n1, "agent_fenced")
    assert received, "the primary's agent never heard a hint"
    assert fenced and fenced[-1]["reason"] == "the broker does not answer"
    assert received[0]["ts"] <= fenced[-1]["ts"]
    assert set(received[0]["backups"]) <= {"n2", "n3"}
    # The hint, not the next regular check (every 5 s), found the dead broker.
    assert took < PRIMARY_CHECK, f"a backup was promoted {took:.2f} s after the kill"
    hinted = [n for n in ("n2", "n3") if events(hint_cluster.node(n), "link_hint_published")]
    assert set(received[0]["backups"]) <= set(hinted)
    for name in hinted:  # withdrawn once the new primary is recorded (or the link is up)
        published = events(hint_cluster.node(name), "link_hint_published")
        assert published[0]["primary"] == "n1" and published[0]["primary_epoch"] >= 1
        node = hint_cluster.node(name)
        poll_until(
            lambda node=node: events(node, "link_hint_withdrawn"),  # type: ignore[misc]
            10,
            f"{name}'s agent to withdraw its hint",
        )


def test_hints_do_not_promote_before_a_lost_nodes_session_expires(
    hint_cluster: HintCluster,
) -> None:
    hint_cluster.wait_settled()
    n1 = hint_cluster.node("n1")
    hint_cluster.agents["n1"].send_signal(signal.SIGKILL)
    hint_cluster.brokers["n1"].send_signal(signal.SIGKILL)
    killed = time.monotonic()
    poll_until(
        lambda: all(events(hint_cluster.node(n), "link_hint_published") for n in ("n2", "n3")),
        10,
        "both backups' hints",
    )
    promoted = poll_until(lambda: new_primary(hint_cluster), 60, "a backup promoted")
    took = time.monotonic() - killed
    assert not events(n1, "link_hint_received")
    reason = str(events(promoted, "epoch_taken")[-1]["reason"])
    if "has lapsed" not in reason:  # not by the member lease (issue 26): by the session
        # ZooKeeper heard the dead agent at most a kazoo ping period (T/3) before the kill:
        # its session, and so its leadership, lasted at least T - T/3 after it.
        assert took >= SESSION_TIMEOUT * 2 / 3, f"promoted {took:.2f} s after the node's loss"
    assert promoted.name in ("n2", "n3")
