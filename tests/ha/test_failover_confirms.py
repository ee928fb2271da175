"""Confirmed messages across fail-over: none lost to a SIGKILL, confirms held while recovering."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from common.polling import poll_until
from tests.ha.cluster import Cluster
from tests.ha.failover_clients import (
    WINDOW,
    Publisher,
    connect,
    drain_consume,
    drain_get,
    events,
    publish,
    queue_names,
    wait_members,
)


# -- confirmed messages survive a SIGKILL of the primary -----------------------------
def stream_position(cluster: Cluster, primary: int, backup: int, queue: str) -> dict[str, Any]:
    """The primary's replication position of ``queue`` towards ``backup`` (/api/ha)."""
    url = f"127.0.0.1:{cluster.ports[backup]}"
    for row in cluster.ha(primary)["backups"]:
        if row["url"] == url:
            for position in row["queues"]:
                if position["queue"] == queue:
                    return dict(position)
    return {}


@pytest.mark.parametrize("lagging", [False, True], ids=["in-step", "promoted-backup-lagging"])
def test_every_confirmed_message_survives_primary_sigkill(tmp_path: Path, lagging: bool) -> None:
    # ha-flow-messages=32: one replication batch in flight per queue and backup, so a
    # stopped backup really falls behind instead of buffering everything in its socket.
    # A 10 s link heartbeat: the stopped backup stays linked (and its lag readable) while
    # the test waits for it to fall behind, however loaded the machine.
    cluster = Cluster(tmp_path, 3, "--ha-flow-messages=32", "--link-heartbeat-interval=10").start()
    publisher: Publisher | None = None
    stopped: int | None = None
    try:
        cluster.promote(0, epoch=1)
        cluster.wait_state(1, "ready")
        cluster.wait_state(2, "ready")
        connection = connect(cluster.ports[0])
        connection.channel().queue_declare("orders", durable=True)
        connection.close()
        poll_until(lambda: {"orders"} <= queue_names(cluster, 1) & queue_names(cluster, 2), 10)
        wait_members(cluster, 1, ready=2)
        # Lagging: a window above one replication batch (256 events), so that once broker 1
        # stops, what the publisher has outstanding cannot all be in broker 1's one batch in
        # flight, and broker 2 gets ahead of it whatever the timing.
        window = 2 * 256 if lagging else WINDOW
        publisher = Publisher(cluster.ports, "orders", window=window)
        publisher.start()
        poll_until(lambda: len(publisher.confirmed) >= 400, 20)
        if lagging:
            # the backup about to be promoted stops reading: the primary must hold the
            # confirms of what it has not acknowledged, while broker 2 gets ahead of it
            proc = cluster.brokers[1].proc
            assert proc is not None
            stopped = proc.pid
            os.kill(stopped, signal.SIGSTOP)

            def diverged() -> bool:
                # Broker 1 lacks at least one message broker 2 has: any lag is a divergence.
                behind = stream_position(cluster, 0, 1, "orders")
                ahead = stream_position(cluster, 0, 2, "orders")
                return bool(
                    behind
                    and ahead
                    and behind["lag"] >= 1
                    and ahead["last_sent_id"] > behind["last_sent_id"]
                )

            poll_until(diverged, 10)
            behind = stream_position(cluster, 0, 1, "orders")
            ahead = stream_position(cluster, 0, 2, "orders")
            assert ahead["last_sent_id"] > behind["last_sent_id"]
        cluster.kill(0)  # mid-stream: up to `window` messages unconfirmed
        confirmed_before = set(publisher.confirmed)
        if stopped is not None:
            os.kill(stopped, signal.SIGCONT)
            stopped = None
        assert cluster.promote(1, epoch=2)["state"] == "recovering"  # expects broker 2
        poll_until(lambda: len(publisher.confirmed) >= len(confirmed_before) + 400, 20)
        publisher.finish()
        cluster.wait_state(1, "active")
        assert publisher.connections >= 2  # it did fail over
        count = cluster.queue_messages(1, "orders")
        # the remaining backup follows the new primary and holds the same messages
        poll_until(lambda: cluster.queue_messages(2, "orders") == count, 10)
        bodies = drain_consume(cluster.ports[1], "orders", count)
        ids = Counter(int(body) for body in bodies)
        # nothing confirmed is lost, old primary's confirms included
        assert confirmed_before <= set(ids)
        assert set(ids) == publisher.confirmed == set(range(publisher.sent))
        duplicates = sum(n - 1 for n in ids.values())
        assert duplicates <= publisher.resent <= 2 * window
        assert max(ids.values()) <= 2
        poll_until(lambda: cluster.queue_messages(2, "orders") == 0, 10)
    finally:
        if stopped is not None:
            os.kill(stopped, signal.SIGCONT)
        if publisher is not None and publisher.is_alive():
            publisher.stop_soon()
        cluster.stop()


def test_confirmed_messages_survive_a_second_failover_after_backups_diverged(
    tmp_path: Path,
) -> None:
    """Broker 2 holds messages of the dead primary that the new primary never got.

    Their replication ids must not be taken for the new primary's messages: broker 2 has to
    drop them and receive the new, confirmed ones, or a second fail-over loses those.
    """
    cluster = Cluster(tmp_path, 3, "--ha-flow-messages=32").start()
    paused: list[int] = []
    try:
        cluster.promote(0, epoch=1)
        cluster.wait_state(1, "ready")
        cluster.wait_state(2, "ready")
        connection = connect(cluster.ports[0])
        channel = connection.channel()
        channel.queue_declare("q")
        poll_until(lambda: {"q"} <= queue_names(cluster, 1) & queue_names(cluster, 2), 10)
        wait_members(cluster, 1, ready=2)
        pids = [p.pid for p in (cluster.brokers[1].proc, cluster.brokers[2].proc) if p]
        os.kill(pids[0], signal.SIGSTOP)
        paused.append(pids[0])
        for i in range(10):  # unconfirmed: broker 2 gets them all, broker 1 one batch
            channel.basic_publish("", "q", f"old{i}".encode())

            def arrived(count: int = i + 1) -> bool:
                return cluster.queue_messages(2, "q") == count

            poll_until(arrived, 10)
        os.kill(pids[1], signal.SIGSTOP)
        paused.append(pids[1])
        cluster.kill(0)
        os.kill(pids[0], signal.SIGCONT)
        paused.remove(pids[0])
        assert cluster.promote(1, epoch=2)["state"] == "recovering"  # expects broker 2
        new = [f"new{i}".encode() for i in range(5)]
        failure: list[BaseException] = []

        def publish_new() -> None:
            try:
                publish(cluster.ports[1], "q", new)
            except BaseException as exc:
                failure.append(exc)

        publisher = threading.Thread(target=publish_new, daemon=True)
        publisher.start()
        poll_until(lambda: cluster.ha(1)["held_confirms"] >= 1, 10)  # new0 is on broker 1
        os.kill(pids[1], signal.SIGCONT)  # broker 2 comes back holding old1..old9
        paused.remove(pids[1])
        publisher.join(10)
        assert not publisher.is_alive() and not failure, failure
        cluster.wait_state(1, "active")
        # what broker 1 holds (read without acknowledging: it stays on the queue)
        reader = connect(cluster.ports[1])
        ch = reader.channel()
        held = []
        while (got := ch.basic_get("q", auto_ack=False))[0] is not None:
            held.append(got[2])
        reader.close()
        assert held[-5:] == new and all(b.startswith(b"old") for b in held[:-5])
        poll_until(lambda: cluster.queue_messages(1, "q") == len(held), 10)
        poll_until(lambda: cluster.queue_messages(2, "q") == len(held), 10)
        cluster.kill(1)
        cluster.promote(2, epoch=3)
        cluster.wait_state(2, "active")
        assert drain_get(cluster.ports[2], "q") == held  # no confirmed message lost
    finally:
        for pid in paused:
            os.kill(pid, signal.SIGCONT)
        cluster.stop()


# -- confirms held while the new primary is recovering -------------------------------------
def test_confirm_held_until_expected_backup_is_ready(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 3).start()
    stopped: int | None = None
    try:
        cluster.promote(0, epoch=1)
        cluster.wait_state(1, "ready")
        cluster.wait_state(2, "ready")
        connection = connect(cluster.ports[0])
        connection.channel().queue_declare("q")
        connection.close()
        poll_until(lambda: "q" in queue_names(cluster, 1) and "q" in queue_names(cluster, 2), 10)
        cluster.wait_state(2, "ready")
        wait_members(cluster, 1, ready=2)
        proc = cluster.brokers[2].proc
        assert proc is not None
        stopped = proc.pid
        os.kill(stopped, signal.SIGSTOP)
        cluster.kill(0)
        promoted_at = time.monotonic()
        answer = cluster.promote(1, epoch=2)
        assert answer["state"] == "recovering"

        confirmed_at: list[float] = []
        failure: list[BaseException] = []

        def publish_one() -> None:
            try:
                client = connect(cluster.ports[1])  # clients may connect while recovering
                ch = client.channel()
                ch.confirm_delivery()
                ch.basic_publish("", "q", b"held")
                confirmed_at.append(time.monotonic())
                client.close()
            except BaseException as exc:
                failure.append(exc)

        publisher = threading.Thread(target=publish_one, daemon=True)
        publisher.start()
        # the confirm is held for the expected, silent backup
        poll_until(lambda: cluster.ha(1)["held_confirms"] == 1, 10)
        assert cluster.state(1) == "recovering" and not confirmed_at and not failure
        assert cluster.queue_messages(1, "q") == 1
        resumed_at = time.monotonic()
        os.kill(stopped, signal.SIGCONT)
        stopped = None
        publisher.join(10)
        assert not failure and confirmed_at, failure
        assert confirmed_at[0] > resumed_at  # released by backup 2 catching up...
        assert confirmed_at[0] - promoted_at < 5.0  # ...not by ha-backup-timeout
        cluster.wait_state(1, "active")
        (active,) = [e for e in events(cluster, 1, "ha_state_changed") if e["new"] == "active"]
        assert active["old"] == "recovering" and active.get("dropped") == []
        assert {m["state"] for m in cluster.ha(1)["members"]} == {"active", "ready"}
        assert cluster.queue_messages(2, "q") == 1
        assert cluster.ha(1)["held_confirms"] == 0
    finally:
        if stopped is not None:
            os.kill(stopped, signal.SIGCONT)
        cluster.stop()
