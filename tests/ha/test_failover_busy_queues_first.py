"""At a fail-over, the member left subscribes its busy queues before it applies the new
primary's configuration snapshot (issue 25).

Three brokers on real sockets: a primary, and two backups that heard traffic on one queue
of 50. The primary is SIGKILLed, backup 1 promoted with backup 2 as the committed in-sync
set: the new primary's confirms on that queue wait for backup 2's stream of it. Backup 2
subscribes that queue as soon as it has decoded the snapshot, before applying it (its log's
``ha_snapshot_applied`` names it); the confirm comes, and backup 2 holds every confirmed
message of the queue (docs/ha-design.md, "Who a confirm waits for")."""

from __future__ import annotations

from functools import partial
from pathlib import Path

from common.polling import poll_until
from tests.ha.cluster import Cluster, http
from tests.ha.failover_clients import connect, events, publish

QUEUES = 50
BUSY = "q40"


def holds_queues(cluster: Cluster, i: int) -> bool:
    return int(http("GET", cluster.brokers[i].mgmt_port, "/api/status")["queues"]) >= QUEUES


def holds_messages(cluster: Cluster, i: int, count: int) -> bool:
    return cluster.queue_messages(i, BUSY) == count


def test_the_member_subscribes_its_busy_queue_before_applying_the_snapshot(
    tmp_path: Path,
) -> None:
    cluster = Cluster(tmp_path, 3).start()
    try:
        cluster.promote(0, epoch=1)
        cluster.wait_state(1, "ready")
        cluster.wait_state(2, "ready")
        connection = connect(cluster.ports[0])
        channel = connection.channel()
        for i in range(QUEUES):
            channel.queue_declare(f"q{i}", durable=True)
        connection.close()
        for b in (1, 2):
            poll_until(partial(holds_queues, cluster, b), 30)
            cluster.wait_state(b, "ready")
        publish(cluster.ports[0], BUSY, [b"before-%d" % i for i in range(5)], delivery_mode=2)
        for b in (1, 2):  # live traffic heard on the busy queue, by both backups
            poll_until(partial(holds_messages, cluster, b, 5), 30)
        member = str(cluster.ha(2)["broker_id"])

        cluster.kill(0)
        assert cluster.promote(1, epoch=2, in_sync=[member])["state"] == "recovering"
        publish(cluster.ports[1], BUSY, [b"after"], delivery_mode=2)  # confirmed

        def snapshot_applied() -> dict[str, object] | None:
            applied = events(cluster, 2, "ha_snapshot_applied")  # one a link
            return applied[-1] if len(applied) >= 2 else None

        applied = poll_until(snapshot_applied, 60)
        assert applied["queues"] == QUEUES
        assert applied["subscribed_before"] == 1 and applied["busiest"] == [BUSY]
        cluster.wait_state(2, "ready", timeout=60)
        assert cluster.queue_messages(2, BUSY) == 6  # the confirmed message is on the member
    finally:
        cluster.stop()
