"""Synchronous configuration and transactions end to end: a declare-ok or a commit-ok is a
promise across fail-over."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from common.polling import holds_for, poll_until
from tests.ha.cluster import Cluster
from tests.ha.failover_clients import connect, queue_names


@contextlib.contextmanager
def in_sync_pair(root: Path) -> Iterator[Cluster]:
    """A primary (broker 0, epoch 1) and a backup it counts in sync (broker 1)."""
    cluster = Cluster(root, 2).start()
    try:
        cluster.promote(0, epoch=1)
        cluster.wait_state(1, "ready")
        poll_until(lambda: cluster.ha(0)["in_sync"]["wanted"], 10)
        yield cluster
    finally:
        cluster.stop()


@contextlib.contextmanager
def stopped_backup(cluster: Cluster) -> Iterator[Callable[[], None]]:
    """SIGSTOP broker 1; the call resumes it (and leaving the block always does)."""
    proc = cluster.brokers[1].proc
    assert proc is not None
    pid = proc.pid
    os.kill(pid, signal.SIGSTOP)
    resumed = False

    def resume() -> None:
        nonlocal resumed
        if not resumed:
            resumed = True
            os.kill(pid, signal.SIGCONT)

    try:
        yield resume
    finally:
        resume()


def answered_in_thread(call: Callable[[], object]) -> tuple[threading.Thread, threading.Event]:
    answered = threading.Event()

    def run() -> None:
        call()
        answered.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, answered


def test_declare_ok_waits_for_the_backup_and_the_queue_survives_the_primary(
    tmp_path: Path,
) -> None:
    with in_sync_pair(tmp_path) as cluster:
        connection = connect(cluster.ports[0])
        channel = connection.channel()
        channel.queue_declare("before", durable=True)  # answered while the backup follows
        with stopped_backup(cluster) as resume:
            declaring, answered = answered_in_thread(
                lambda: channel.queue_declare("orders", durable=True)
            )
            # The backup holds nothing of "orders" yet: no declare-ok.
            holds_for(lambda: not answered.is_set(), 1.0, "declare-ok held for the backup")
            resume()
            declaring.join(timeout=10)
            assert answered.is_set()
        cluster.kill(0)  # at once: the answered declare must survive
        assert cluster.promote(1, epoch=2)["state"] in ("recovering", "active")
        assert {"before", "orders"} <= queue_names(cluster, 1)


def test_a_backup_that_left_the_in_sync_set_no_longer_holds_declares(tmp_path: Path) -> None:
    with in_sync_pair(tmp_path) as cluster:
        cluster.kill(1)
        cluster.commit_in_sync(0)
        connection = connect(cluster.ports[0])
        connection.channel().queue_declare("after")  # answered: nobody else to wait for
        connection.close()


def test_tx_commit_ok_waits_for_the_backup_and_the_messages_survive_the_primary(
    tmp_path: Path,
) -> None:
    with in_sync_pair(tmp_path) as cluster:
        connection = connect(cluster.ports[0])
        channel = connection.channel()
        channel.queue_declare("orders", durable=True)
        poll_until(lambda: "orders" in queue_names(cluster, 1), 10)
        channel.tx_select()
        for i in range(5):
            channel.basic_publish("", "orders", str(i).encode())
        with stopped_backup(cluster) as resume:
            committing, committed = answered_in_thread(channel.tx_commit)
            holds_for(lambda: not committed.is_set(), 1.0, "commit-ok held for the backup")
            resume()
            committing.join(timeout=10)
            assert committed.is_set()
        cluster.kill(0)
        cluster.promote(1, epoch=2)
        assert cluster.queue_messages(1, "orders") == 5
