"""A backup restarts from its own store (issue 12, item 2): it keeps the messages it holds
and fetches only what it lacks; a queue deleted and declared again while it was down is
another queue (its uuid), and what it holds of the old one is dropped, not taken for the
new one's messages. The kept queue's arguments (a 64-bit float, a 255-byte field name, 64
levels: issue 24) come back from the backup's store exactly: with 0.1.0's store format
they came back changed, so the backup took its own queue for another one and fetched all
of it again."""

from __future__ import annotations

import json
from typing import Any

import pika

from common.polling import poll_until
from tests.ha.cluster import Cluster, http

PERSISTENT = pika.BasicProperties(delivery_mode=2)
DEEP: dict[str, Any] = {"leaf": 0.1}
for _ in range(62):  # 64 levels with the arguments table
    DEEP = {"d": DEEP}
#: What the kept queue is declared with (the management API: JSON floats are 64-bit).
ARGUMENTS = {"k" * 255: 0.1, "deep": DEEP}


def publish(
    channel: pika.adapters.blocking_connection.BlockingChannel, queue: str, n: int, tag: str
) -> None:
    for i in range(n):
        channel.basic_publish("", queue, f"{tag}{i}".encode(), PERSISTENT)


def sent_to_backup(cluster: Cluster, queue: str) -> int:
    """Messages the primary's stream of ``queue`` sent to its (one) backup since it
    subscribed (``/api/ha`` ``backups[].queues[].sent``)."""
    for backup in cluster.ha(0).get("backups") or []:
        for row in backup.get("queues") or []:
            if row["queue"] == queue:
                return int(row["sent"])
    return -1


def recovered_messages(cluster: Cluster, i: int) -> int:
    """``messages`` of the last ``store_recovered`` line of broker ``i``'s log."""
    count = -1
    for line in cluster.brokers[i].log_file.read_text().splitlines():
        if '"store_recovered"' in line:
            count = int(json.loads(line)["messages"])
    return count


def test_a_restarted_backup_keeps_its_store_and_fetches_only_what_it_lacks(
    pair: Cluster,
) -> None:
    pair.promote(0, epoch=1)
    pair.wait_state(1, "ready")
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", pair.ports[0]))
    channel = connection.channel()
    channel.confirm_delivery()
    body = {"durable": True, "arguments": ARGUMENTS}
    assert "http_status" not in http("PUT", pair.brokers[0].mgmt_port, "/api/queues/kept", body)
    channel.queue_declare("again", durable=True)
    publish(channel, "kept", 300, "k")
    publish(channel, "again", 20, "old")
    poll_until(lambda: pair.queue_messages(1, "kept") == 300, 10)

    pair.kill(1)  # SIGKILL: its store is what it wrote before acknowledging
    pair.commit_in_sync(0)  # the cluster manager's part: without it confirms wait for it
    publish(channel, "kept", 50, "new")
    for _ in range(100):  # the first 100 are consumed and acknowledged meanwhile
        method, _props, _body = channel.basic_get("kept", auto_ack=True)
        assert method is not None
    channel.queue_delete("again")
    channel.queue_declare("again", durable=True)  # another queue, ids from 1 again
    publish(channel, "again", 5, "fresh")

    pair.brokers[1].start()
    pair.wait_state(1, "ready")
    assert recovered_messages(pair, 1) == 320  # it kept its store ...
    assert sent_to_backup(pair, "kept") == 50  # ... and fetched only the 50 it lacked
    poll_until(lambda: pair.queue_messages(1, "kept") == 250, 10)
    assert pair.queue_messages(1, "again") == 5
    connection.close()

    pair.kill(0)
    pair.promote(1, epoch=2)
    pair.wait_state(1, "active")
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", pair.ports[1]))
    channel = connection.channel()

    def drain(queue: str) -> list[str]:
        bodies: list[str] = []
        while True:
            method, _props, body = channel.basic_get(queue, auto_ack=True)
            if method is None:
                return bodies
            bodies.append(body.decode())

    assert http("GET", pair.brokers[1].mgmt_port, "/api/queues/kept")["arguments"] == ARGUMENTS
    expected = [f"k{i}" for i in range(100, 300)] + [f"new{i}" for i in range(50)]
    assert drain("kept") == expected
    assert drain("again") == [f"fresh{i}" for i in range(5)]
    connection.close()
