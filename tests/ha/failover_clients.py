"""Clients of the fail-over scenarios (tests/ha/test_failover_*.py) and what they check.

Each test starts its own :class:`~tests.ha.cluster.Cluster` in ``tmp_path`` and stops it in
a ``finally``. Clients follow the fail-over URL list the way Qpid clients do: a backup
refuses them (530), a dead broker refuses the TCP connection, so they move on to the next
address, and a publisher re-sends what was not confirmed when its connection dropped.

The invariants are seed 001's: every confirmed message is on the new primary (duplicates
of re-sent unconfirmed messages allowed, and counted); messages acknowledged before the
primary died come back only if their acknowledgement was still in flight; a recovering
primary holds confirms for the backups it expects.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any

import aio_pika
import pika
import pika.exceptions
from pamqp import commands

from common.polling import poll_until, poll_until_async
from tests.ha.cluster import Cluster, http

#: Publisher confirms a publisher may wait for at once (its replay buffer).
WINDOW = 32


# -- clients ---------------------------------------------------------------------------
def params(ports: list[int]) -> list[pika.ConnectionParameters]:
    """The fail-over URL list."""
    return [
        pika.ConnectionParameters("127.0.0.1", port, connection_attempts=1, socket_timeout=5)
        for port in ports
    ]


def connect(*ports: int) -> pika.BlockingConnection:
    return pika.BlockingConnection(params(list(ports)))


def connect_failover(ports: list[int], timeout: float = 15.0) -> pika.BlockingConnection:
    """Go round the URL list until some broker accepts (the primary)."""

    def attempt() -> pika.BlockingConnection | None:
        try:
            return pika.BlockingConnection(params(ports))
        except (pika.exceptions.AMQPConnectionError, ValueError):
            # ValueError: pika's word for a socket reset between the TCP connect and its
            # getpeername(), as when a broker is SIGKILLed with this connection accepted
            return None

    connection: pika.BlockingConnection = poll_until(attempt, timeout, interval=0.05)
    return connection


def publish(port: int, queue: str, bodies: list[bytes], **properties: Any) -> None:
    connection = connect(port)
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        props = pika.BasicProperties(**properties) if properties else None
        for body in bodies:
            channel.basic_publish("", queue, body, properties=props)
    finally:
        connection.close()


def drain_get(port: int, queue: str) -> list[bytes]:
    """Every message of ``queue``, head first, with basic.get (acknowledged). On a new
    primary whose backups have not acknowledged a delivery watermark yet, a get on a queue
    with messages is held until they have (docs/ha-design.md), never answered get-empty."""
    connection = connect(port)
    try:
        channel = connection.channel()
        bodies: list[bytes] = []
        while True:
            method, _props, body = channel.basic_get(queue, auto_ack=True)
            if method is None:
                return bodies
            bodies.append(body)
    finally:
        connection.close()


def drain_consume(port: int, queue: str, count: int) -> list[bytes]:
    """``count`` messages with a consumer, then check the queue is empty."""
    connection = connect(port)
    try:
        channel = connection.channel()
        channel.basic_qos(prefetch_count=500)
        bodies: list[bytes] = []
        if count:
            for _method, _props, body in channel.consume(
                queue, auto_ack=True, inactivity_timeout=10
            ):
                assert body is not None, f"only {len(bodies)} of {count} messages"
                bodies.append(body)
                if len(bodies) == count:
                    break
            channel.cancel()
        method, _props, _body = channel.basic_get(queue, auto_ack=False)
        assert method is None, "more messages than the management API counted"
        return bodies
    finally:
        connection.close()


def queue_names(cluster: Cluster, i: int) -> set[str]:
    return {q["name"] for q in http("GET", cluster.brokers[i].mgmt_port, "/api/queues")}


def events(cluster: Cluster, i: int, name: str) -> list[dict[str, Any]]:
    return [e for e in cluster.brokers[i].events() if e.get("event") == name]


def wait_members(cluster: Cluster, at: int, ready: int) -> None:
    """Broker ``at`` (a backup) has heard that broker ``ready`` is a ready member."""
    url = f"127.0.0.1:{cluster.ports[ready]}"

    def heard() -> bool:
        return any(
            m.get("url") == url and m.get("state") == "ready" for m in cluster.ha(at)["members"]
        )

    poll_until(heard, 10)


class Publisher(threading.Thread):
    """Publishes ``0, 1, 2...`` with confirms, up to ``window`` (:data:`WINDOW`) unconfirmed
    at once.

    When the connection drops it goes round the URL list until a primary accepts it and
    re-sends every message still unconfirmed (as Qpid clients do), so confirmed messages
    and re-sent ones are known exactly.
    """

    def __init__(self, ports: list[int], queue: str, window: int = WINDOW) -> None:
        super().__init__(daemon=True)
        self.window = window
        self.urls = [f"amqp://guest:guest@127.0.0.1:{port}/%2F" for port in ports]
        self.queue = queue
        self.confirmed: set[int] = set()
        self.sent = 0  # distinct ids sent: 0 .. sent - 1
        self.resent = 0  # messages sent again after a connection loss
        self.connections = 0
        self.error: BaseException | None = None
        self._stopping = threading.Event()

    def run(self) -> None:
        try:
            asyncio.run(self._publish())
        except BaseException as exc:
            self.error = exc

    def stop_soon(self) -> None:
        """Send nothing new (the thread ends once what was sent is confirmed)."""
        self._stopping.set()

    def finish(self, timeout: float = 30.0) -> None:
        """Stop sending new messages, wait until everything sent is confirmed."""
        self._stopping.set()
        self.join(timeout)
        assert not self.is_alive(), "publisher did not finish"
        assert self.error is None, f"publisher failed: {self.error!r}"
        assert self.confirmed == set(range(self.sent))

    async def _connect(self) -> aio_pika.abc.AbstractConnection:
        async def one_round() -> aio_pika.abc.AbstractConnection | None:
            for url in self.urls:
                try:
                    return await aio_pika.connect(url, timeout=2)
                except Exception:
                    continue
            return None

        return await poll_until_async(
            one_round, 20.0, "a broker to accept the publisher", interval=0.05
        )

    async def _publish(self) -> None:
        resend: list[int] = []
        while resend or not self._stopping.is_set():
            connection = await self._connect()
            self.connections += 1
            in_flight: dict[asyncio.Future[Any], int] = {}
            try:
                channel = await connection.channel(publisher_confirms=True)
                exchange = channel.default_exchange
                while True:
                    while len(in_flight) < self.window:
                        if resend:
                            msg_id = resend.pop(0)
                            self.resent += 1
                        elif not self._stopping.is_set():
                            msg_id = self.sent
                            self.sent += 1
                        else:
                            break
                        body = str(msg_id).encode()
                        publishing: asyncio.Future[Any] = asyncio.ensure_future(
                            exchange.publish(
                                aio_pika.Message(body), routing_key=self.queue, timeout=15
                            )
                        )
                        in_flight[publishing] = msg_id
                    if not in_flight:
                        return  # stopping, everything confirmed
                    done, _ = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
                    lost = False
                    for finished in done:
                        msg_id = in_flight.pop(finished)
                        try:
                            confirmation = finished.result()
                        except Exception:
                            lost = True
                            resend.append(msg_id)
                            continue
                        if isinstance(confirmation, commands.Basic.Ack):
                            self.confirmed.add(msg_id)
                        else:
                            resend.append(msg_id)
                    if lost:
                        raise ConnectionError("connection lost while publishing")
            except Exception:
                # Whatever is still in flight is unconfirmed: send it again elsewhere.
                for pending, msg_id in in_flight.items():
                    pending.cancel()
                    resend.append(msg_id)
                resend.sort()
            finally:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(connection.close(), timeout=2)
