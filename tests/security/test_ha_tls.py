"""Replication links over TLS (issue 13, items 1 and 5): ``ssl:`` addresses in
``ha-brokers-url`` are dialled with TLS, the primary's certificate checked against
``--ssl-ca-file``; a backup that trusts another CA stays joining and says why."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pika
import pytest

from common.polling import free_port, poll_until
from tests.ha.cluster import Cluster
from tests.security.certs import Certs, make_certs
from tests.security.test_tls import client_context, pika_params


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def tls_cluster(
    root: Path, certs: Certs, backup_ca: Path, *extra: str
) -> tuple[Cluster, list[int]]:
    cluster = Cluster(root, 2)
    ssl_ports = [free_port() for _ in cluster.brokers]
    url = ",".join(f"ssl:127.0.0.1:{port}" for port in ssl_ports)
    for i, broker in enumerate(cluster.brokers):
        broker.args = [a for a in broker.args if not a.startswith("--ha-brokers-url")] + [
            f"--ha-brokers-url={url}",
            f"--ssl-port={ssl_ports[i]}",
            f"--ssl-cert-file={certs.server[0]}",
            f"--ssl-key-file={certs.server[1]}",
            f"--ssl-ca-file={certs.ca.cert if i == 0 else backup_ca}",
            *extra,
        ]
    return cluster, ssl_ports


def test_replication_link_over_tls_and_a_fail_over(tmp_path: Path, certs: Certs) -> None:
    """With ``--require-encryption`` too: the link is TLS, nothing plain is needed. Then the
    primary is killed, the backup promoted, and every message confirmed over TLS by the old
    primary is on the new one (issue 30, item 3)."""
    cluster, ssl_ports = tls_cluster(tmp_path, certs, certs.ca.cert, "--require-encryption=yes")
    try:
        cluster.start()
        cluster.promote(0, epoch=1)
        cluster.wait_state(0, "active")
        cluster.wait_state(1, "ready", timeout=30)
        ups = [e for e in cluster.brokers[1].events() if e.get("event") == "ha_link_up"]
        assert ups and ups[-1]["primary"] == f"127.0.0.1:{ssl_ports[0]}"

        context = client_context(certs.ca.cert)
        connection = pika.BlockingConnection(pika_params(ssl_ports[0], context))
        channel = connection.channel()
        channel.confirm_delivery()  # each publish returns once confirmed (or raises)
        channel.queue_declare("tls-orders", durable=True)
        bodies = [f"order-{i}".encode() for i in range(50)]
        for body in bodies:
            channel.basic_publish("", "tls-orders", body, pika.BasicProperties(delivery_mode=2))
        with contextlib.suppress(Exception):
            connection.close()
        cluster.kill(0)
        cluster.promote(1, epoch=2)
        cluster.wait_state(1, "active", timeout=30)
        connection = pika.BlockingConnection(pika_params(ssl_ports[1], context))
        try:
            got = []
            for _method, _props, body in connection.channel().consume(
                "tls-orders", auto_ack=True, inactivity_timeout=10
            ):
                if body is None:
                    break
                got.append(body)
                if len(got) == len(bodies):
                    break
        finally:
            connection.close()
        assert got == bodies  # nothing confirmed lost, in order
    finally:
        cluster.stop()


def test_a_backup_trusting_another_ca_stays_joining(tmp_path: Path, certs: Certs) -> None:
    cluster, ssl_ports = tls_cluster(tmp_path, certs, certs.other_ca.cert)
    try:
        cluster.start()
        cluster.promote(0, epoch=1)
        cluster.wait_state(0, "active")
        primary = f"127.0.0.1:{ssl_ports[0]}"

        def refused() -> dict[str, Any] | None:
            error = cluster.ha(1)["link_error"]
            return dict(error) if error and error["address"] == primary else None

        error = poll_until(refused, 20, "the backup's link_error")
        assert "certificate verify failed" in error["reason"], error
        assert cluster.state(1) == "joining"
    finally:
        cluster.stop()


def test_a_plain_link_to_a_primary_requiring_encryption_is_refused(
    tmp_path: Path, certs: Certs
) -> None:
    """A backup dialling the plain port of a primary with ``--require-encryption`` is
    refused at login (530, "encryption required") and stays joining, saying why."""
    cluster, _ = tls_cluster(tmp_path, certs, certs.ca.cert, "--require-encryption=yes")
    backup = cluster.brokers[1]
    plain = ",".join(f"127.0.0.1:{port}" for port in cluster.ports)
    backup.args = [
        arg for arg in backup.args if not arg.startswith(("--ha-brokers-url", "--require-enc"))
    ] + [f"--ha-brokers-url={plain}"]
    try:
        cluster.start()
        cluster.promote(0, epoch=1)
        cluster.wait_state(0, "active")
        primary = f"127.0.0.1:{cluster.ports[0]}"

        def refused() -> dict[str, Any] | None:
            # not the refusal of a dial before the promotion (its connection.start said
            # "not a primary (joining)"): the one of the primary
            error = cluster.ha(1)["link_error"]
            if not error or error["address"] != primary or "not a primary" in error["reason"]:
                return None
            return dict(error)

        error = poll_until(refused, 20, "the backup's link_error")
        assert "encryption required" in error["reason"], error
        assert cluster.state(1) == "joining"
        events = cluster.brokers[0].events()
        assert any(e["event"] == "connection_refused_unencrypted" for e in events)
    finally:
        cluster.stop()
