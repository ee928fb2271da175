"""A real primary and backup: replication, backups refusing clients, fail-over by promote."""

from __future__ import annotations

import json
from pathlib import Path

import pika
import pytest

from common.polling import poll_until
from tests.ha.cluster import Cluster, http
from tests.ha.failover_clients import wait_members


def connect(port: int) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))


def test_brokers_start_joining_and_refuse_clients(pair: Cluster) -> None:
    assert pair.state(0) == "joining" and pair.state(1) == "joining"
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        connect(pair.ports[0])


def test_promote_replicate_fail_over(pair: Cluster) -> None:
    answer = pair.promote(0, epoch=1)
    assert answer["state"] in ("recovering", "active") and answer["epoch"] == 1
    pair.wait_state(0, "active")
    pair.wait_state(1, "ready")
    # clients with the URL list skip the backup and reach the primary
    params = [pika.ConnectionParameters("127.0.0.1", port) for port in reversed(pair.ports)]
    connection = pika.BlockingConnection(params)
    channel = connection.channel()
    channel.queue_declare("orders", durable=True)
    channel.confirm_delivery()
    for i in range(500):
        channel.basic_publish("", "orders", f"m{i}".encode())
    connection.close()
    # every confirmed message is on the backup
    poll_until(lambda: pair.queue_messages(1, "orders") == 500, 10)
    pair.kill(0)
    answer = pair.promote(1, epoch=2)
    assert answer["epoch"] == 2
    pair.wait_state(1, "active")
    connection = connect(pair.ports[1])
    channel = connection.channel()
    bodies = []
    for _ in range(500):
        method, _props, body = channel.basic_get("orders", auto_ack=True)
        assert method is not None
        bodies.append(body)
    assert bodies == [f"m{i}".encode() for i in range(500)]
    connection.close()


def test_promote_from_catch_up_refused_and_joining_refused_when_cluster_exists(
    pair: Cluster,
) -> None:
    pair.promote(0)
    pair.wait_state(0, "active")
    pair.wait_state(1, "ready")
    answer = pair.promote(0)  # already primary: idempotent
    assert answer["state"] == "active"
    pair.brokers[1].stop()
    pair.brokers[1].start()  # comes back joining, then catches up
    pair.wait_state(1, "joining", "catch-up", "ready")
    pair.wait_state(1, "ready")


def test_configuration_replication_follows_the_rules(pair: Cluster) -> None:
    pair.promote(0)
    pair.wait_state(1, "ready")
    connection = connect(pair.ports[0])
    channel = connection.channel()
    channel.exchange_declare("events", "topic", durable=True)
    channel.queue_declare("all")
    channel.queue_declare("conf", arguments={"qpid.replicate": "configuration"})
    channel.queue_declare("none", arguments={"qpid.replicate": "none"})
    channel.queue_bind("all", "events", "a.#")
    channel.queue_bind("all", "amq.topic", "b.#")  # a standard exchange: with its queue
    channel.queue_bind("none", "events", "n.#")  # unreplicated queue: not replicated
    channel.queue_bind("none", "amq.topic", "m.#")  # the same
    for queue in ("all", "conf", "none"):
        channel.basic_publish("", queue, b"x")
    connection.close()
    backup = pair.brokers[1].mgmt_port

    def backup_config() -> tuple[set[str], set[tuple[str, str, str]]]:
        from tests.ha.cluster import http

        queues = {q["name"] for q in http("GET", backup, "/api/queues")}
        bindings = {
            (b["source"], b["destination"], b["routing_key"])
            for b in http("GET", backup, "/api/bindings")
        }
        return queues, bindings

    wanted = {("events", "all", "a.#"), ("amq.topic", "all", "b.#")}
    poll_until(lambda: backup_config() == ({"all", "conf"}, wanted), 10)
    poll_until(lambda: pair.queue_messages(1, "all") == 1, 10)
    assert pair.queue_messages(1, "conf") == 0  # configuration only: no messages
    # deletions replicate too
    connection = connect(pair.ports[0])
    channel = connection.channel()
    channel.queue_unbind("all", "events", "a.#")
    channel.queue_unbind("all", "amq.topic", "b.#")
    channel.queue_delete("conf")
    connection.close()
    poll_until(lambda: backup_config() == ({"all"}, set()), 10)


def test_old_primary_restarted_comes_back_as_backup(pair: Cluster) -> None:
    pair.promote(0, epoch=1)
    pair.wait_state(1, "ready")
    pair.kill(0)
    pair.promote(1, epoch=2)
    pair.wait_state(1, "active")
    pair.brokers[0].start()
    pair.wait_state(0, "ready")
    assert pair.ha(0)["epoch"] == 2
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        connect(pair.ports[0])


def test_silent_backup_is_held_until_its_removal_is_committed(pair: Cluster) -> None:
    import os
    import signal
    import threading

    pair.promote(0)
    pair.wait_state(1, "ready")
    backup = pair.brokers[1].proc
    assert backup is not None
    connection = connect(pair.ports[0])
    channel = connection.channel()
    channel.queue_declare("q")  # before: a declare-ok waits for the backup too
    channel.confirm_delivery()
    os.kill(backup.pid, signal.SIGSTOP)
    try:
        confirmed = threading.Event()

        def publish() -> None:
            channel.basic_publish("", "q", b"held until the backup's removal is committed")
            confirmed.set()

        publisher = threading.Thread(target=publish)
        publisher.start()
        # link-heartbeat-interval is 2 s: the silent backup goes after at most 2 x 2 s, but
        # it was in sync, so the confirm waits for the cluster manager's commit.
        poll_until(lambda: pair.ha(0)["in_sync"]["pending_removal"], 10)
        assert not confirmed.is_set()
        answer = pair.commit_in_sync(0)
        assert len(answer["released"]) == 1 and answer["pending_removal"] == []
        publisher.join(timeout=10)
        assert confirmed.is_set()
        connection.close()
    finally:
        os.kill(backup.pid, signal.SIGCONT)
    pair.wait_state(1, "ready")


def test_joining_broker_not_promoted_while_a_cluster_is_active(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 2)
    # broker 1 cannot log in to the primary: it stays joining
    cluster.brokers[1].args = [
        a if not a.startswith("--ha-password") else "--ha-password=wrong"
        for a in cluster.brokers[1].args
    ]
    cluster.start()
    try:
        cluster.promote(0)
        cluster.wait_state(0, "active")
        assert cluster.state(1) == "joining"
        answer = cluster.promote(1)
        assert answer["http_status"] == 409
        assert "beyond joining" in answer["reason"]
        assert cluster.state(1) == "joining"
    finally:
        cluster.stop()


def test_qpid_ha_commands(pair: Cluster) -> None:
    import subprocess
    import sys

    qpid_ha = str(Path(sys.executable).with_name("qpid-ha"))

    def run(i: int, *args: str) -> subprocess.CompletedProcess[str]:
        address = f"guest/guest@127.0.0.1:{pair.brokers[i].mgmt_port}"
        return subprocess.run(
            [qpid_ha, "-b", address, *args], capture_output=True, text=True, timeout=30
        )

    refused = run(0, "promote")
    assert refused.returncode == 2 and "cluster-manager command" in refused.stderr
    assert run(0, "status", "--is-primary").returncode == 1
    assert run(0, "ready").returncode == 1
    assert run(0, "--cluster-manager", "promote", "--epoch", "5").returncode == 0
    pair.wait_state(1, "ready")
    assert run(0, "status", "--expect=primary").returncode == 0
    assert run(1, "ready").returncode == 0
    table = run(0, "status", "--all").stdout
    assert "active" in table and "ready" in table
    assert str(pair.ports[1]) in table


def test_remaining_backup_follows_the_new_primary(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, 3).start()
    try:
        cluster.promote(0, epoch=1)
        cluster.wait_state(1, "ready")
        cluster.wait_state(2, "ready")
        wait_members(cluster, 1, ready=2)  # broker 1 heard it: it will expect broker 2
        connection = connect(cluster.ports[0])
        channel = connection.channel()
        channel.queue_declare("q")
        channel.confirm_delivery()
        for i in range(200):
            channel.basic_publish("", "q", str(i).encode())
        connection.close()
        cluster.kill(0)
        assert cluster.promote(1, epoch=2)["state"] == "recovering"  # expects broker 2
        cluster.wait_state(2, "ready")
        cluster.wait_state(1, "active", timeout=4.0)  # before ha-backup-timeout (5 s)
        members = {m["state"] for m in cluster.ha(1)["members"]}
        assert members == {"active", "ready"}
        assert cluster.queue_messages(2, "q") == 200
        # publishing on the new primary reaches the remaining backup
        connection = connect(cluster.ports[1])
        channel = connection.channel()
        channel.confirm_delivery()
        channel.basic_publish("", "q", b"after")
        connection.close()
        poll_until(lambda: cluster.queue_messages(2, "q") == 201, 10)
    finally:
        cluster.stop()


def test_api_ha_shows_positions_and_lag(pair: Cluster) -> None:
    pair.promote(0)
    pair.wait_state(1, "ready")
    connection = connect(pair.ports[0])
    channel = connection.channel()
    channel.queue_declare("q")
    channel.confirm_delivery()
    for _ in range(10):
        channel.basic_publish("", "q", b"x")
    connection.close()
    status = pair.ha(0)
    (backup,) = status["backups"]
    assert backup["ready"] and backup["held_confirms"] == 0
    (queue,) = backup["queues"]
    assert queue["queue"] == "q" and queue["last_sent_id"] == queue["last_id"] == 10
    assert queue["lag"] == 0 and queue["caught_up"]
    (copy,) = pair.ha(1)["queues"]
    assert copy["name"] == "q" and copy["last_id"] == 10 and copy["messages"] == 10
    assert status["replication_position"] == pair.ha(1)["replication_position"] == 10
    # the agent's health check: the same without a row per queue (megabytes at 10,000)
    for i in (0, 1):
        summary = http("GET", pair.brokers[i].mgmt_port, "/api/ha?queues=summary")
        assert "queues" not in summary and summary["replication_position"] == 10
        assert all("queues" not in row for row in summary["backups"])
        assert [row["id"] for row in summary["backups"]] == ([backup["id"]] if i == 0 else [])
        assert summary["state"] == pair.ha(i)["state"]
    bad = http("GET", pair.brokers[0].mgmt_port, "/api/ha?queues=all")
    assert bad["http_status"] == 400
    assert "queues must be rows or summary: 'all'" in json.dumps(bad)
