"""ha-queue-replication: one queue copied from another broker without a cluster."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pika

from common.polling import poll_until
from tests.broker_process import BrokerProcess
from tests.ha.cluster import http

QPID_HA = str(Path(sys.executable).with_name("qpid-ha"))
ARGS = [
    "--ha-queue-replication=yes",
    "--ha-username=guest",
    "--ha-password=guest",
    "--link-maintenance-interval=0.1",
    "--link-heartbeat-interval=2",
]


def replicate(copy: BrokerProcess, queue: str, source: BrokerProcess) -> None:
    """``qpid-ha -b COPY replicate QUEUE SOURCE`` as an operator runs it (asserted to work)."""
    result = subprocess.run(
        [
            QPID_HA,
            "-b",
            f"guest/guest@127.0.0.1:{copy.mgmt_port}",
            "replicate",
            queue,
            f"127.0.0.1:{source.port}",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr


def test_qpid_ha_replicate_copies_a_queue_and_follows_it(tmp_path: Path) -> None:
    source = BrokerProcess(tmp_path / "source", args=ARGS).start()
    copy = BrokerProcess(tmp_path / "copy", args=ARGS).start()
    try:
        connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", source.port))
        channel = connection.channel()
        channel.queue_declare("orders")
        for i in range(50):
            channel.basic_publish("", "orders", str(i).encode())
        replicate(copy, "orders", source)

        def copied() -> int:
            return int(http("GET", copy.mgmt_port, "/api/queues/orders").get("messages", -1))

        poll_until(lambda: copied() == 50, 10)
        # consumption on the source replicates as dequeues
        for _ in range(20):
            method, _props, _body = channel.basic_get("orders", auto_ack=True)
            assert method is not None
        channel.basic_publish("", "orders", b"new")
        poll_until(lambda: copied() == 31, 10)
        (status,) = http("GET", copy.mgmt_port, "/api/ha/replications")
        assert status["connected"] and status["caught_up"] and status["queue"] == "orders"
        # a name of 250 bytes: its stream is named as replication format 2 names it
        long = "r" * 250
        channel.queue_declare(long)
        for i in range(3):
            channel.basic_publish("", long, str(i).encode())
        body = {"queue": long, "broker": f"127.0.0.1:{source.port}"}
        assert "http_status" not in http("POST", copy.mgmt_port, "/api/ha/replicate", body)
        path = f"/api/queues/%2F/{long}"
        poll_until(lambda: http("GET", copy.mgmt_port, path).get("messages") == 3, 10)
        connection.close()
    finally:
        copy.stop()
        source.stop()


def test_replicate_needs_the_option(tmp_path: Path) -> None:
    plain = BrokerProcess(tmp_path / "plain").start()
    try:
        result = subprocess.run(
            [
                QPID_HA,
                "-b",
                f"guest/guest@127.0.0.1:{plain.mgmt_port}",
                "replicate",
                "q",
                "127.0.0.1:1",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert result.returncode == 1
        assert "ha-queue-replication=yes" in result.stderr
    finally:
        plain.stop()
