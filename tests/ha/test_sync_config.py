"""Synchronous configuration and transactions end to end: a declare-ok or a commit-ok is a
promise across fail-over."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

from common.polling import holds_for, poll_until
from tests.ha.cluster import Cluster
from tests.ha.failover_clients import connect, queue_names


def test_declare_ok_waits_for_the_backup_and_the_queue_survives_the_primary(
    tmp_path: Path,
) -> None:
    cluster = Cluster(tmp_path, 2).start()
    stopped: int | None = None
    try:
        cluster.promote(0, epoch=1)
        cluster.wait_state(1, "ready")
        poll_until(lambda: cluster.ha(0)["in_sync"]["wanted"], 10)
        connection = connect(cluster.ports[0])
        channel = connection.channel()
        channel.queue_declare("before", durable=True)  # answered while the backup follows
        proc = cluster.brokers[1].proc
        assert proc is not None
        stopped = proc.pid
        os.kill(stopped, signal.SIGSTOP)
        answered = threading.Event()

        def declare() -> None:
            channel.queue_declare("orders", durable=True)
            answered.set()

        declaring = threading.Thread(target=declare, daemon=True)
        declaring.start()
        # The backup holds nothing of "orders" yet: no declare-ok.
        holds_for(lambda: not answered.is_set(), 1.0, "declare-ok held for the backup")
        os.kill(stopped, signal.SIGCONT)
        stopped = None
        declaring.join(timeout=10)
        assert answered.is_set()
        cluster.kill(0)  # at once: the answered declare must survive
        assert cluster.promote(1, epoch=2)["state"] in ("recovering", "active")
        assert {"before", "orders"} <= queue_names(cluster, 1)
    finally:
        if stopped is not None:
            os.kill(stopped, signal.SIGCONT)
        cluster.stop()


def test_a_backup_that_left_the_in_sync_set_no_longer_holds_declares(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 2).start()
    try:
        cluster.promote(0, epoch=1)
        cluster.wait_state(1, "ready")
        poll_until(lambda: cluster.ha(0)["in_sync"]["wanted"], 10)
        cluster.kill(1)
        cluster.commit_in_sync(0)
        connection = connect(cluster.ports[0])
        connection.channel().queue_declare("after")  # answered: nobody else to wait for
        connection.close()
    finally:
        cluster.stop()


def test_tx_commit_ok_waits_for_the_backup_and_the_messages_survive_the_primary(
    tmp_path: Path,
) -> None:
    cluster = Cluster(tmp_path, 2).start()
    stopped: int | None = None
    try:
        cluster.promote(0, epoch=1)
        cluster.wait_state(1, "ready")
        poll_until(lambda: cluster.ha(0)["in_sync"]["wanted"], 10)
        connection = connect(cluster.ports[0])
        channel = connection.channel()
        channel.queue_declare("orders", durable=True)
        poll_until(lambda: "orders" in queue_names(cluster, 1), 10)
        channel.tx_select()
        for i in range(5):
            channel.basic_publish("", "orders", str(i).encode())
        proc = cluster.brokers[1].proc
        assert proc is not None
        stopped = proc.pid
        os.kill(stopped, signal.SIGSTOP)
        committed = threading.Event()

        def commit() -> None:
            channel.tx_commit()
            committed.set()

        committing = threading.Thread(target=commit, daemon=True)
        committing.start()
        holds_for(lambda: not committed.is_set(), 1.0, "commit-ok held for the backup")
        os.kill(stopped, signal.SIGCONT)
        stopped = None
        committing.join(timeout=10)
        assert committed.is_set()
        cluster.kill(0)
        cluster.promote(1, epoch=2)
        assert cluster.queue_messages(1, "orders") == 5
    finally:
        if stopped is not None:
            os.kill(stopped, signal.SIGCONT)
        cluster.stop()
