"""A whole cluster lost and restored from a hot backup (docs/store.md, "Whole-site loss"):
real qpidd cluster members (promoted by hand, as tests/ha/cluster.py does), a pika
publisher with confirms, the real ``qpid-ha`` program.

The primary of a two-broker cluster is backed up while the publisher keeps publishing;
both brokers are killed and their data directories deleted; the backup is restored into
one data directory of a new cluster (new ports), whose other broker starts empty. The
restored broker is promoted, the other catches up from it, and every message confirmed
before the backup was asked for is there. The restored store keeps the cluster's id (the
empty one adopts it) and epoch, with a store id of its own.
"""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path

from broker.store.hot_backup import MANIFEST
from common.polling import poll_until
from tests.cli.conftest import qpid_ha as qpid_ha_here
from tests.ha.cluster import Cluster
from tests.store.store_brokers import connect, drain, events
from tests.store.test_backup_restore import QUEUES, Publisher, back_up_under_load, mgmt


def test_a_cluster_restored_from_a_backup_of_its_primary(tmp_path: Path) -> None:
    site = Cluster(tmp_path / "site", 2)
    new = Cluster(tmp_path / "new", 2)
    publisher = None
    try:
        site.start()
        site.promote(0, epoch=1)
        site.wait_state(0, "active")
        site.wait_state(1, "ready", timeout=30)
        primary = site.brokers[0]
        setup = connect(primary)
        channel = setup.channel()
        for queue in QUEUES:
            channel.queue_declare(queue, durable=True)
        setup.close()
        publisher = Publisher(primary.url)
        before, _result = back_up_under_load(publisher, mgmt(primary), tmp_path / "backup")
        published = publisher.published
        source = json.loads((tmp_path / "backup" / MANIFEST).read_text())["source"]
        assert source["ha_state"] == "active" and source["epoch"] == 1
        assert source["cluster_id"] and source["store_id"]

        site.kill(0)
        site.kill(1)
        shutil.rmtree(tmp_path / "site")

        data = tmp_path / "new" / "b0" / "data"
        restored = qpid_ha_here("restore", str(tmp_path / "backup"), "--data-dir", str(data))
        assert restored.exit_code == 0, restored.stderr
        new.start()
        assert new.ha(0)["epoch"] == 1 and new.ha(1)["epoch"] == 0  # the source's epoch
        new.promote(0, epoch=2)
        new.wait_state(0, "active")
        new.wait_state(1, "ready", timeout=30)

        def caught_up() -> bool:  # the empty broker caught up from the restored one
            counts = [(new.queue_messages(0, q), new.queue_messages(1, q)) for q in QUEUES]
            return all(primary == backup > 0 for primary, backup in counts)

        poll_until(caught_up, 30)
        held = {q: new.queue_messages(0, q) for q in QUEUES}
        connection = connect(new.brokers[0])
        channel = connection.channel()
        found: list[int] = []
        for queue in QUEUES:
            # a get is held (not empty) until the new primary's backups acknowledged its
            # first delivery watermark (docs/ha-design.md)
            numbers = [int(body) for body, _redelivered, _p in drain(channel, queue)]
            assert len(numbers) >= held[queue], queue
            assert numbers == sorted(numbers), queue
            found += numbers
        connection.close()
        assert before <= set(found), sorted(before - set(found))[:10]
        assert set(found) <= set(range(published))
        assert len(found) == len(set(found))
        assert len(events(new.brokers[0], "store_restored_from_backup")) == 1
        ha = new.ha(0)
        assert ha["cluster_id"] == source["cluster_id"]
        assert ha["store_id"] != source["store_id"]
        assert new.ha(1)["cluster_id"] == source["cluster_id"]  # adopted by the empty one
    finally:
        if publisher is not None:
            publisher.stop.set()
        for cluster in (site, new):
            for broker in cluster.brokers:
                broker.stop(signal.SIGKILL)
