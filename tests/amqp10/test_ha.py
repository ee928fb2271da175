"""The HA promise in AMQP 1.0 terms, with a real Qpid Proton client against a real
two-broker cluster (``tests/ha/cluster.py``: promotion by hand, a SIGKILL of the primary):

- the backup refuses a 1.0 client with ``amqp:connection:redirect`` naming the primary it
  replicates from (``network-host``, ``port``), and a Proton client that follows the
  redirect reaches the primary and publishes;
- a Proton publisher sending durable messages unsettled, counting a message only once its
  ``accepted`` disposition came, keeps going through the primary's SIGKILL (it reconnects
  round the brokers' addresses and sends again what was in doubt): every accepted message
  is on the new primary (0 lost);
- a Proton receiver that held deliveries of the old primary unsettled gets them again from
  the new one with ``delivery-count`` >= 1 and ``first-acquirer`` false (the delivery
  watermark, as 0-9-1's ``redelivered``);
- node's rhea sends and receives on the new primary, on a queue replicated before the kill.

One cluster for all of it (starting one is most of the time)."""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from proton import Message
from proton.handlers import MessagingHandler
from proton.reactor import Container
from proton.utils import BlockingConnection

from common.polling import poll_until
from tests.amqp10.helpers import rhea_expected, run_rhea
from tests.ha.cluster import Cluster
from tests.ha.failover_clients import connect, publish, queue_names

pytestmark = pytest.mark.timeout(90)
REDIRECT = "amqp:connection:redirect"


def url(port: int) -> str:
    return f"amqp://guest:guest@127.0.0.1:{port}"


def proton(port: int, timeout: float = 5) -> BlockingConnection:
    return BlockingConnection(url(port), allowed_mechs="PLAIN", timeout=timeout)


class RedirectFollower(MessagingHandler):
    """Sends one durable message to ``orders`` at ``port``, following
    ``amqp:connection:redirect`` closes (their descriptions in :attr:`redirects`)."""

    def __init__(self, port: int) -> None:
        super().__init__()
        self.port = port
        self.redirects: list[str] = []
        self.accepted_at: int | None = None
        self._sent = False

    def _connect(self, container: Any, port: int) -> None:
        connection = container.connect(url(port), allowed_mechs="PLAIN", reconnect=False)
        container.create_sender(connection, "orders")

    def on_start(self, event: Any) -> None:
        self._connect(event.container, self.port)

    def on_connection_error(self, event: Any) -> None:
        condition = event.connection.remote_condition
        if condition is not None and condition.name == REDIRECT and len(self.redirects) < 3:
            info = {str(k): v for k, v in (condition.info or {}).items()}
            self.redirects.append(str(condition.description))
            assert info["network-host"] == "127.0.0.1"
            self._connect(event.container, int(info["port"]))

    def on_sendable(self, event: Any) -> None:
        if not self._sent:
            self._sent = True
            event.sender.send(Message(body="via redirect", durable=True))

    def on_accepted(self, event: Any) -> None:
        self.accepted_at = int(event.connection.url.port)
        event.connection.close()


class Publisher(threading.Thread):
    """Sends ``total`` durable messages to ``queue``, each unsettled until accepted; on any
    failure reconnects round ``ports`` and sends the message in doubt again."""

    def __init__(self, ports: list[int], queue: str, total: int) -> None:
        super().__init__(daemon=True)
        self.ports, self.queue, self.total = ports, queue, total
        self.accepted: list[int] = []
        self.failures: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        connection: BlockingConnection | None = None
        sender = None
        i, turn = 0, 0
        deadline = time.monotonic() + 60
        while i < self.total and not self.stop.is_set() and time.monotonic() < deadline:
            try:
                if connection is None or sender is None:
                    port = self.ports[turn % len(self.ports)]
                    turn += 1
                    connection = proton(port, timeout=3)
                    sender = connection.create_sender(self.queue)
                sender.send(Message(body=f"m{i}", durable=True), timeout=5)
                self.accepted.append(i)
                i += 1
            except Exception as exc:  # a broker gone or refusing: try the next one
                self.failures.append(f"{type(exc).__name__}: {exc}"[:200])
                _close(connection)
                connection = sender = None
                self.stop.wait(0.1)
        _close(connection)


def _bytes(body: Any) -> bytes:
    """A data section's body (Proton gives a memoryview)."""
    return bytes(body)


def _close(connection: BlockingConnection | None) -> None:
    if connection is not None:
        with contextlib.suppress(Exception):
            connection.close()


def test_redirect_then_accepted_messages_and_delivery_counts_survive_a_primary_kill(
    tmp_path: Path,
) -> None:
    cluster = Cluster(tmp_path, 2).start(timeout=40)  # slow to start at load 30+
    publisher: Publisher | None = None
    held: BlockingConnection | None = None
    try:
        cluster.promote(0, epoch=1)
        cluster.wait_state(1, "ready")
        connection = connect(cluster.ports[0])
        for name in ("orders", "work", "rhea-ha"):
            connection.channel().queue_declare(name, durable=True)
        connection.close()
        publish(cluster.ports[0], "work", [b"w%d" % i for i in range(10)], delivery_mode=2)
        poll_until(lambda: cluster.queue_messages(1, "work") == 10, 10)
        assert {"orders", "work"} <= queue_names(cluster, 1)

        # the backup sends a 1.0 client to the primary it replicates from
        follower = RedirectFollower(cluster.ports[1])
        Container(follower).run()
        assert len(follower.redirects) == 1, follower.redirects
        assert "HA backup: not the primary" in follower.redirects[0]
        assert follower.accepted_at == cluster.ports[0]

        # a receiver holds five deliveries of the old primary, never settled
        held = proton(cluster.ports[0])
        receiver = held.create_receiver("work", credit=5)
        first = [receiver.receive(timeout=10) for _ in range(5)]
        assert [m.body for m in first] == [b"w%d" % i for i in range(5)]
        assert all(m.delivery_count == 0 and m.first_acquirer for m in first)

        publisher = Publisher(cluster.ports, "orders", 200)
        publisher.start()
        poll_until(lambda: len(publisher.accepted) >= 60, 30)
        cluster.kill(0)
        cluster.promote(1, epoch=2)
        cluster.wait_state(1, "active")
        publisher.join(60)
        assert not publisher.is_alive()
        assert len(publisher.accepted) == 200, publisher.failures[-3:]
        assert publisher.failures  # it did meet the kill
        rhea = run_rhea(cluster.ports[1], "rhea-ha", 10)  # node's rhea on the new primary
        assert rhea["accepted"] == 10 and rhea["received"] == rhea_expected(10)

        again = proton(cluster.ports[1], timeout=10)
        try:
            receiver = again.create_receiver("work", credit=10)
            back = [receiver.receive(timeout=10) for _ in range(10)]
            counts = {_bytes(m.body): (m.delivery_count, m.first_acquirer) for m in back}
            for message in first:  # delivered by the old primary: marked
                count, first_acquirer = counts[_bytes(message.body)]
                assert count >= 1 and not first_acquirer, (message.body, count)
            stored = cluster.queue_messages(1, "orders")  # accepted, and any sent twice
            orders = again.create_receiver("orders", credit=stored)
            bodies = {str(orders.receive(timeout=10).body) for _ in range(stored)}
        finally:
            _close(again)
        lost = [i for i in publisher.accepted if f"m{i}" not in bodies]
        assert lost == [] and "via redirect" in bodies
    finally:
        if publisher is not None:
            publisher.stop.set()
        _close(held)
        cluster.stop()
