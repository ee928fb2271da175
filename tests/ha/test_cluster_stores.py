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
from common.polling import free_port, poll_until
from tests.broker_process import BrokerProcess
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
