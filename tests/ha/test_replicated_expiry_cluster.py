"""A TTL-0 message a consumer took, on real brokers: kept by the backup, dead-lettered once.

The cluster's side of ``tests/ha/test_replicated_expiry.py`` (the HA fuzz's finding of
2026-12-04): a primary and a backup (real ``qpidd`` processes on loopback), pika. A queue
with ``x-message-ttl: 0`` and a dead-letter exchange fanning out to two queues; a consumer
takes each message as it arrives, so the primary keeps them, unacknowledged, and
replicates them. The backup must hold them too, and no dead-lettered copy of its own;
after a fail-over the new primary dead-letters them, once each.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pika
import pika.exceptions

from common.polling import poll_until
from tests.ha.cluster import Cluster
from tests.ha.failover_clients import connect

COUNT = 5


def test_the_backup_keeps_them_and_the_new_primary_dead_letters_them_once(
    tmp_path: Path,
) -> None:
    cluster = Cluster(tmp_path, 2).start()
    try:
        cluster.promote(0, epoch=1)
        cluster.wait_state(1, "ready")
        connection = connect(cluster.ports[0])
        channel = connection.channel()
        channel.exchange_declare("dlx", "fanout")
        for name in ("d1", "d2"):
            channel.queue_declare(name)
            channel.queue_bind(name, "dlx")
        arguments = {"x-message-ttl": 0, "x-dead-letter-exchange": "dlx"}
        channel.queue_declare("q", arguments=arguments)
        taken: list[bytes] = []
        channel.basic_qos(prefetch_count=COUNT)
        channel.basic_consume("q", lambda _ch, _m, _p, body: taken.append(body))
        channel.confirm_delivery()
        for number in range(COUNT):
            channel.basic_publish("", "q", b"m%d" % number, pika.BasicProperties())
        poll_until(lambda: connection.process_data_events(0.05) or len(taken) == COUNT, 10)

        # The backup holds what the primary holds (the consumer's, unacknowledged), and no
        # copy of its own on the dead-letter queues (before: q 0, d1 and d2 5 each).
        poll_until(lambda: cluster.queue_messages(1, "q") == COUNT, 10)
        assert [cluster.queue_messages(1, name) for name in ("d1", "d2")] == [0, 0]
        assert [cluster.queue_messages(0, name) for name in ("d1", "d2")] == [0, 0]

        # The primary dies with the consumer's deliveries: the promoted backup finds them
        # expired and dead-letters each once.
        cluster.kill(0)
        with contextlib.suppress(pika.exceptions.AMQPError):
            connection.close()  # (its broker is gone)
        cluster.promote(1, epoch=2)
        cluster.wait_state(1, "active")
        poll_until(lambda: cluster.queue_messages(1, "q") == 0, 10)
        poll_until(lambda: cluster.queue_messages(1, "d2") == COUNT, 10)
        assert cluster.queue_messages(1, "d1") == COUNT
    finally:
        cluster.stop()
