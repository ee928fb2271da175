"""``promote``, ``in-sync`` and ``replicate`` in process (one ``replicate --vhost`` as a
subprocess), against real brokers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pika
import pytest

from common.polling import poll_until
from tests.broker_process import BrokerProcess
from tests.cli.conftest import REPLICATION_ARGS, address, qpid_ha
from tests.ha.cluster import Cluster, http

pytestmark = pytest.mark.xdist_group("cli_brokers")  # one solo and one pair (conftest)

QPID_HA = str(Path(sys.executable).with_name("qpid-ha"))

REFUSED = (
    "qpid-ha: error: promote is a cluster-manager command: only the cluster resource manager"
    " should run it (add --cluster-manager if you are one)\n"
)


def test_promote_is_refused_without_cluster_manager(pair: Cluster) -> None:
    result = qpid_ha("-b", address(pair.brokers[1]), "promote", "--epoch=2")
    assert (result.exit_code, result.stdout, result.stderr) == (2, "", REFUSED)
    assert pair.state(1) == "ready"  # nothing was asked of the broker


def test_promote_of_the_primary_answers_its_state_and_epoch(pair: Cluster) -> None:
    result = qpid_ha("-b", address(pair.brokers[0]), "--cluster-manager", "promote", "--epoch=1")
    assert (result.exit_code, result.stdout, result.stderr) == (0, "active (epoch 1)\n", "")


def test_promote_with_bad_credentials_is_one_line_and_exit_1(pair: Cluster) -> None:
    result = qpid_ha("-b", address(pair.brokers[1], "guest/bad"), "--cluster-manager", "promote")
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr == (
        f"qpid-ha: error: 127.0.0.1:{pair.brokers[1].mgmt_port} answered HTTP 401 for "
        "/api/ha/promote: invalid credentials (user 'guest')\n"
    )
    assert pair.state(1) == "ready"


def test_promote_epoch_below_0_is_usage(pair: Cluster) -> None:
    result = qpid_ha("-b", address(pair.brokers[1]), "--cluster-manager", "promote", "--epoch=-1")
    assert result.exit_code == 2 and "--epoch" in result.stderr
    assert pair.state(1) == "ready"


def test_replicate_copies_a_queue(
    solo: BrokerProcess, tmp_path_factory: pytest.TempPathFactory
) -> None:
    source = BrokerProcess(tmp_path_factory.mktemp("source"), args=REPLICATION_ARGS).start()
    try:
        connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", source.port))
        channel = connection.channel()
        channel.queue_declare("cli-orders")
        for i in range(5):
            channel.basic_publish("", "cli-orders", str(i).encode())
        connection.close()
        remote = f"127.0.0.1:{source.port}"
        result = qpid_ha("-b", address(solo), "replicate", "cli-orders", remote)
        assert (result.exit_code, result.stderr) == (0, "")
        assert result.stdout == f"replicating cli-orders from {remote}\n"
        poll_until(
            lambda: http("GET", solo.mgmt_port, "/api/queues/cli-orders").get("messages") == 5, 10
        )
    finally:
        source.stop()


def test_replicate_copies_a_queue_of_a_vhost_as_a_subprocess(
    solo: BrokerProcess, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """``--vhost``: the queue of that vhost on the remote broker is copied into the same
    vhost here (run as a subprocess, the option after the arguments)."""
    source = BrokerProcess(tmp_path_factory.mktemp("source-eu"), args=REPLICATION_ARGS).start()
    try:
        for broker in (source, solo):
            http("PUT", broker.mgmt_port, "/api/vhosts/cli-eu")
        params = pika.ConnectionParameters("127.0.0.1", source.port, virtual_host="cli-eu")
        connection = pika.BlockingConnection(params)
        channel = connection.channel()
        channel.queue_declare("cli-orders")
        for i in range(3):
            channel.basic_publish("", "cli-orders", f"eu{i}".encode())
        connection.close()
        remote = f"127.0.0.1:{source.port}"
        result = subprocess.run(
            [QPID_HA, "-b", address(solo), "replicate", "cli-orders", remote, "--vhost", "cli-eu"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert (result.returncode, result.stderr) == (0, "")
        assert result.stdout == f"replicating cli-orders in vhost cli-eu from {remote}\n"
        path = "/api/queues/cli-eu/cli-orders"
        poll_until(lambda: http("GET", solo.mgmt_port, path).get("messages") == 3, 10)
        replications = http("GET", solo.mgmt_port, "/api/ha/replications")
        assert {(r["queue"], r["vhost"]) for r in replications} >= {("cli-orders", "cli-eu")}
    finally:
        source.stop()


@pytest.mark.parametrize(
    ("vhost", "reason"),
    [("", "a vhost name must be a non-empty string"), ("x" * 256, "longer than 255 bytes")],
)
def test_replicate_with_a_bad_vhost_is_usage_before_any_call(vhost: str, reason: str) -> None:
    result = qpid_ha("-b", "127.0.0.1:1", "replicate", "q", "127.0.0.1:2", "--vhost", vhost)
    assert (result.exit_code, result.stdout) == (2, "")  # 2, not 3: the broker was not called
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith("qpid-ha: error: --vhost: ") and reason in result.stderr


def test_replicate_into_a_vhost_this_broker_lacks_is_one_line_and_exit_1(
    solo: BrokerProcess,
) -> None:
    result = qpid_ha("-b", address(solo), "replicate", "q", "127.0.0.1:1", "--vhost", "nowhere")
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr.count("\n") == 1
    assert "no vhost 'nowhere' on this broker" in result.stderr


def test_replicate_refused_by_the_broker_is_one_line_and_exit_1(pair: Cluster) -> None:
    result = qpid_ha("-b", address(pair.brokers[0]), "replicate", "q", "127.0.0.1:1")
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"qpid-ha: error: 127.0.0.1:{pair.brokers[0].mgmt_port} ")


def test_in_sync_on_a_backup_says_ask_the_primary(pair: Cluster) -> None:
    result = qpid_ha("-b", address(pair.brokers[1]), "in-sync")
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr == (
        "qpid-ha: error: this broker is not the primary (ready): the in-sync set is a"
        " primary's; ask the primary\n"
    )


def test_in_sync_commit_is_refused_without_cluster_manager(pair: Cluster) -> None:
    result = qpid_ha("-b", address(pair.brokers[0]), "in-sync", "--commit")
    assert result.exit_code == 2 and "cluster-manager command" in result.stderr


def test_in_sync_shows_the_set_and_commit_releases_a_gone_backup(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 2).start()
    try:
        cluster.promote(0, epoch=1)
        cluster.wait_state(1, "ready")
        backup = cluster.ha(1)["broker_id"]
        primary = address(cluster.brokers[0])
        poll_until(lambda: cluster.ha(0)["in_sync"]["wanted"] == [backup], 10)
        shown = qpid_ha("-b", primary, "in-sync")
        backup_url = cluster.ha(0)["backups"][0]["url"]
        assert (shown.exit_code, shown.stdout) == (
            0,
            f"in sync: {backup_url} ({backup})\nwaiting for removal: none\n",
        )
        cluster.kill(1)
        poll_until(lambda: cluster.ha(0)["in_sync"]["pending_removal"] == [backup], 10)
        committed = qpid_ha("-b", primary, "--cluster-manager", "in-sync", "--commit")
        assert (committed.exit_code, committed.stdout) == (
            0,
            f"released: {backup_url} ({backup})\n",
        )
        after = qpid_ha("-b", primary, "in-sync")
        assert after.stdout == "in sync: none\nwaiting for removal: none\n"
    finally:
        cluster.stop()


# -- the options a cluster manager that stores the set itself uses (the OCF agent) ------

NO_BROKER = "127.0.0.1:1"  # refused before any call: nothing answers there


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (
            ["--cluster-manager", "in-sync", "--commit", "--members", "a,,b", "--epoch=1"],
            "--members: '' is not a broker id (letters, digits, '.', '_', ':' and '-', comma"
            " separated; '' for none)",
        ),
        (
            ["--cluster-manager", "in-sync", "--commit", "--members", "a b", "--epoch=1"],
            "--members: 'a b' is not a broker id (letters, digits, '.', '_', ':' and '-', comma"
            " separated; '' for none)",
        ),
        (
            ["--cluster-manager", "promote", "--in-sync", "x;rm"],
            "--in-sync: 'x;rm' is not a broker id (letters, digits, '.', '_', ':' and '-',"
            " comma separated; '' for none)",
        ),
        (
            ["--cluster-manager", "in-sync", "--commit", "--members", "a"],
            "--members and --epoch go together",
        ),
        (
            ["--cluster-manager", "in-sync", "--commit", "--epoch=1"],
            "--members and --epoch go together",
        ),
        (["in-sync", "--members", "a", "--epoch=1"], "--members and --epoch are for --commit"),
        (
            ["--cluster-manager", "in-sync", "--ids", "--commit"],
            "--ids shows the set; it does not go with --commit",
        ),
        (
            ["in-sync", "--commit", "--members", "a", "--epoch=1"],
            "in-sync --commit is a cluster-manager command: committing the removal of a"
            " backup that may still be promoted loses confirmed messages (add"
            " --cluster-manager if you are the cluster manager)",
        ),
    ],
)
def test_bad_in_sync_options_are_one_line_and_exit_2(args: list[str], error: str) -> None:
    result = qpid_ha("-b", NO_BROKER, *args)
    assert (result.exit_code, result.stdout, result.stderr) == (
        2,
        "",
        f"qpid-ha: error: {error}\n",
    )


def test_in_sync_ids_prints_the_epoch_the_set_and_the_pending(pair: Cluster) -> None:
    backup = pair.ha(1)["broker_id"]
    poll_until(lambda: pair.ha(0)["in_sync"]["wanted"] == [backup], 10)
    result = qpid_ha("-b", address(pair.brokers[0]), "in-sync", "--ids")
    epoch = pair.ha(0)["epoch"]
    assert (result.exit_code, result.stdout, result.stderr) == (
        0,
        f"{epoch} {backup}\npending\n",
        "",
    )


def test_in_sync_commit_of_a_given_set_releases_only_what_it_excludes(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 2).start()
    try:
        cluster.promote(0, epoch=3)
        cluster.wait_state(1, "ready")
        backup = cluster.ha(1)["broker_id"]
        primary = address(cluster.brokers[0])
        poll_until(lambda: cluster.ha(0)["in_sync"]["wanted"] == [backup], 10)
        cluster.kill(1)
        poll_until(lambda: cluster.ha(0)["in_sync"]["pending_removal"] == [backup], 10)
        ids = qpid_ha("-b", primary, "in-sync", "--ids")
        assert ids.stdout == f"3\npending {backup}\n"
        commit = ("--cluster-manager", "in-sync", "--commit")
        # A set that still holds the backup releases nothing; another epoch's is refused.
        kept = qpid_ha("-b", primary, *commit, "--members", backup, "--epoch=3")
        assert (kept.exit_code, kept.stdout) == (0, "released: none\n")
        assert cluster.ha(0)["in_sync"]["pending_removal"] == [backup]
        stale = qpid_ha("-b", primary, *commit, "--members", "", "--epoch=2")
        assert (stale.exit_code, stale.stdout) == (1, "")
        assert "the in-sync set was committed at epoch 2, not 3" in stale.stderr
        assert stale.stderr.count("\n") == 1
        # The empty set ('') at the primary's epoch releases it.
        released = qpid_ha("-b", primary, *commit, "--members", "", "--epoch=3")
        assert released.exit_code == 0 and released.stdout.startswith("released: ")
        assert f"({backup})" in released.stdout
        assert cluster.ha(0)["in_sync"] == {
            "wanted": [],
            "pending_removal": [],
            "awaited": [],
            "committed": {"epoch": 3, "members": []},
        }
    finally:
        cluster.stop()


def test_promote_in_sync_is_the_set_the_new_primary_expects(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 2).start()
    try:
        cluster.promote(0, epoch=1)
        cluster.wait_state(1, "ready")
        backup = cluster.ha(1)["broker_id"]
        cluster.kill(0)
        result = qpid_ha(
            "-b",
            address(cluster.brokers[1]),
            "--cluster-manager",
            "promote",
            "--in-sync",
            f"{backup},ghost-1",
        )
        assert (result.exit_code, result.stdout, result.stderr) == (
            0,
            "recovering (epoch 2)\n",
            "",
        )
        # ha-backup-timeout is 5 s: it still waits for ghost-1, which it was told is in sync.
        assert cluster.ha(1)["in_sync"]["wanted"] == ["ghost-1"]
    finally:
        cluster.stop()


def test_promote_of_a_broker_an_agent_manages_is_refused_unless_forced(tmp_path: Path) -> None:
    """A broker whose qpid-ha-agent read it (``/api/ha?manager=1&agent=NODE``) refuses a
    promotion by hand: one line, exit 1 (the broker refused the call), nothing changed;
    ``--force`` promotes it (its own cluster: the forced promotion makes a second primary)."""
    cluster = Cluster(tmp_path, 2).start()
    try:
        cluster.promote(0, epoch=1)
        cluster.wait_state(1, "ready")
        port = cluster.brokers[1].mgmt_port
        assert http("GET", port, "/api/ha?manager=1&agent=n2")["managed_by"] == "n2"
        b1 = address(cluster.brokers[1])
        result = qpid_ha("-b", b1, "--cluster-manager", "promote", "--epoch=2")
        assert (result.exit_code, result.stdout) == (1, "")
        assert result.stderr.startswith(
            f"qpid-ha: error: 127.0.0.1:{port} answered HTTP 409 for /api/ha/promote: refused:"
            " qpid-ha-agent of node n2 manages this broker"
        )
        assert result.stderr.count("\n") == 1 and "--force" in result.stderr
        assert cluster.state(1) == "ready" and cluster.ha(1)["epoch"] == 1
        forced = qpid_ha("-b", b1, "--cluster-manager", "promote", "--epoch=2", "--force")
        assert (forced.exit_code, forced.stderr) == (0, "")
        assert forced.stdout in ("active (epoch 2)\n", "recovering (epoch 2)\n")
    finally:
        cluster.stop()


def test_promote_force_is_in_the_help() -> None:
    result = qpid_ha("promote", "--help")
    assert result.exit_code == 0
    assert "--force" in result.stdout and "no agent runs any more" in result.stdout


def test_a_broker_started_with_ha_agent_refuses_promote_from_its_start(tmp_path: Path) -> None:
    """``ha-agent=NODE``: managed before any agent read it (a restart while its agent is
    down leaves no window)."""
    cluster = Cluster(tmp_path, 2)
    cluster.brokers[1].args.append("--ha-agent=n2")
    cluster.start()
    try:
        cluster.promote(0, epoch=1)
        cluster.wait_state(1, "ready")
        assert cluster.ha(1)["managed_by"] == "n2" and cluster.ha(0)["managed_by"] is None
        result = qpid_ha("-b", address(cluster.brokers[1]), "--cluster-manager", "promote")
        assert result.exit_code == 1 and "qpid-ha-agent of node n2" in result.stderr
        assert cluster.state(1) == "ready"
    finally:
        cluster.stop()
