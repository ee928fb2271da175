"""Safe defaults (issue 13): the management API on loopback unless ``--mgmt-interface``
opens it, and the default user guest only from a loopback address (``--loopback-users``).

The broker runs in one network namespace and the client in another on the same bridge, so
the client's address is a real non-loopback address (tests run as root).
"""

from __future__ import annotations

import base64
import http.client
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest
from pika.exceptions import ProbableAccessDeniedError, ProbableAuthenticationError

from tests.netns import Lan, is_root
from tests.security.netns_broker import MGMT_PORT, PORT, NetnsBroker
from tests.security.users import write_users

pytestmark = pytest.mark.skipif(not is_root(), reason="network namespaces need root")


@pytest.fixture
def lan() -> Iterator[Lan]:
    lan = Lan(subnet=131).start()
    try:
        lan.add_host("server", 1)
        lan.add_host("client", 2)
        yield lan
    finally:
        lan.delete()


def amqp_login(host: str, user: str, password: str) -> str:
    """``ok`` or the pika exception's class name."""
    params = pika.ConnectionParameters(
        host,
        PORT,
        credentials=pika.PlainCredentials(user, password),
        connection_attempts=1,
        socket_timeout=5,
        blocked_connection_timeout=5,
    )
    try:
        connection = pika.BlockingConnection(params)
    except (ProbableAuthenticationError, ProbableAccessDeniedError) as exc:
        return type(exc).__name__
    connection.close()
    return "ok"


def mgmt_get(host: str, path: str, user: str, password: str) -> int:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    conn = http.client.HTTPConnection(host, MGMT_PORT, timeout=5)
    try:
        conn.request("GET", path, headers={"Authorization": f"Basic {token}"})
        return conn.getresponse().status
    finally:
        conn.close()


def mgmt_reachable(host: str) -> bool:
    try:
        mgmt_get(host, "/api/status", "x", "x")
    except ConnectionRefusedError:
        return False
    return True


def test_guest_only_from_loopback_and_management_on_loopback(lan: Lan, tmp_path: Path) -> None:
    server, client = lan.hosts["server"], lan.hosts["client"]
    users = write_users(tmp_path / "users", {"guest": "guest", "alice": "alice-secret"})
    broker = NetnsBroker(server, tmp_path / "b", [f"--sasl-users={users}"]).start()
    try:
        address = server.address
        # From another host: guest is refused, alice logs in; the management API is closed.
        assert client.call(lambda: amqp_login(address, "guest", "guest")) != "ok"
        assert client.call(lambda: amqp_login(address, "alice", "alice-secret")) == "ok"
        assert client.call(lambda: mgmt_reachable(address)) is False
        # On the broker's host, over loopback: guest logs in, the management API answers.
        assert server.call(lambda: amqp_login("127.0.0.1", "guest", "guest")) == "ok"
        assert server.call(lambda: mgmt_get("127.0.0.1", "/api/queues", "guest", "guest")) == 200
        refusals = [e for e in broker.events() if e["event"] == "authentication_failed"]
        assert len(refusals) == 1
        assert "loopback" in refusals[0]["reason"]
        assert refusals[0]["connection"].startswith(client.address + ":")
    finally:
        broker.stop()


def test_opened_management_still_refuses_guest_from_the_network(lan: Lan, tmp_path: Path) -> None:
    server, client = lan.hosts["server"], lan.hosts["client"]
    users = write_users(tmp_path / "users", {"guest": "guest", "alice": "alice-secret"})
    broker = NetnsBroker(
        server, tmp_path / "b", [f"--sasl-users={users}", "--mgmt-interface=0.0.0.0"]
    ).start()
    try:
        address = server.address
        assert client.call(lambda: mgmt_get(address, "/api/status", "x", "x")) == 200
        assert client.call(lambda: mgmt_get(address, "/api/queues", "guest", "guest")) == 401
        assert client.call(lambda: mgmt_get(address, "/api/queues", "alice", "alice-secret")) in (
            200,
            403,  # alice has no management role (issue 13, item 4)
        )
    finally:
        broker.stop()


def test_loopback_users_can_be_emptied(lan: Lan, tmp_path: Path) -> None:
    server, client = lan.hosts["server"], lan.hosts["client"]
    broker = NetnsBroker(server, tmp_path / "b", ["--loopback-users="]).start()
    try:
        assert client.call(lambda: amqp_login(server.address, "guest", "guest")) == "ok"
    finally:
        broker.stop()
