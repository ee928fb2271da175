"""The back-off after failed logins with real clients on a real broker (issue 25, item 5).

Guesses come from their own loopback addresses (127.0.0.2, .3, .4: sources of their own)
over AMQP, HTTP Basic and the console's login form, all at once. Each is delayed once its
failures pile up (a wait of at least the back-off's, ``login_delayed``), never locked out
(the right password after the guesses logs in). Meanwhile a client from 127.0.0.1 logs in
with its own user at once and its AMQP round trips stay fast. A backup whose replication
user is being guessed from elsewhere still links at once: that user from the
``ha-brokers-url`` addresses is exempt.
"""

from __future__ import annotations

import base64
import http.client
import socket
import statistics
import threading
import time
import urllib.parse
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pika
from pamqp import commands, frame

from broker.amqp import framing
from broker.security.login_backoff import BackoffPolicy
from broker.security.roles import Role
from common.polling import poll_until
from tests.broker_process import BrokerProcess
from tests.drill.log_schema import check_log_file
from tests.ha.cluster import Cluster
from tests.ha.cluster import http as ha_http
from tests.security.users import write_users

POLICY = BackoffPolicy()
GUESSES = 6  # the last three wait 0.25, 0.5 and 1 s


def amqp_login(port: int, source: str, user: str, password: str) -> bool:
    """One raw AMQP login from ``source``: True when the broker took it (connection.tune)."""
    with socket.create_connection(
        ("127.0.0.1", port), timeout=20, source_address=(source, 0)
    ) as sock:
        sock.sendall(framing.PROTOCOL_HEADER)
        sock.recv(4096)  # connection.start
        response = f"\0{user}\0{password}"
        start_ok = commands.Connection.StartOk(
            client_properties={"product": "guesser"}, mechanism="PLAIN", response=response
        )
        sock.sendall(frame.marshal(start_ok, 0))
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
            if b"ACCESS_REFUSED" in answer:
                return False
            if len(answer) >= 12 and answer[7:11] == b"\x00\x0a\x00\x1e":  # Tune
                return True
        return False


def http_login(port: int, source: str, user: str, password: str, console: bool) -> bool:
    """One Basic-authenticated API request, or one console login form, from ``source``."""
    connection = http.client.HTTPConnection(
        "127.0.0.1", port, timeout=20, source_address=(source, 0)
    )
    try:
        if console:
            body = urllib.parse.urlencode({"user": user, "password": password})
            headers = {"Content-Type": "application/x-www-form-urlencoded"}
            connection.request("POST", "/console/login", body=body, headers=headers)
        else:
            token = base64.b64encode(f"{user}:{password}".encode()).decode()
            connection.request("GET", "/api/queues", headers={"Authorization": f"Basic {token}"})
        answer = connection.getresponse()
        answer.read()
        return answer.status in (200, 303)
    finally:
        connection.close()


def guess(login: Any, user: str, right: str) -> list[float]:
    """GUESSES wrong passwords then the right one; each attempt's duration."""
    took = []
    for i in range(GUESSES + 1):
        began = time.monotonic()
        accepted = login(user, right if i == GUESSES else f"wrong-{i}")
        took.append(time.monotonic() - began)
        assert accepted == (i == GUESSES), (user, i)  # slowed, never locked out
    return took


def test_guessing_is_delayed_while_another_client_stays_fast(tmp_path: Path) -> None:
    passwords = {"guest": "guest", "admin": "a-pw", "watcher": "w-pw", "manager": "m-pw"}
    passwords["app"] = "app-pw"  # the other client: its first login pays a hash
    monitoring: dict[str, Iterable[Role]] = {
        name: [Role.MONITORING] for name in ("admin", "watcher", "manager")
    }
    users = write_users(tmp_path / "users", passwords, monitoring)
    broker = BrokerProcess(tmp_path / "b", [f"--sasl-users={users}"]).start()
    port, mgmt = broker.port, broker.mgmt_port
    guessers = {
        "127.0.0.2": lambda u, p: amqp_login(port, "127.0.0.2", u, p),
        "127.0.0.3": lambda u, p: http_login(mgmt, "127.0.0.3", u, p, console=False),
        "127.0.0.4": lambda u, p: http_login(mgmt, "127.0.0.4", u, p, console=True),
    }
    targets = dict(zip(guessers, ("admin", "watcher", "manager"), strict=True))
    took: dict[str, list[float]] = {}
    errors: list[BaseException] = []

    def run(source: str) -> None:
        try:
            took[source] = guess(guessers[source], targets[source], passwords[targets[source]])
        except BaseException as exc:  # reported by the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(s,), daemon=True) for s in guessers]
    try:
        connection = pika.BlockingConnection(pika.URLParameters(broker.url))
        channel = connection.channel()
        channel.queue_declare("rtt")
        for thread in threads:
            thread.start()
        trips: list[float] = []
        other_login = None
        while any(t.is_alive() for t in threads):
            sent = time.monotonic()
            channel.basic_publish("", "rtt", b"x")
            for _method, _props, _body in channel.consume("rtt", auto_ack=True):
                break
            trips.append(time.monotonic() - sent)
            if other_login is None and len(trips) > 20:  # the guessers are being delayed
                began = time.monotonic()
                pika.BlockingConnection(
                    pika.URLParameters(f"amqp://app:app-pw@127.0.0.1:{port}/%2F")
                ).close()
                other_login = time.monotonic() - began
        channel.cancel()
        connection.close()
        for thread in threads:
            thread.join(timeout=30)
    finally:
        broker.stop()
    assert not errors, errors
    for source, durations in took.items():
        for i, delay in enumerate(POLICY.delay_of(n) for n in range(GUESSES + 1)):
            assert durations[i] >= delay, (source, i, durations)  # the wait is enforced
        assert sum(durations) >= 1.75, (source, durations)
    delayed = [e for e in broker.events() if e["event"] == "login_delayed"]
    assert {(e["peer"], e["user"]) for e in delayed} == set(targets.items())
    assert max(e["delay"] for e in delayed) == POLICY.delay_of(GUESSES)
    assert other_login is not None and other_login < 1.0, other_login  # app: no wait
    assert check_log_file(broker.log_file)[1] == []  # login_delayed as the schema says
    assert statistics.median(trips) < 0.05, f"round trips slowed: {statistics.median(trips)}"


def test_a_backup_links_while_its_replication_user_is_guessed(tmp_path: Path) -> None:
    users = write_users(tmp_path / "users", {"guest": "guest", "replicator": "r-secret"})
    cluster = Cluster(tmp_path / "c", 2, f"--sasl-users={users}")
    for broker in cluster.brokers:
        broker.args = [a for a in broker.args if not a.startswith(("--ha-user", "--ha-pass"))]
        broker.args += ["--ha-username=replicator", "--ha-password=r-secret"]
    primary, backup = cluster.brokers
    try:
        primary.start()
        cluster.promote(0, epoch=1)
        cluster.wait_state(0, "active")
        # The primary dialled itself as replicator while joining, so it remembers that
        # password (no hash, no wait, exempt or not): forget it, as a restart would.
        assert ha_http("POST", primary.mgmt_port, "/api/users/reload")["users"] == 2
        for i in range(POLICY.free_failures + 1):  # from elsewhere: counted, then delayed
            assert not amqp_login(primary.port, "127.0.0.2", "replicator", f"wrong-{i}")
        backup.start()
        cluster.wait_state(1, "ready", timeout=20)
        delayed = [e for e in primary.events() if e["event"] == "login_delayed"]
        assert {e["peer"] for e in delayed} == {"127.0.0.2"}  # the guesser, not the backup
        opened = poll_until(
            lambda: [
                e
                for e in primary.events()
                if e["event"] == "connection_opened" and e.get("user") == "replicator"
            ],
            10,
        )
        assert opened[0]["peer"].startswith("127.0.0.1:")
    finally:
        cluster.stop()
