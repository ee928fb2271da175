"""A transaction over three queues with real brokers: committed, it is whole on the backup
and on the backup promoted after the primary's SIGKILL (issue 10, item 3). The fail-over
in the middle of a commit is deterministic only sans I/O:
tests/ha/test_tx_staging.py::test_the_primary_dying_after_one_queues_batch_leaves_none_of_it."""

from __future__ import annotations

from pathlib import Path

from common.polling import poll_until
from tests.ha.failover_clients import connect, queue_names
from tests.ha.test_sync_config import in_sync_pair

QUEUES = ("tx-a", "tx-b", "tx-c")


def test_a_transaction_over_three_queues_is_whole_on_the_promoted_backup(tmp_path: Path) -> None:
    with in_sync_pair(tmp_path) as cluster:
        connection = connect(cluster.ports[0])
        channel = connection.channel()
        for name in QUEUES:
            channel.queue_declare(name, durable=True)
        poll_until(lambda: set(QUEUES) <= queue_names(cluster, 1), 10)
        channel.tx_select()
        for round_ in range(3):
            for name in QUEUES:
                channel.basic_publish("", name, f"{name}-{round_}".encode())
        channel.tx_commit()  # commit-ok: every message of it is on the backup
        cluster.kill(0)
        cluster.promote(1, epoch=2)
        assert [cluster.queue_messages(1, name) for name in QUEUES] == [3, 3, 3]
