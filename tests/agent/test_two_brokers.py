"""Two-broker clusters (issue 12, item 5) with real agents, brokers and ZooKeeper.

- On one ZooKeeper server: SIGKILL of the primary broker fails over to the other with no
  confirmed message lost (a confirming publisher on the URL list); then ``qpid-ha shutdown
  --all`` stops both brokers for good (exit 4: the agents restart nothing and stop, exit 0),
  leaving clean stores with one shutdown-id, both still in the in-sync set; the operator
  starts the old backup's agent first and alone, and every confirmed message is there.
- On a 3-server ensemble: the same fail-over; ``--designated-primary`` refused while the
  other broker answers as primary; the ensemble loses its quorum (2 servers killed), the
  primary serves on its backup's grant (issue 26, item 2), its node is lost; the
  survivor, designated primary by the operator, serves again with every confirmed
  message, and says so loudly; its broker SIGKILLed and started again, the designated
  agent promotes it again from its store.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.store.data_dir import inspect
from common.polling import poll_until
from ha_agent.in_sync import read_in_sync
from tests.agent.agent_cluster import AGENT, AgentCluster, Node, read_events
from tests.agent.test_agent_failover import Publisher, drain
from tests.cli.conftest import qpid_ha
from tests.zookeeper import ZooKeeper, ZooKeeperEnsemble

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def pair(tmp_path: Path, zookeeper: ZooKeeper, cluster: str) -> Iterator[AgentCluster]:
    """Two nodes (agent + supervised broker) on the session's ZooKeeper, not started."""
    agents = AgentCluster(tmp_path / "cluster", zookeeper.hosts, cluster, size=2)
    try:
        yield agents
    finally:
        agents.stop()


@pytest.fixture
def ensemble_pair(
    tmp_path: Path, ensemble: ZooKeeperEnsemble, cluster: str
) -> Iterator[AgentCluster]:
    """Two nodes on a 3-server ensemble of their own, not started."""
    agents = AgentCluster(tmp_path / "cluster", ensemble.hosts, cluster, size=2)
    try:
        yield agents
    finally:
        agents.stop()


def fail_over_by_sigkill(agents: AgentCluster, publisher: Publisher) -> Node:
    """SIGKILL the primary broker while publishing; the new primary (the other node)."""
    old = agents.wait_settled()
    publisher.publish(200)
    os.kill(old.broker_pid(), signal.SIGKILL)
    publisher.publish(200)  # through the fail-over: the URL list finds the new primary
    new = agents.wait_settled()  # the killed broker is back, a ready backup in the set
    assert new is not old
    return new


def test_two_brokers_fail_over_then_shut_down_for_good_and_restart_with_every_message(
    pair: AgentCluster,
) -> None:
    pair.start()
    publisher = Publisher(pair.amqp_ports, "orders")
    primary = fail_over_by_sigkill(pair, publisher)
    publisher.close()
    assert len(publisher.confirmed) == 400

    # qpid-ha shutdown --all: the brokers exit 4 and their agents restart nothing
    before = {n.name: len(n.agent_events()) for n in pair.nodes}
    members = ",".join(f"127.0.0.1:{n.mgmt_port}" for n in pair.nodes)
    result = qpid_ha("-b", members, "shutdown", "--all", "--timeout", "20")
    assert result.exit_code == 0, result.stdout + result.stderr
    shutdown_id = result.stdout.splitlines()[0].removeprefix("shutdown-id ")
    for node in pair.nodes:
        assert node.agent is not None
        assert node.agent.wait(20) == 0  # the agent stops too, cleanly
        events = [e["event"] for e in node.agent_events()[before[node.name] :]]
        assert "agent_cluster_shut_down" in events, events
        assert "broker_process_shut_down" in events
        # neither fenced (a SIGKILL would leave the store dirty) nor restarted
        assert not {"agent_fenced", "broker_killed", "broker_process_started"} & set(events)
        assert node.state() == "down"
    infos = [inspect(n.dir / "data") for n in pair.nodes]
    assert {(i.status, i.shutdown_id) for i in infos} == {("clean", shutdown_id)}

    # the in-sync set still names both stores: either may be the first primary again
    recorded = read_in_sync(pair.zk, pair.cluster)
    assert recorded is not None and recorded.record.store_ids == {i.store_id for i in infos}

    # the operator starts the agents again, the old backup first and alone: its clean store
    # holds every message, so it needs nobody else (--cluster-size=1)
    first = next(n for n in pair.nodes if n is not primary)
    for node in (first, primary):
        node.start_agent(
            pair.zk_hosts, pair.cluster, "--cluster-size=1", "--session-timeout=2",
            "--check-interval=0.1",
        )  # fmt: skip
        if node is first:
            poll_until(lambda: first.state() == "active", 60, "the old backup promoted")
    assert pair.wait_settled(60) is first
    received = drain(pair.amqp_ports, "orders")
    lost = publisher.confirmed - set(received)
    assert not lost, f"confirmed messages lost: {sorted(lost)[:10]}"


def kill_node(node: Node) -> None:
    """Lose ``node`` whole: its agent (frozen first, so it restarts nothing) and its broker."""
    assert node.agent is not None
    node.status()  # note the broker's pid
    os.kill(node.agent.pid, signal.SIGSTOP)
    children: set[int] = set()
    for task in Path(f"/proc/{node.agent.pid}/task").iterdir():
        with contextlib.suppress(OSError):
            children |= {int(p) for p in (task / "children").read_text().split()}
    node.agent.kill()
    node.agent.wait(5)
    for pid in children | node.broker_pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def designate(node: Node, peer: Node, zk_hosts: str, cluster: str) -> subprocess.Popen[bytes]:
    """``qpid-ha-agent --designated-primary`` for ``node``'s running broker."""
    return subprocess.Popen(
        [
            AGENT,
            f"--zk={zk_hosts}",
            f"--cluster={cluster}",
            f"--node={node.name}",
            f"--broker=guest/guest@127.0.0.1:{node.mgmt_port}",
            "--session-timeout=2",
            "--check-interval=0.1",
            "--designated-primary",
            f"--peer=guest/guest@127.0.0.1:{peer.mgmt_port}",
            f"--log-file={node.dir / 'designated.log'}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def test_two_brokers_on_an_ensemble_and_a_designated_primary_without_quorum(
    ensemble_pair: AgentCluster, ensemble: ZooKeeperEnsemble, tmp_path: Path
) -> None:
    agents = ensemble_pair
    agents.start()
    publisher = Publisher(agents.amqp_ports, "orders")
    primary = fail_over_by_sigkill(agents, publisher)
    publisher.close()
    survivor = next(n for n in agents.nodes if n is not primary)
    log = survivor.dir / "designated.log"

    # refused while the other broker answers as primary: one line, exit 1, nothing changed
    refused = designate(survivor, primary, agents.zk_hosts, agents.cluster)
    _out, err = refused.communicate(timeout=30)
    assert refused.returncode == 1
    assert err.decode().count("\n") == 1 and "answers as primary (active" in err.decode()
    assert [e["event"] for e in read_events(log)][-3:] == [
        "designated_primary_refused", "agent_stopping", "agent_stopped",
    ]  # fmt: skip
    assert survivor.state() == "ready" and primary.state() == "active"

    # no quorum: two of the three servers die; the primary serves on its backup's grant
    # (issue 26, item 2: its agent stops renewing, its lease runs out) until its node is
    # lost; nothing can be promoted through ZooKeeper
    for server in ensemble.servers[:2]:
        ensemble.kill(server)
    poll_until(
        lambda: [e for e in primary.broker_events() if e["event"] == "ha_serving_on_grants"],
        30,
        "the primary on its backup's grant",
    )
    assert primary.state() == "active"
    kill_node(primary)
    assert survivor.agent is not None
    survivor.agent.kill()  # the operator replaces the agent; the broker runs on
    survivor.agent.wait(5)
    assert survivor.state() == "ready"

    designated = designate(survivor, primary, agents.zk_hosts, agents.cluster)
    try:
        poll_until(lambda: survivor.state() == "active", 60, "the designated primary active")
        [loud] = poll_until(
            lambda: [e for e in read_events(log) if e["event"] == "designated_primary"],
            10,
            "the designated_primary event",
        )
        assert loud["level"] == "critical" and "WITHOUT ZooKeeper" in loud["risk"]
        assert loud["was"] == "ready" and loud["new_epoch"] > 0
        assert {(p["via"], p["state"]) for p in loud["peers"]} >= {("management", None)}
        after = Publisher([survivor.port], "orders")
        after.sent = publisher.sent
        after.publish(100)
        after.close()

        # the broker under the designated agent is SIGKILLed and started again (by hand,
        # as systemd would): the agent checks the peer again and promotes it again, at a
        # higher epoch, from its store
        first_epoch = loud["new_epoch"]
        os.kill(survivor.broker_pid(), signal.SIGKILL)
        poll_until(lambda: survivor.status() is None, 10)
        with open(survivor.dir / "qpidd.restarted.out", "ab") as out:
            restarted = subprocess.Popen(survivor.broker_command, stdout=out, stderr=out)
        survivor.broker_pids.add(restarted.pid)
        poll_until(lambda: survivor.state() == "active", 60, "promoted again after a restart")

        # the agent logs its promotion once the broker answered it: the broker can be
        # active a moment before the line is written
        def promotions() -> list[dict[str, Any]] | None:
            found = [e for e in read_events(log) if e["event"] == "designated_primary"]
            return found if len(found) >= 2 else None

        again = poll_until(promotions, 10, "the second designated_primary event")
        assert len(again) == 2 and again[1]["was"] in ("joining", "ready")
        assert again[1]["new_epoch"] > first_epoch
        received = drain([survivor.port], "orders")
        lost = (publisher.confirmed | after.confirmed) - set(received)
        assert not lost, f"confirmed messages lost: {sorted(lost)[:10]}"
    finally:
        designated.send_signal(signal.SIGTERM)
        designated.wait(15)
    assert designated.returncode == 0
