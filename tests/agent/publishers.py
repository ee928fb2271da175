"""Three real clients publishing with confirms through a fail-over, each with the settings
docs/clients.md documents: pika (BlockingConnection), aio-pika (its own event loop) and
kombu (py-amqp). Each runs in a thread of its own, numbers its messages, and records every
confirm: the message number, the broker port that confirmed it and when (monotonic).

Every client tries the brokers of its URL list in turn; a connection that fails or is lost
(a closed socket, 320 CONNECTION_FORCED, 530 from a backup, a confirm that does not come
within the client's deadline) goes on to the next address. What is confirmed must be on
whichever broker is primary at the end (:func:`drain`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aio_pika
import aiormq
import kombu.exceptions
import pika
import pika.exceptions
from kombu.connection import Connection as KombuConnection
from kombu.entity import Queue as KombuQueue

from common.polling import poll_until

T = TypeVar("T")

#: The clients' heartbeat (seconds), as docs/clients.md sets it.
HEARTBEAT = 1
#: A client's longest wait for one broker of its list to connect and open (seconds).
CONNECT_TIMEOUT = 1.0
#: The longest a client waits for one confirm before it leaves the broker (seconds).
CONFIRM_TIMEOUT = 2.0 * HEARTBEAT
#: ... for the first replies on a new connection (declare, first confirm): the broker just
#: answered the handshake, so it is not frozen, and a primary just promoted holds them
#: while it recovers (until its expected backups are back: ``ha-backup-timeout``, 5 s).
FIRST_TIMEOUT = 10.0
#: Between two messages of one client (seconds): a few tens a second.
PAUSE = 0.02


@dataclass
class Confirms:
    """What one client had confirmed: (number, port, monotonic time), in order."""

    name: str
    queue: str
    confirmed: list[tuple[int, int, float]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    #: (monotonic time, the broker port connected to or None, the error) of each failure
    failures: list[tuple[float, int | None, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, number: int, port: int) -> None:
        with self.lock:
            self.confirmed.append((number, port, time.monotonic()))

    def failed(self, exc: BaseException, port: int | None = None) -> None:
        text = f"{type(exc).__name__}: {exc}"[:200]
        with self.lock:
            self.errors.append(text)
            self.failures.append((time.monotonic(), port, text))

    def failures_since(self, since: float) -> list[str]:
        """The failures after ``since``: seconds after it, the port, the error."""
        with self.lock:
            return [f"{t - since:.2f} s {p}: {e[:80]}" for t, p, e in self.failures if t > since]

    def first_on(self, ports: set[int], after: float) -> float | None:
        """When the first confirm from one of ``ports`` after ``after`` came."""
        with self.lock:
            return next((t for _, p, t in self.confirmed if p in ports and t > after), None)

    def numbers(self) -> list[int]:
        with self.lock:
            return [n for n, _, _ in self.confirmed]


class Publisher:
    """One client's thread: :meth:`publish_until` runs in it until :meth:`stop`."""

    def __init__(self, confirms: Confirms, ports: list[int]) -> None:
        self.confirms = confirms
        self.ports = ports
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.run, name=confirms.name, daemon=True)

    def start(self) -> Publisher:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=30)
        assert not self.thread.is_alive(), f"{self.confirms.name} did not stop"

    def run(self) -> None:
        raise NotImplementedError


class PikaThread:
    """One pika BlockingConnection's own thread: every call on that connection runs there
    (pika's rule: a BlockingConnection is used from one thread), and the caller waits for
    each with a deadline. pika's BlockingConnection has none for a confirm: its
    ``basic_publish`` waits until the confirm comes or pika's heartbeat check gives up
    (the heartbeat plus 5 s, checked twice: 6 to 12 s at a 1 s heartbeat)."""

    def __init__(self) -> None:
        self.pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="pika")

    def call(self, deadline: float, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` in the connection's thread; TimeoutError after
        ``deadline`` seconds (then :meth:`abandon` the connection)."""
        return self.pool.submit(fn, *args, **kwargs).result(timeout=deadline)

    def abandon(self) -> None:
        """Leave the connection to its thread: a call still waiting there ends when pika's
        heartbeat check gives the connection up (or the broker closes it)."""
        self.pool.shutdown(wait=False, cancel_futures=True)


class PikaPublisher(Publisher):
    """pika's BlockingConnection on the list of the brokers' ConnectionParameters, in a
    thread of its own (:class:`PikaThread`): a confirm deadline."""

    def run(self) -> None:
        params = [
            pika.ConnectionParameters(
                "127.0.0.1",
                port,
                heartbeat=HEARTBEAT,
                connection_attempts=1,
                socket_timeout=CONNECT_TIMEOUT,
                stack_timeout=CONNECT_TIMEOUT,
                blocked_connection_timeout=30,
            )
            for port in self.ports
        ]
        number, queue = 0, self.confirms.queue
        # connecting tries each address for at most stack_timeout
        connect_deadline = len(params) * (CONNECT_TIMEOUT + 1.0)
        while not self.stopping.is_set():
            pika_thread = PikaThread()
            call = pika_thread.call
            connection, port = None, None
            try:
                connection = call(connect_deadline, pika.BlockingConnection, params)
                port = connection._impl.params.port
                channel = call(FIRST_TIMEOUT, connection.channel)
                call(FIRST_TIMEOUT, channel.queue_declare, queue, durable=True)
                call(FIRST_TIMEOUT, channel.confirm_delivery)
                deadline = FIRST_TIMEOUT
                while not self.stopping.is_set():
                    body = str(number).encode()
                    properties = pika.BasicProperties(delivery_mode=2)
                    call(deadline, channel.basic_publish, "", queue, body, properties)
                    deadline = CONFIRM_TIMEOUT
                    self.confirms.add(number, port)
                    number += 1
                    call(CONFIRM_TIMEOUT + PAUSE, connection.sleep, PAUSE)  # heartbeats
            except (pika.exceptions.AMQPError, OSError, ValueError) as exc:  # TimeoutError
                self.confirms.failed(exc, port)
                number += 1  # that one may or may not have been taken: never reused
                time.sleep(0.05)
            finally:
                if connection is not None:
                    with contextlib.suppress(Exception):
                        call(CONFIRM_TIMEOUT, _close_if_open, connection)
                pika_thread.abandon()


def _close_if_open(connection: pika.BlockingConnection) -> None:
    if connection.is_open:
        connection.close()


class AioPikaPublisher(Publisher):
    """aio-pika on its own event loop: each URL of the list in turn, a confirm deadline."""

    def run(self) -> None:
        asyncio.run(self._run())

    async def _run(self) -> None:
        number, queue = 0, self.confirms.queue
        turn = 0
        while not self.stopping.is_set():
            port = self.ports[turn % len(self.ports)]
            turn += 1
            url = f"amqp://guest:guest@127.0.0.1:{port}/?heartbeat={HEARTBEAT}"
            connection = None
            try:
                connection = await aio_pika.connect(url, timeout=CONNECT_TIMEOUT)
                channel = await connection.channel(publisher_confirms=True)
                await channel.declare_queue(queue, durable=True, timeout=FIRST_TIMEOUT)
                exchange = channel.default_exchange
                deadline = FIRST_TIMEOUT
                while not self.stopping.is_set():
                    message = aio_pika.Message(
                        str(number).encode(), delivery_mode=aio_pika.DeliveryMode.PERSISTENT
                    )
                    await exchange.publish(message, queue, timeout=deadline)
                    deadline = CONFIRM_TIMEOUT
                    self.confirms.add(number, port)
                    number += 1
                    await asyncio.sleep(PAUSE)
            except (aiormq.exceptions.AMQPError, aio_pika.exceptions.AMQPException) as exc:
                self.confirms.failed(exc, port)
                number += 1
            except (TimeoutError, OSError, ConnectionError) as exc:
                self.confirms.failed(exc, port)
                number += 1
            finally:
                if connection is not None:
                    with contextlib.suppress(BaseException):
                        await asyncio.wait_for(connection.close(), 1.0)
            await asyncio.sleep(0.05)


class KombuPublisher(Publisher):
    """kombu (py-amqp) with the brokers as fail-over alternates, confirms on, a confirm
    deadline per publish."""

    def run(self) -> None:
        number, turn = 0, 0
        queue = KombuQueue(self.confirms.queue, durable=True, routing_key=self.confirms.queue)
        while not self.stopping.is_set():
            # the list from the next broker each time: a refusal kombu does not fail over
            # on (530 from a backup) starts the next round one address further
            ports = self.ports[turn:] + self.ports[:turn]
            turn = (turn + 1) % len(self.ports)
            urls = ";".join(f"amqp://guest:guest@127.0.0.1:{port}//" for port in ports)
            connection = KombuConnection(
                urls,
                heartbeat=HEARTBEAT,
                connect_timeout=CONNECT_TIMEOUT,
                failover_strategy="round-robin",
                transport_options={"confirm_publish": True},
            )
            lost, port = True, None
            try:
                connection.ensure_connection(
                    max_retries=len(ports), interval_start=0, interval_step=0.05
                )
                port = int(connection.as_uri().rsplit(":", 1)[1].split("/")[0])
                producer = connection.Producer()
                queue(connection.default_channel).declare()
                deadline = FIRST_TIMEOUT
                while not self.stopping.is_set():
                    producer.publish(
                        str(number),
                        routing_key=self.confirms.queue,
                        delivery_mode=2,
                        timeout=deadline,
                    )
                    deadline = CONFIRM_TIMEOUT
                    self.confirms.add(number, port)
                    number += 1
                    time.sleep(PAUSE)
                lost = False
            except (
                TimeoutError,
                OSError,
                kombu.exceptions.OperationalError,
                *connection.connection_errors,  # py-amqp's: 320, 530 ...
                *connection.channel_errors,
            ) as exc:
                self.confirms.failed(exc, port)
                number += 1
                time.sleep(0.05)
            finally:
                with contextlib.suppress(Exception):
                    # lost or timed out: drop the socket without the close handshake
                    # (release() waits for a close-ok that a frozen broker never sends)
                    connection.collect() if lost else connection.release()


PUBLISHERS: dict[str, Callable[[Confirms, list[int]], Publisher]] = {
    "pika": PikaPublisher,
    "aio-pika": AioPikaPublisher,
    "kombu": KombuPublisher,
}


def _admitted(port: int) -> pika.BlockingConnection | None:
    """A connection to ``port``, or None while the broker refuses clients (a primary whose
    member lease lapsed for a moment answers 530 until a grant or the set's commit)."""
    try:
        return pika.BlockingConnection(
            pika.ConnectionParameters("127.0.0.1", port, connection_attempts=1, socket_timeout=5)
        )
    except pika.exceptions.AMQPConnectionError:
        return None


def drain(port: int, queue: str) -> list[int]:
    """Every message of ``queue`` on the broker at ``port`` (got, not acknowledged)."""
    connection: pika.BlockingConnection = poll_until(
        lambda: _admitted(port), 20, f"the broker at {port} admitting a client"
    )
    try:
        channel = connection.channel()
        numbers: list[int] = []
        while True:
            method, _, body = channel.basic_get(queue, auto_ack=False)
            if method is None:
                return numbers
            numbers.append(int(body))
    finally:
        connection.close()
