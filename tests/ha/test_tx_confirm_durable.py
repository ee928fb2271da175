"""End to end: a publisher confirm of a message queued behind a transaction still in flight
to the backup goes out only once the backup holds the message and has it on its disk
(issue 10's promise; docs/ha-design.md, "Transactions", acknowledgements).

A real 2-broker cluster with stores. The backup is stopped (SIGSTOP) while q2 gets a
backlog, a transaction commits one message on q1 and one on q2, and a plain persistent
message is published with confirms on q1: on the backup, q1's part of the transaction is
staged until q2's part arrives behind the backlog, and the plain message waits behind it.
Once the confirm came, the backup is SIGKILLed: its store must recover the confirmed
message (before, the backup acknowledged the waiting batch at once and the primary
confirmed what the backup had neither in its queue nor on its disk).
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pika
import pytest

from broker.store.journal import Journal
from common.polling import poll_until
from tests.ha.cluster import Cluster

PERSISTENT = pika.BasicProperties(delivery_mode=2)
BACKLOG = 5_000


@pytest.fixture
def slow_pair(tmp_path: Path) -> Iterator[Cluster]:
    """Two brokers whose link outlasts a stopped backup for a few seconds, and with a credit
    of one batch a stream (q2's backlog takes a round trip a batch)."""
    cluster = Cluster(
        tmp_path,
        2,
        "--link-heartbeat-interval=30",
        "--ha-backup-timeout=60",
        "--ha-flow-messages=32",
    ).start()
    try:
        yield cluster
    finally:
        cluster.stop()


def _in_thread(work: Callable[[], None]) -> threading.Event:
    """Run ``work`` on a thread of its own (its own connection); the event is set when it
    returned. An error once the brokers are stopped ends it quietly."""
    done = threading.Event()

    def run() -> None:
        try:
            work()
            done.set()
        except (pika.exceptions.AMQPError, OSError):
            pass

    threading.Thread(target=run, daemon=True).start()
    return done


def _stored(data_dir: Path, copy: Path) -> dict[str, list[bytes]]:
    """What the store in ``data_dir`` recovers (read from a copy: recovery may cut a tail)."""
    shutil.copytree(data_dir, copy)
    state = Journal(copy).recover()
    return {
        q.record.name: [state.messages[m.message_id].body for m in q.messages] for q in state.queues
    }


def test_a_confirm_behind_a_transaction_in_flight_waits_for_the_backups_disk(
    slow_pair: Cluster, tmp_path: Path
) -> None:
    cluster = slow_pair
    cluster.promote(0, epoch=1)
    cluster.wait_state(1, "ready")
    port = cluster.ports[0]

    def connect() -> pika.BlockingConnection:
        return pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))

    connection = connect()
    channel = connection.channel()
    channel.confirm_delivery()
    for name in ("q1", "q2"):
        channel.queue_declare(name, durable=True)
        channel.basic_publish("", name, b"first", PERSISTENT)  # the backup copies both
    backup = cluster.brokers[1]
    assert backup.proc is not None
    os.kill(backup.proc.pid, signal.SIGSTOP)
    try:
        bulk = connection.channel()  # no confirms: the backlog goes out at once
        body = b"x" * 1024
        for _ in range(BACKLOG):
            bulk.basic_publish("", "q2", body, PERSISTENT)
        poll_until(lambda: cluster.queue_messages(0, "q2") == BACKLOG + 1, 30, "the backlog")

        def commit() -> None:
            tx = connect().channel()
            tx.tx_select()
            tx.basic_publish("", "q1", b"tx-0", PERSISTENT)
            tx.basic_publish("", "q2", b"tx-1", PERSISTENT)
            tx.tx_commit()

        _in_thread(commit)
        poll_until(lambda: cluster.queue_messages(0, "q1") == 2, 30, "the commit on the primary")

        def plain() -> None:
            confirming = connect().channel()
            confirming.confirm_delivery()
            confirming.basic_publish("", "q1", b"plain", PERSISTENT)

        confirmed = _in_thread(plain)
        poll_until(lambda: cluster.queue_messages(0, "q1") == 3, 30, "the plain message")
    finally:
        os.kill(backup.proc.pid, signal.SIGCONT)
    poll_until(confirmed.is_set, 60, "the plain message's confirm")
    on_backup = cluster.queue_messages(1, "q1")
    cluster.kill(1)  # at once: what the confirm promised must be on its disk
    cluster.kill(0)  # the commit-ok waits for the killed backup: no graceful stop
    stored = _stored(backup.workdir / "data", tmp_path / "b1-copy")
    # Before: (1, [b"first"]): confirmed, neither in the backup's queue nor on its disk.
    assert (on_backup, stored["q1"]) == (3, [b"first", b"tx-0", b"plain"])
    assert stored["q2"][-1] == b"tx-1" and len(stored["q2"]) == BACKLOG + 2
