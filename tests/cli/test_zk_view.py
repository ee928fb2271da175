"""``qpid-ha --zk HOSTS --cluster NAME status --all`` in process, against a real ZooKeeper
holding records written by the agent's own code (member, primary, epoch counter)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient

from common.exit_status import ExitStatus
from ha_agent.agent_report import AgentReport
from ha_agent.epoch_counter import next_epoch
from ha_agent.in_sync import write_in_sync
from ha_agent.membership import Member, MemberPublisher
from ha_agent.primary_record import write_primary
from ha_agent.promotion import InSyncMember, InSyncRecord, PrimaryRecord
from qpid_ha_cli.context import Environment
from tests.broker_process import free_port
from tests.cli.conftest import qpid_ha
from tests.zookeeper import ZooKeeper


@pytest.fixture
def recorded(zookeeper: ZooKeeper, cluster: str) -> Iterator[str]:
    """Three members, n1 the primary at epoch 1 with a virtual IP, n2 in the in-sync set and
    n3 out of it, in a session of this test."""
    client = KazooClient(hosts=zookeeper.hosts, timeout=10)
    client.start(timeout=15)
    try:
        epoch = next_epoch(client, cluster)
        rows = (
            ("n1", "active", 2**40 + 1666, 5672),
            ("n2", "ready", 40, 5673),
            ("n3", "ready", 7, 5674),
        )
        for node, state, position, port in rows:
            member = Member(
                node=node,
                broker_url=f"127.0.0.1:{port}",
                ha_state=state,
                epoch=epoch,
                replication_position=position,
                broker_id=f"id-{node}",
            )
            MemberPublisher(client, cluster, member).publish()
        write_primary(client, cluster, PrimaryRecord("n1", epoch, "127.0.0.1:5672"), "10.0.0.9/24")
        in_sync = InSyncRecord(epoch, (InSyncMember("id-n2", "n2", "127.0.0.1:5673"),))
        write_in_sync(client, cluster, in_sync, None)
        yield cluster
    finally:
        client.stop()
        client.close()


def test_the_cluster_as_a_table(zookeeper: ZooKeeper, recorded: str) -> None:
    """POSITION shows a position's two parts apart (issue 15): the eras promotions
    started (2**40 each) and the ids within them, 1:1666 for 1099511629442."""
    result = qpid_ha("--zk", zookeeper.hosts, "--cluster", recorded, "status", "--all")
    assert (result.exit_code, result.stderr) == (0, "")
    header, *rows, summary = result.stdout.splitlines()
    assert header.split() == ["NODE", "STATE", "EPOCH", "POSITION", "IN-SYNC", "URL"]
    assert sorted(rows) == [
        f"{'n1':<16} {'active':<12} {1:>6} {'1:1666':>14} {'-':<7}  127.0.0.1:5672  (primary)",
        f"{'n2':<16} {'ready':<12} {1:>6} {'0:40':>14} {'yes':<7}  127.0.0.1:5673",
        f"{'n3':<16} {'ready':<12} {1:>6} {'0:7':>14} {'no':<7}  127.0.0.1:5674",
    ]
    assert summary == (
        f"cluster {recorded}: primary n1 (epoch 1), last epoch 1, virtual IP 10.0.0.9/24 on n1"
        ", in-sync set epoch 1: n2"
    )


def test_the_cluster_as_json(zookeeper: ZooKeeper, recorded: str) -> None:
    args = ("--zk", zookeeper.hosts, "--cluster", recorded, "status", "--all", "--json")
    view = json.loads(qpid_ha(*args).stdout)
    assert (view["primary"], view["epoch"], view["vip_owner"]) == ("n1", 1, "n1")
    positions = {m["node"]: m["position"] for m in view["members"]}
    assert positions == {"n1": 2**40 + 1666, "n2": 40, "n3": 7}  # JSON keeps the number
    assert sorted((m["node"], m["primary"], m["in_sync"]) for m in view["members"]) == [
        ("n1", True, None),
        ("n2", False, True),
        ("n3", False, False),
    ]
    assert view["in_sync"] == {
        "epoch": 1,
        "version": 0,
        "members": [{"broker_id": "id-n2", "node": "n2", "url": "127.0.0.1:5673"}],
    }


def test_a_member_record_that_cannot_be_read_is_a_warning_line(
    zookeeper: ZooKeeper, recorded: str
) -> None:
    """A hand-made member record (not JSON) is left out of the table and said on a warning
    line of its own, not logged onto stdout between the table's lines (a structlog line
    there broke `status --all` of every cluster on that ZooKeeper); --json carries it."""
    client = KazooClient(hosts=zookeeper.hosts, timeout=10)
    client.start(timeout=15)
    path = f"/qpid-ha/{recorded}/members/junk"
    try:
        client.create(path, b"not json")
        result = qpid_ha("--zk", zookeeper.hosts, "--cluster", recorded, "status", "--all")
        assert (result.exit_code, result.stderr) == (0, "")
        lines = result.stdout.splitlines()
        assert lines[0].split() == ["NODE", "STATE", "EPOCH", "POSITION", "IN-SYNC", "URL"]
        assert len(lines) == 6 and lines[4].startswith(f"cluster {recorded}: primary n1")
        assert lines[5].startswith(f"warning: member record left out: {path}: not JSON")
        every = qpid_ha("--zk", zookeeper.hosts, "status", "--all")
        assert (every.exit_code, every.stderr) == (0, "")
        assert every.stdout.splitlines()[0].split()[0] == "CLUSTER"
        args = ("--zk", zookeeper.hosts, "--cluster", recorded, "status", "--all", "--json")
        (invalid,) = json.loads(qpid_ha(*args).stdout)["invalid_members"]
        assert invalid.startswith(f"{path}: not JSON")
    finally:
        client.delete(path)
        client.stop()
        client.close()


def test_no_such_cluster_is_one_line_and_exit_3(zookeeper: ZooKeeper, cluster: str) -> None:
    result = qpid_ha("--zk", zookeeper.hosts, "--cluster", cluster, "status", "--all")
    assert result.exit_code == ExitStatus.UNREACHABLE
    assert result.stderr == (
        f"qpid-ha: error: no cluster {cluster!r} in ZooKeeper at {zookeeper.hosts}\n"
    )


def test_unreachable_zookeeper_is_one_line_and_exit_3() -> None:
    """A refused connection is said at once, not after --timeout (kazoo would retry)."""
    hosts = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    result = qpid_ha("--zk", hosts, "--cluster", "c", "--timeout", "10", "status", "--all")
    took = time.monotonic() - started
    assert (result.exit_code, result.stdout) == (3, "")
    assert (
        result.stderr == f"qpid-ha: error: cannot reach ZooKeeper at {hosts}: connection refused\n"
    )
    assert took < 5, took  # refused on loopback: well under the 10 s timeout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cluster", "bad name!", "status", "--all"], "bad cluster name 'bad name!'"),
        (["--cluster", "c", "status"], "with --zk, use status --all"),
    ],
)
def test_bad_usage_with_zk_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    result = qpid_ha("--zk", f"127.0.0.1:{free_port()}", *args)
    assert result.exit_code == ExitStatus.USAGE
    assert result.stderr.startswith(f"qpid-ha: error: {message}")
    assert result.stderr.count("\n") == 1


def test_a_cluster_without_an_in_sync_set(zookeeper: ZooKeeper, cluster: str) -> None:
    """Agents older than the set (or a cluster not yet promoted): "-" and "no in-sync set"."""
    client = KazooClient(hosts=zookeeper.hosts, timeout=10)
    client.start(timeout=15)
    try:
        MemberPublisher(client, cluster, Member("n1", "127.0.0.1:5672", "joining")).publish()
        result = qpid_ha("--zk", zookeeper.hosts, "--cluster", cluster, "status", "--all")
    finally:
        client.stop()
        client.close()
    assert (result.exit_code, result.stderr) == (0, "")
    _header, row, summary = result.stdout.splitlines()
    assert row.split()[4] == "-"
    assert summary == f"cluster {cluster}: primary none, last epoch 0, no in-sync set"


def test_two_primaries_are_called_out_and_exit_1() -> None:
    """A backup promoted by hand (`qpid-ha --cluster-manager promote`) beside the agents'
    primary: both served as active, and the table showed two `active` rows under "primary
    n1" and exited 0. The view names every member serving as primary, says which epoch
    ZooKeeper never issued, and exits 1 (for scripts and monitoring)."""
    member = {"in_sync": None, "store": "clean", "broker_id": "x", "position": 0}
    view = {
        "cluster": "qa", "epoch": 3, "in_sync": None, "in_sync_error": None,
        "primary": "n1", "primary_epoch": 3, "vip": None, "vip_owner": None,
        "members": [
            {**member, "node": "n1", "state": "active", "epoch": 3, "primary": True,
             "url": "127.0.0.1:1"},
            {**member, "node": "n2", "state": "active", "epoch": 4, "primary": False,
             "url": "127.0.0.1:2"},
            {**member, "node": "n3", "state": "ready", "epoch": 3, "primary": False,
             "url": "127.0.0.1:3"},
        ],
    }  # fmt: skip
    env = Environment(read_cluster=lambda *args, **kwargs: view)
    result = qpid_ha("--zk", "127.0.0.1:1", "--cluster", "qa", "status", "--all", env=env)
    assert result.exit_code == ExitStatus.ERROR
    assert result.stdout.splitlines()[-1] == (
        "warning: 2 members serve as primary: n1 (epoch 3), n2 (epoch 4); ZooKeeper's"
        " primary is n1; n2's epoch 4 is above ZooKeeper's last epoch 3: promoted outside"
        " the agents (qpid-ha --cluster-manager promote?): stop it (qpid-ha stop-member)"
    )
    assert "ERROR" not in result.stderr
    view["members"][1]["state"] = "ready"  # type: ignore[index]
    assert qpid_ha("--zk", "h:1", "--cluster", "qa", "status", "--all", env=env).exit_code == 0


def test_no_primary_says_which_broker_is_needed_and_an_engaged_brake(
    zookeeper: ZooKeeper, cluster: str
) -> None:
    """Issue 25: without a primary, the store the last in-sync record names (n1's, the
    primary's) is needed and not back; n2's agent says why it waits, and its fence brake
    (engaged: three promotions within the window) is a warning line. Records written by
    the agents' own code (their status records: ha_agent.agent_report)."""
    client = KazooClient(hosts=zookeeper.hosts, timeout=10)
    client.start(timeout=15)
    try:
        for _ in range(3):
            next_epoch(client, cluster)
        member = Member("n2", "127.0.0.1:5673", "ready", 3, broker_id="id-n2", store_id="s2")
        MemberPublisher(client, cluster, member).publish()
        record = InSyncRecord(3, (), primary_store_id="s1-store", primary_node="n1")
        write_in_sync(client, cluster, record, None)
        report = AgentReport("n2", broker_timeout=2.0)
        for epoch in (1, 2, 3):
            report.note_primary(epoch, time.monotonic())
        report.decided("its store is not one of the stores ...: no safe choice: n1 ...")
        report.publish(client, cluster)
        result = qpid_ha("--zk", zookeeper.hosts, "--cluster", cluster, "status", "--all")
        args = ("--zk", zookeeper.hosts, "--cluster", cluster, "status", "--all", "--json")
        view = json.loads(qpid_ha(*args).stdout)
    finally:
        client.stop()
        client.close()
    assert (result.exit_code, result.stderr) == (0, "")
    lines = result.stdout.splitlines()
    brake = next(line for line in lines if line.startswith("warning: fence brake"))
    assert brake.startswith("warning: fence brake engaged on n2's agent since 20")
    assert brake.endswith(
        ": 3 promotions within 60 s; a silent (not gone) primary is given 4 s"
        " (--broker-timeout 2 s) before it is fenced"
    )
    assert lines[-2] == (
        "no primary: n1 (the primary's store) is needed: only the stores the in-sync record"
        " of epoch 3 names hold every confirmed message (n1 (the primary's store): not back)"
    )
    assert lines[-1] == "n2's agent: its store is not one of the stores ...: no safe choice: n1 ..."
    assert view["choice"]["chosen"] is None and "n1" in view["choice"]["needed"]
    (agent,) = view["agents"]
    assert agent["brake"]["engaged"] is True and agent["brake"]["promotions"] == 3


def test_every_cluster_on_the_zookeeper(zookeeper: ZooKeeper, recorded: str) -> None:
    """Without --cluster: a line for each cluster (others' of this session's ZooKeeper
    too), then how many primaries each node runs."""
    result = qpid_ha("--zk", zookeeper.hosts, "status", "--all")
    assert (result.exit_code, result.stderr) == (0, "")
    header, *rows, counts = result.stdout.splitlines()
    assert header.split() == ["CLUSTER", "PRIMARY", "EPOCH", "URL", "IN-SYNC"]
    assert (
        f"{recorded:<20} {'n1':<16} {1:>6}  {'127.0.0.1:5672':<24} in-sync set epoch 1: n2"
    ) in rows
    assert counts.startswith(f"{len(rows)} clusters; primaries per node: ")
    assert "n1 " in counts
    views = json.loads(qpid_ha("--zk", zookeeper.hosts, "status", "--all", "--json").stdout)
    (mine,) = [v for v in views if v["cluster"] == recorded]
    assert (mine["primary"], mine["primary_url"]) == ("n1", "127.0.0.1:5672")


def test_a_cluster_that_cannot_be_read_is_a_row_not_a_failure(
    zookeeper: ZooKeeper, recorded: str
) -> None:
    """Another cluster's epoch counter holding no epoch (a test's, a hand edit) is said on
    its own row; every other cluster is still listed."""
    broken = f"{recorded}-broken"
    client = KazooClient(hosts=zookeeper.hosts, timeout=10)
    client.start(timeout=15)
    try:
        client.create(f"/qpid-ha/{broken}/epoch", b"-1", makepath=True)
        result = qpid_ha("--zk", zookeeper.hosts, "status", "--all")
        assert (result.exit_code, result.stderr) == (0, "")
        rows = result.stdout.splitlines()
        assert any(r.startswith(f"{recorded} ") and " n1 " in r for r in rows)
        (row,) = [r for r in rows if r.startswith(f"{broken} ")]
        assert "unreadable:" in row and "not an epoch" in row
    finally:
        client.delete(f"/qpid-ha/{broken}", recursive=True)
        client.stop()
        client.close()
