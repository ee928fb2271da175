"""Store identity with real brokers (issue 12, seed 002): the cluster-id created by the first
primary and copied by its backups; a store of another cluster refused with both ids;
``--truncate yes`` moving a store aside to ``_cluster.bak.NNNN``, numbered, never overwritten."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest

from broker.store.data_dir import inspect
from broker.store.identity import new_id
from common.polling import free_port, poll_until
from tests.broker_process import BrokerProcess
from tests.cli.conftest import qpid_ha
from tests.ha.cluster import Cluster, http


@pytest.fixture
def clusters(tmp_path: Path) -> Iterator[tuple[Cluster, Cluster]]:
    """Two clusters: a primary and a backup (``one``), a lone primary (``other``)."""
    one = Cluster(tmp_path / "one", 2)
    other = Cluster(tmp_path / "other", 1)
    try:
        one.start()
        other.start()
        yield one, other
    finally:
        one.stop()
        other.stop()


def ha_broker(workdir: Path, data: Path, primary_port: int, *extra: str) -> BrokerProcess:
    """A broker of the cluster whose primary listens on ``primary_port``."""
    port = free_port()
    return BrokerProcess(
        workdir,
        port=port,
        args=[
            "--ha-cluster=yes",
            f"--ha-brokers-url=127.0.0.1:{primary_port},127.0.0.1:{port}",
            "--ha-replicate=all",
            "--ha-username=guest",
            "--ha-password=guest",
            "--link-maintenance-interval=0.1",
            f"--data-dir={data}",
            *extra,
        ],
    )


def run_until_exit(broker: BrokerProcess) -> int:
    """Start ``broker`` expecting it to stop by itself; its exit code."""
    with contextlib.suppress(RuntimeError):  # it stopped before both ports were seen open
        broker.start()
    assert broker.proc is not None
    return broker.proc.wait(timeout=30)


def events(broker: BrokerProcess, name: str) -> list[dict[str, object]]:
    return [e for e in broker.events() if e.get("event") == name]


def test_a_store_of_another_cluster_is_refused_then_truncated(
    clusters: tuple[Cluster, Cluster], tmp_path: Path
) -> None:
    one, other = clusters
    one.promote(0, epoch=1)
    other.promote(0, epoch=1)
    one.wait_state(1, "ready")
    cluster_id = one.ha(0)["cluster_id"]
    assert cluster_id and one.ha(1)["cluster_id"] == cluster_id
    other_id = other.ha(0)["cluster_id"]
    assert other_id and other_id != cluster_id
    port = other.brokers[0].mgmt_port
    for body, code, text in (
        ({"shutdown_id": new_id()}, 403, "cluster-manager command"),
        ({"cluster_manager": True, "shutdown_id": "x"}, 400, "shutdown_id must be a UUID"),
        ({"cluster_manager": True, "shutdown_id": new_id(), "quiesce": 1}, 400, "quiesce"),
        ({"cluster_manager": True, "shutdown_id": new_id(), "now": 1}, 400, "unknown field"),
    ):
        answer = http("POST", port, "/api/ha/shutdown", body)
        assert answer["http_status"] == code and text in str(answer), answer
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", one.ports[0]))
    channel = connection.channel()
    channel.queue_declare("kept", durable=True)
    channel.confirm_delivery()
    channel.basic_publish("", "kept", b"m", pika.BasicProperties(delivery_mode=2))
    connection.close()
    poll_until(lambda: one.queue_messages(1, "kept") == 1, 10)

    # the backup's store now belongs to the cluster ``one``: pointed at ``other``, it stops
    assert one.brokers[1].stop() == 0
    data = tmp_path / "one" / "b1" / "data"
    before = inspect(data)
    assert before.cluster_id == cluster_id and before.status == "clean"
    moved = ha_broker(tmp_path / "moved", data, other.ports[0])
    assert run_until_exit(moved) == 1
    stderr = (tmp_path / "moved" / "stderr").read_text()
    assert stderr.startswith("qpidd: error: ") and stderr.count("\n") == 1
    assert cluster_id in stderr and other_id in stderr and "--truncate yes" in stderr
    [mismatch] = events(moved, "ha_cluster_id_mismatch")
    assert mismatch["cluster_id"] == cluster_id and mismatch["primary_cluster_id"] == other_id
    after = inspect(data)
    assert (after.cluster_id, after.store_id) == (cluster_id, before.store_id)  # untouched
    assert after.segments >= before.segments and after.bytes >= before.bytes  # nothing cut

    # --truncate yes moves it aside (never deleted) and lets it join ``other``
    joined = ha_broker(tmp_path / "joined", data, other.ports[0], "--truncate=yes").start()
    poll_until(lambda: other.ha(0)["backups"] and other.ha(0)["backups"][0]["ready"], 15)
    aside = data / "_cluster.bak.0001"
    [line] = events(joined, "store_moved_aside")
    assert line["moved_to"] == str(aside) and line["reason"] == "--truncate yes"
    assert line["old_store_id"] == before.store_id and line["cluster_id"] == cluster_id
    assert (aside / "cluster-id").read_text().strip() == cluster_id
    assert (aside / "store-id").read_text().strip() == before.store_id
    assert sorted(p.name for p in (aside / "store").glob("*.seg"))  # the journal went with it
    assert (inspect(aside).segments, inspect(aside).bytes) == (after.segments, after.bytes)
    status = http("GET", joined.mgmt_port, "/api/ha")
    assert status["cluster_id"] == other_id and status["store_id"] != before.store_id
    assert joined.stop() == 0
    assert inspect(data).cluster_id == other_id

    # a second --truncate: 0002, and 0001 is still what it was
    again = ha_broker(tmp_path / "again", data, other.ports[0], "--truncate=yes").start()
    poll_until(lambda: events(again, "store_moved_aside"), 10)
    assert (data / "_cluster.bak.0002" / "cluster-id").read_text().strip() == other_id
    assert (aside / "cluster-id").read_text().strip() == cluster_id
    assert again.stop(signal.SIGKILL) == -signal.SIGKILL


# -- a clean all-stop, then the stores read and marked by hand ----------------------------------
def publish(port: int, queue: str, count: int) -> None:
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    channel = connection.channel()
    channel.queue_declare(queue, durable=True)
    channel.confirm_delivery()
    for i in range(count):
        channel.basic_publish("", queue, f"m{i}".encode(), pika.BasicProperties(delivery_mode=2))
    connection.close()


def test_shutdown_all_leaves_clean_stores_with_one_shutdown_id(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 3).start()
    try:
        cluster.promote(0, epoch=1)
        for i in (1, 2):
            cluster.wait_state(i, "ready")
        publish(cluster.ports[0], "orders", 50)
        # a client still connected when the cluster stops: the primary closes it first
        client = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", cluster.ports[0]))
        channel = client.channel()
        channel.confirm_delivery()
        channel.basic_publish("", "orders", b"last", pika.BasicProperties(delivery_mode=2))
        members = ",".join(f"127.0.0.1:{b.mgmt_port}" for b in cluster.brokers)
        assert qpid_ha("-b", members, "shutdown").exit_code == 2  # --all is required
        result = qpid_ha("-b", members, "shutdown", "--all", "--timeout", "20")
        assert result.exit_code == 0, result.stdout + result.stderr
        lines = result.stdout.splitlines()
        shutdown_id = lines[0].removeprefix("shutdown-id ")
        assert lines[-1] == f"stopped 3 brokers; stores clean with shutdown-id {shutdown_id}"
        # exit 4 (SHUT_DOWN): neither a service manager nor a supervising agent restarts them
        assert [b.proc.wait(15) if b.proc else None for b in cluster.brokers] == [4, 4, 4]
        order = [line for line in lines if line.startswith("stopped 127.0.0.1")]
        assert order[-1].endswith("(primary)") and len(order) == 3  # backups first
        [quiesced] = [
            e for e in events(cluster.brokers[0], "ha_shutdown_requested") if e["quiesce"]
        ]
        assert quiesced["clients_closed"] == 1 and quiesced["shutdown_id"] == shutdown_id
        infos = [inspect(tmp_path / f"b{i}" / "data") for i in range(3)]
        assert {(i.status, i.shutdown_id) for i in infos} == {("clean", shutdown_id)}
        assert len({i.cluster_id for i in infos}) == 1 and None not in {i.cluster_id for i in infos}
        assert len({i.store_id for i in infos}) == 3

        data = str(tmp_path / "b1" / "data")
        status = qpid_ha("store", "status", data)
        assert status.exit_code == 0
        assert status.stdout.splitlines()[:5] == [
            f"store: {data}",
            "status: clean",
            f"store-id: {infos[1].store_id}",
            f"cluster-id: {infos[1].cluster_id}",
            f"shutdown-id: {shutdown_id}",
        ]
        assert status.stdout.splitlines()[5].startswith("segments: ")

        # any clean store will do: the cluster restarts with every message
        cluster.start()
        assert {
            str(http("GET", b.mgmt_port, "/api/status")["store_status"]) for b in cluster.brokers
        } == {"clean"}
        cluster.promote(2, epoch=2)
        for i in (0, 1):
            cluster.wait_state(i, "ready")
        for i in range(3):
            poll_until(lambda i=i: cluster.queue_messages(i, "orders") == 51, 15)  # type: ignore[misc]

        in_use = qpid_ha("store", "status", data)
        pid = cluster.brokers[1].proc.pid if cluster.brokers[1].proc else 0
        assert f"status: in use by pid {pid}" in in_use.stdout.splitlines()
        refused = qpid_ha("store", "mark-clean", data)
        assert refused.exit_code == 2
        assert (
            refused.stderr
            == f"qpid-ha: error: {data} is in use by pid {pid}: stop that broker first\n"
        )

        # manual recovery: a killed broker's store is dirty until marked clean
        cluster.kill(1)
        assert inspect(data).status == "dirty"
        marked = qpid_ha("store", "mark-clean", data)
        assert marked.exit_code == 0 and marked.stderr.startswith(
            f"warning: {data} is marked clean"
        )
        after = inspect(data)
        assert after.status == "clean" and after.shutdown_id not in (None, shutdown_id)
        assert marked.stdout == f"{data} marked clean (shutdown-id {after.shutdown_id})\n"
        again = qpid_ha("store", "mark-clean", data)
        assert again.exit_code == 0 and "clean already" in again.stdout
        assert inspect(data).shutdown_id == after.shutdown_id
    finally:
        cluster.stop()


def test_store_verbs_refuse_bad_input_in_one_line(tmp_path: Path) -> None:
    missing = qpid_ha("store", "status", str(tmp_path / "nope"))
    assert (missing.exit_code, missing.stderr) == (
        2,
        f"qpid-ha: error: no data directory at {tmp_path / 'nope'}\n",
    )
    unused = qpid_ha("store", "mark-clean", str(tmp_path))
    assert unused.exit_code == 2 and "no store-id" in unused.stderr
    (tmp_path / "store-id").write_text("not an id\n")
    bad = qpid_ha("store", "status", str(tmp_path))
    assert (
        bad.exit_code == 2 and bad.stderr.count("\n") == 1 and "does not hold an id" in bad.stderr
    )
    assert qpid_ha("store").exit_code == 2
