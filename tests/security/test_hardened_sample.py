"""deploy/qpidd-hardened.conf and deploy/qpidd.acl (issue 13, item 8): they parse, and a
broker started from them (paths pointed at test files, ports free, HA off) serves the
application over TLS within its ACL and refuses guest from the network's view."""

from __future__ import annotations

from pathlib import Path

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker

from broker.options import parse_options
from broker.security.acl import load_acl
from broker.security.roles import Role
from common.polling import free_port, poll_until
from tests.broker_process import BrokerProcess
from tests.security.certs import make_certs
from tests.security.users import write_users

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def test_the_samples_parse() -> None:
    options = parse_options(["--config", str(DEPLOY / "qpidd-hardened.conf")])
    assert options.mgmt_interface == "127.0.0.1" and options.interface == "127.0.0.1"
    assert options.auth and options.sasl_users and options.acl_file
    assert options.ssl_cert_file and options.ssl_key_file and options.ssl_ca_file
    assert options.loopback_users == "guest" and options.ha_username == "replicator"
    acl = load_acl(str(DEPLOY / "qpidd.acl"))
    assert acl.members("applications") == {"app"}
    assert acl.decide("app", "create", "queue", {"name": "app.orders"}).allowed
    assert not acl.decide("app", "create", "queue", {"name": "orders"}).allowed
    assert not acl.decide("guest", "access", "virtualhost", {"name": "/"}).allowed


def test_a_broker_from_the_samples(tmp_path: Path) -> None:
    certs = make_certs(tmp_path / "certs")
    users = write_users(
        tmp_path / "users",
        {"app": "app-pw", "agent": "agent-pw", "replicator": "r-pw"},
        {"agent": [Role.CLUSTER_MANAGER, Role.MONITORING]},
    )
    text = (DEPLOY / "qpidd-hardened.conf").read_text()
    for old, new in [
        ("/etc/qpidd/users", str(users)),
        ("/etc/qpidd/qpidd.acl", str(DEPLOY / "qpidd.acl")),
        ("/etc/qpidd/tls/node1.pem", str(certs.server[0])),
        ("/etc/qpidd/tls/node1.key", str(certs.server[1])),
        ("/etc/qpidd/tls/ca.pem", str(certs.ca.cert)),
    ]:
        text = text.replace(old, new)
    config = tmp_path / "qpidd.conf"
    config.write_text(text)
    ssl_port = free_port()
    broker = BrokerProcess(
        tmp_path / "b",
        args=[f"--config={config}", f"--ssl-port={ssl_port}", "--ha-cluster=no",
              f"--data-dir={tmp_path / 'data'}"],
    ).start()  # fmt: skip
    try:
        import ssl

        context = ssl.create_default_context(cafile=str(certs.ca.cert))
        params = pika.ConnectionParameters(
            "localhost", ssl_port, credentials=pika.PlainCredentials("app", "app-pw"),
            ssl_options=pika.SSLOptions(context, "localhost"), connection_attempts=1,
        )  # fmt: skip
        connection = poll_until(lambda: pika.BlockingConnection(params), 10)
        channel = connection.channel()
        channel.queue_declare("app.orders")
        with pytest.raises(ChannelClosedByBroker) as info:
            connection.channel().queue_declare("orders")
        assert info.value.reply_code == 403
        connection.close()
    finally:
        broker.stop()
