"""Auto-delete queues across a fail-over, end to end with real brokers and pika clients.

The consumers of an auto-delete queue die with the primary (SIGKILL). The promoted backup
deletes the replica after the grace period (``ha-backup-timeout``, 5 s in
:class:`~tests.ha.cluster.Cluster`; or the queue's ``qpid.auto_delete_timeout``) unless a
client re-attaches within it, and the remaining backup follows the deletion.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import pika

from common.polling import poll_until
from tests.ha.cluster import Cluster
from tests.ha.failover_clients import connect, connect_failover, queue_names, wait_members

GRACE = 5.0  # Cluster's --ha-backup-timeout


def test_orphaned_auto_delete_queue_goes_after_grace_unless_reattached(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 3).start()
    client: pika.BlockingConnection | None = None
    try:
        cluster.promote(0, epoch=1)
        cluster.wait_state(1, "ready")
        cluster.wait_state(2, "ready")
        wait_members(cluster, 1, ready=2)  # the new primary will expect broker 2
        owner = connect(cluster.ports[0])
        channel = owner.channel()
        for name in ("ad-gone", "ad-kept"):
            channel.queue_declare(name, auto_delete=True)
            channel.basic_consume(name, lambda *args: None)
        channel.queue_declare(
            "ad-quick", auto_delete=True, arguments={"qpid.auto_delete_timeout": 1}
        )
        channel.basic_consume("ad-quick", lambda *args: None)
        channel.queue_declare("plain")  # not auto-delete: stays
        everything = {"ad-gone", "ad-kept", "ad-quick", "plain"}
        poll_until(lambda: everything <= queue_names(cluster, 1), 10)
        poll_until(lambda: everything <= queue_names(cluster, 2), 10)

        cluster.kill(0)  # the consumers die with the primary
        promoted = time.monotonic()
        cluster.promote(1, epoch=2)
        orphans = cluster.ha(1)["orphan_queues"]
        assert set(orphans) <= {"ad-gone", "ad-kept", "ad-quick"} and "ad-gone" in orphans
        # a client finds the new primary and re-attaches to one queue within the grace period
        client = connect_failover(cluster.ports)
        reattached = client.channel()
        reattached.queue_declare("ad-kept", auto_delete=True)
        tag = reattached.basic_consume("ad-kept", lambda *args: None)
        assert time.monotonic() - promoted < GRACE, "too slow to test re-attaching in time"

        # the per-queue grace first, then the default; on the remaining backup too
        poll_until(lambda: "ad-quick" not in queue_names(cluster, 1), GRACE)
        assert "ad-gone" in queue_names(cluster, 1)
        poll_until(lambda: "ad-gone" not in queue_names(cluster, 1), 3 * GRACE)
        gone_after = time.monotonic() - promoted
        assert gone_after >= GRACE - 0.1
        poll_until(lambda: not {"ad-gone", "ad-quick"} & queue_names(cluster, 2), GRACE)
        deleted = [
            e["queue"]
            for e in cluster.brokers[1].events()
            if e.get("event") == "ha_orphan_queue_deleted"
        ]
        assert sorted(deleted) == ["ad-gone", "ad-quick"]
        # the re-attached queue survived the grace period, on both brokers
        assert {"ad-kept", "plain"} <= queue_names(cluster, 1)
        assert {"ad-kept", "plain"} <= queue_names(cluster, 2)
        assert cluster.ha(1)["orphan_queues"] == {}
        # and from now on it is an ordinary auto-delete queue
        reattached.basic_cancel(tag)
        poll_until(lambda: "ad-kept" not in queue_names(cluster, 1), 10)
        poll_until(lambda: "ad-kept" not in queue_names(cluster, 2), 10)
        assert "plain" in queue_names(cluster, 1)
    finally:
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()
        cluster.stop()
