"""Fencing: a backup that has seen a newer epoch never follows a primary with an older one."""

from __future__ import annotations

import shutil
from pathlib import Path

from common.polling import poll_until
from tests.ha.cluster import Cluster
from tests.ha.failover_clients import events


def test_backup_refuses_primary_with_older_epoch(tmp_path: Path) -> None:
    """Broker 1 remembers epoch 3; broker 0 forgot it (empty data dir) and is promoted with 1.

    Three layers keep broker 1 from following it: a joining broker is not promoted while
    another broker is beyond joining (409); once promoted anyway (broker 1 down), the backup
    link announces epoch 3 and the stale primary fences itself at admission (``ha_fenced``,
    process exits), before the backup's own check (``ha_primary_refused``) is ever reached.
    """
    cluster = Cluster(tmp_path, 2).start()
    try:
        cluster.promote(0, epoch=3)
        cluster.wait_state(1, "ready")
        assert cluster.ha(1)["epoch"] == 3
        cluster.brokers[0].stop()
        # broker 0 comes back with no memory of epoch 3
        shutil.rmtree(tmp_path / "b0" / "data")
        cluster.brokers[0].start()
        # while broker 1 is running (ready), a joining broker may not be promoted at all
        refused = cluster.promote(0, epoch=1)
        assert refused.get("http_status") == 409 and "beyond joining" in refused["reason"]
        cluster.brokers[1].stop()
        answer = cluster.promote(0, epoch=1)  # alone now: promoted with the stale epoch
        assert answer["epoch"] == 1
        cluster.wait_state(0, "active")
        log_mark = len(cluster.brokers[1].events())
        cluster.brokers[1].start()  # its data dir remembers epoch 3
        assert cluster.ha(1)["epoch"] == 3
        # the stale primary learns of epoch 3 from the backup's link and stops serving
        poll_until(lambda: not cluster.brokers[0].alive(), 10)
        assert events(cluster, 0, "ha_fenced")
        fenced = events(cluster, 0, "ha_fenced")[0]
        assert "epoch 3" in fenced["reason"]
        later = cluster.brokers[1].events()[log_mark:]
        states = [e["new"] for e in later if e.get("event") == "ha_state_changed"]
        assert "catch-up" not in states and "ready" not in states
        assert not [e for e in later if e.get("event") == "ha_link_up"]
        assert cluster.state(1) == "joining"
    finally:
        cluster.stop()
