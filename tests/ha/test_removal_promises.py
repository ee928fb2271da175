"""End to end: answers that promise a removal survive a fail-over (issue 10).

purge-ok, and the commit-ok of a transaction that acknowledges messages, go to the client
only once every in-sync backup has applied the dequeues (and, for a durable queue, has them
on its disk): the primary SIGKILLed the moment the answer arrives, a promoted backup must not
bring the messages back. delete-ok of a queue with messages: the promoted backup has no
such queue.

A real 3-broker cluster with stores and a credit of one batch a stream. Backup b1 is
stopped (SIGSTOP) and one more message is published, so b1's queue stream has a batch in
flight and no credit: the dequeues cannot even reach b1's socket. The answer is awaited on
a thread that kills the primary as soon as it comes; b1 is resumed once the primary has
done the removal. Before the fix purge-ok (and commit-ok) went out at once, the primary died
while b1 was stopped, and b1, promoted, served the purged messages again.
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
from tests.ha.cluster import Cluster, http

PERSISTENT = pika.BasicProperties(delivery_mode=2)
MESSAGES = 20


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """Three brokers whose links outlast a stopped backup, one batch of credit a stream."""
    cluster = Cluster(
        tmp_path,
        3,
        "--link-heartbeat-interval=30",
        "--ha-backup-timeout=60",
        "--ha-flow-messages=32",
    ).start()
    try:
        cluster.promote(0, epoch=1)
        cluster.wait_state(1, "ready")
        cluster.wait_state(2, "ready")
        yield cluster
    finally:
        for broker in cluster.brokers:
            if broker.proc is not None and broker.alive():
                os.kill(broker.proc.pid, signal.SIGCONT)
        cluster.stop()


def _connect(cluster: Cluster) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", cluster.ports[0]))


def _fill(cluster: Cluster, queue: str) -> pika.BlockingConnection:
    """``MESSAGES`` persistent confirmed messages on a durable ``queue`` (every backup has
    them); then b1 stopped, and one more message that takes b1's credit on the stream."""
    connection = _connect(cluster)
    channel = connection.channel()
    channel.queue_declare(queue, durable=True)
    channel.confirm_delivery()
    for i in range(MESSAGES):
        channel.basic_publish("", queue, f"m{i}".encode(), PERSISTENT)
    backup = cluster.brokers[1]
    assert backup.proc is not None
    os.kill(backup.proc.pid, signal.SIGSTOP)
    connection.channel().basic_publish("", queue, b"extra", PERSISTENT)  # no confirm
    poll_until(lambda: cluster.queue_messages(0, queue) == MESSAGES + 1, 15, "the extra message")
    return connection


def _answer_then_kill(cluster: Cluster, request: Callable[[], None]) -> threading.Event:
    """Run ``request`` on a thread of its own; SIGKILL the primary the moment it returns."""
    answered = threading.Event()

    def run() -> None:
        try:
            request()
        except (pika.exceptions.AMQPError, OSError):
            return
        cluster.kill(0)
        answered.set()

    threading.Thread(target=run, daemon=True).start()
    return answered


def _resume_b1_and_promote(cluster: Cluster, answered: threading.Event) -> None:
    backup = cluster.brokers[1]
    assert backup.proc is not None
    os.kill(backup.proc.pid, signal.SIGCONT)
    poll_until(answered.is_set, 30, "the answer")
    assert not cluster.brokers[0].alive()
    cluster.promote(1, epoch=2)
    cluster.wait_state(1, "recovering", "active")


def _primary_done(cluster: Cluster, check: Callable[[], bool], answered: threading.Event) -> bool:
    if answered.is_set():  # answered while b1 was stopped: the primary is dead already
        return True
    try:
        return check()
    except OSError:
        return answered.is_set()


def _stored(cluster: Cluster, i: int, copy: Path) -> dict[str, list[bytes]]:
    """What broker ``i``'s store recovers, after a SIGKILL of it (read from a copy)."""
    cluster.kill(i)
    shutil.copytree(cluster.brokers[i].workdir / "data", copy)
    state = Journal(copy).recover()
    return {
        q.record.name: [state.messages[m.message_id].body for m in q.messages] for q in state.queues
    }


def test_purge_ok_means_every_in_sync_backup_applied_the_purge(
    cluster: Cluster, tmp_path: Path
) -> None:
    _fill(cluster, "q")

    def purge() -> None:
        connection = _connect(cluster)
        connection.channel().queue_purge("q")

    answered = _answer_then_kill(cluster, purge)
    poll_until(
        lambda: _primary_done(cluster, lambda: cluster.queue_messages(0, "q") == 0, answered),
        15,
        "the purge on the primary",
    )
    _resume_b1_and_promote(cluster, answered)
    # Before: 21 (purge-ok went out while b1 had not even received the dequeues).
    assert cluster.queue_messages(1, "q") == 0
    assert _stored(cluster, 1, tmp_path / "b1-copy")["q"] == []


def test_commit_ok_of_acknowledgements_means_every_in_sync_backup_applied_them(
    cluster: Cluster, tmp_path: Path
) -> None:
    connection = _connect(cluster)
    channel = connection.channel()
    channel.queue_declare("q", durable=True)
    channel.confirm_delivery()
    for i in range(MESSAGES):
        channel.basic_publish("", "q", f"m{i}".encode(), PERSISTENT)
    consumer = _connect(cluster).channel()
    consumer.tx_select()
    tags = []
    for _ in range(MESSAGES):
        method, _props, _body = consumer.basic_get("q")
        assert method is not None
        tags.append(method.delivery_tag)
    backup = cluster.brokers[1]
    assert backup.proc is not None
    os.kill(backup.proc.pid, signal.SIGSTOP)
    connection.channel().basic_publish("", "q", b"extra", PERSISTENT)  # takes b1's credit
    poll_until(lambda: cluster.queue_messages(0, "q") == 1, 15, "the extra message")
    consumer.basic_ack(tags[-1], multiple=True)  # inside the transaction: not yet settled

    answered = _answer_then_kill(cluster, consumer.tx_commit)
    poll_until(
        lambda: _primary_done(
            cluster,
            lambda: _unacked(cluster, "q") == 0,
            answered,
        ),
        15,
        "the commit on the primary",
    )
    _resume_b1_and_promote(cluster, answered)
    # Before: 21 (commit-ok went out while b1 had not received the acknowledgements).
    assert cluster.queue_messages(1, "q") == 1
    assert _stored(cluster, 1, tmp_path / "b1-copy")["q"] == [b"extra"]


def _unacked(cluster: Cluster, queue: str) -> int:
    data = http("GET", cluster.brokers[0].mgmt_port, f"/api/queues/{queue}")
    return int(data.get("messages_unacked", -1))


def test_delete_ok_of_a_queue_with_messages_survives_a_failover(
    cluster: Cluster, tmp_path: Path
) -> None:
    _fill(cluster, "q")

    def delete() -> None:
        _connect(cluster).channel().queue_delete("q")

    answered = _answer_then_kill(cluster, delete)
    poll_until(
        lambda: _primary_done(cluster, lambda: cluster.queue_messages(0, "q") == -1, answered),
        15,
        "the deletion on the primary",
    )
    _resume_b1_and_promote(cluster, answered)
    assert cluster.queue_messages(1, "q") == -1
    assert "q" not in _stored(cluster, 1, tmp_path / "b1-copy")
