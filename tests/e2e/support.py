"""Helpers for the end-to-end tests: names, log events, a raw AMQP socket client, a health check.

The raw client speaks AMQP 0-9-1 through pamqp over a plain socket, so a test can do a valid
handshake and then send exactly the bytes it wants (garbage, bad frames) and read exactly
what the broker answers. Every wait has a deadline; nothing sleeps to synchronise.
"""

from __future__ import annotations

import json
import socket
import struct
import time
import uuid
from typing import Any

import pika
from pamqp import commands, frame, heartbeat
from pamqp.base import Frame as Method
from pamqp.exceptions import UnmarshalingException
from pika.adapters.blocking_connection import BlockingChannel

from common.polling import poll_until
from tests.broker_process import BrokerProcess

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
_FRAME_HEAD = struct.Struct(">BHI")


def unique(prefix: str) -> str:
    """A queue or exchange name no other test uses."""
    return f"e2e.{prefix}.{uuid.uuid4().hex[:10]}"


def pika_params(broker: BrokerProcess, **overrides: Any) -> pika.URLParameters:
    params = pika.URLParameters(broker.url)
    params.socket_timeout = 5
    params.blocked_connection_timeout = 10
    for name, value in overrides.items():
        setattr(params, name, value)
    return params


def connect(broker: BrokerProcess, **overrides: Any) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika_params(broker, **overrides))


# -- log events ----------------------------------------------------------------------------
def log_size(broker: BrokerProcess) -> int:
    """Where the log ends now: pass it as ``since`` to see only later events."""
    try:
        return broker.log_file.stat().st_size
    except FileNotFoundError:
        return 0


def events(broker: BrokerProcess, since: int = 0) -> list[dict[str, Any]]:
    """The broker's JSON log events after byte offset ``since`` (partial lines skipped)."""
    try:
        with open(broker.log_file, "rb") as log:
            log.seek(since)
            data = log.read()
    except FileNotFoundError:
        return []
    found = []
    for line in data.decode("utf-8", "replace").splitlines():
        try:
            found.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return found


def peer_port(event: dict[str, Any]) -> int | None:
    """The client port of the connection an event is about ("127.0.0.1:PORT #ID")."""
    name = event.get("connection")
    if not isinstance(name, str) or ":" not in name:
        return None
    address = name.split(" #", 1)[0]
    try:
        return int(address.rsplit(":", 1)[1])
    except ValueError:
        return None


def connection_events(
    broker: BrokerProcess, event: str, port: int, since: int = 0
) -> list[dict[str, Any]]:
    """Events named ``event`` about the connection from client port ``port``.

    Client ports are reused by later connections: pass ``since`` (a :func:`log_size` taken
    before the connection was made) to leave out earlier connections' events.
    """
    return [e for e in events(broker, since) if e.get("event") == event and peer_port(e) == port]


def wait_for_event(
    broker: BrokerProcess, event: str, port: int, since: int = 0, timeout: float = 5.0
) -> dict[str, Any]:
    """Poll the log until an ``event`` about the connection from ``port`` appears."""

    def seen() -> str:
        about_port = [e for e in events(broker, since) if peer_port(e) == port]
        return f"a {event!r} event for port {port}; seen: {about_port}"

    found = poll_until(lambda: connection_events(broker, event, port, since), timeout, seen)
    return found[0]


# -- a raw AMQP client -----------------------------------------------------------------------
class RawClient:
    """A socket speaking AMQP 0-9-1 frame by frame (pamqp), for malformed-input tests."""

    def __init__(self, broker: BrokerProcess, timeout: float = 5.0) -> None:
        self.broker = broker
        self.log_offset = log_size(broker)
        self.sock = socket.create_connection(("127.0.0.1", broker.port), timeout=timeout)
        self.local_port = int(self.sock.getsockname()[1])
        self.timeout = timeout
        self.buffer = b""
        self.eof = False

    def wait_for_event(self, event: str, timeout: float = 5.0) -> dict[str, Any]:
        """The first ``event`` the broker logged about this connection."""
        return wait_for_event(self.broker, event, self.local_port, self.log_offset, timeout)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # sending
    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_method(self, channel: int, method: Method) -> None:
        self.send(frame.marshal(method, channel))

    # receiving
    def _recv(self, deadline: float) -> bytes:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("nothing received before the deadline")
        self.sock.settimeout(remaining)
        try:
            data = self.sock.recv(65536)
        except TimeoutError:
            raise TimeoutError("nothing received before the deadline") from None
        except ConnectionResetError:
            data = b""
        if not data:
            self.eof = True
        return data

    def read_exact(self, count: int, timeout: float | None = None) -> bytes:
        """``count`` bytes, or fewer if the broker closes the socket first."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while len(self.buffer) < count and not self.eof:
            self.buffer += self._recv(deadline)
        data, self.buffer = self.buffer[:count], self.buffer[count:]
        return data

    def read_frame(self, timeout: float | None = None) -> tuple[int, Any] | None:
        """The next frame as ``(channel, pamqp object)``; None at end of stream.

        A frame pamqp cannot decode (content the broker forwarded as it was published)
        comes back as its raw bytes.
        """
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            if len(self.buffer) >= 7:
                _, channel, size = _FRAME_HEAD.unpack_from(self.buffer)
                if len(self.buffer) >= size + 8:
                    raw, self.buffer = self.buffer[: size + 8], self.buffer[size + 8 :]
                    try:
                        _, channel, value = frame.unmarshal(raw)
                    except UnmarshalingException:
                        return channel, raw
                    return channel, value
            if self.eof:
                return None
            self.buffer += self._recv(deadline)

    def expect(self, cls: type[Method], timeout: float | None = None) -> Any:
        """Skip heartbeats until a ``cls`` method arrives."""
        while True:
            received = self.read_frame(timeout)
            if received is None:
                raise AssertionError(f"connection closed while waiting for {cls.__name__}")
            _, value = received
            if isinstance(value, heartbeat.Heartbeat):
                continue
            if isinstance(value, cls):
                return value
            raise AssertionError(f"expected {cls.__name__}, got {value!r}")

    def wait_eof(self, timeout: float | None = None) -> list[Any]:
        """Read (and return) frames until the broker closes the socket."""
        frames: list[Any] = []
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            received = self.read_frame(max(deadline - time.monotonic(), 0.001))
            if received is None:
                return frames
            frames.append(received[1])

    # conversations
    def handshake(
        self,
        user: str = "guest",
        password: str = "guest",
        heartbeat: int = 0,
        frame_max: int = 131072,
    ) -> commands.Connection.Tune:
        self.send(PROTOCOL_HEADER)
        self.expect(commands.Connection.Start)
        self.send_method(
            0,
            commands.Connection.StartOk(
                client_properties={"product": "e2e raw client"},
                mechanism="PLAIN",
                response=f"\0{user}\0{password}",
                locale="en_US",
            ),
        )
        tune: commands.Connection.Tune = self.expect(commands.Connection.Tune)
        self.send_method(
            0,
            commands.Connection.TuneOk(
                channel_max=tune.channel_max, frame_max=frame_max, heartbeat=heartbeat
            ),
        )
        self.send_method(0, commands.Connection.Open(virtual_host="/"))
        self.expect(commands.Connection.OpenOk)
        return tune

    def open_channel(self, number: int = 1) -> None:
        self.send_method(number, commands.Channel.Open())
        self.expect(commands.Channel.OpenOk)

    def expect_connection_close(self, timeout: float | None = None) -> commands.Connection.Close:
        """Wait for connection.close, answer close-ok, and wait for the socket to close."""
        close: commands.Connection.Close = self.expect(commands.Connection.Close, timeout)
        self.send_method(0, commands.Connection.CloseOk())
        self.wait_eof(timeout)
        return close


# -- pika BlockingConnection ----------------------------------------------------------------
def drain(channel: BlockingChannel, queue: str) -> list[bytes]:
    """Every ready message of ``queue`` (basic.get with auto-ack until empty)."""
    bodies: list[bytes] = []
    while True:
        method, _, body = channel.basic_get(queue, auto_ack=True)
        if method is None:
            return bodies
        bodies.append(body)


def ready_count(channel: BlockingChannel, queue: str) -> int:
    return int(channel.queue_declare(queue, passive=True).method.message_count)


def pump_until(connection: pika.BlockingConnection, predicate: Any, timeout: float = 5.0) -> None:
    """Process pika's I/O until ``predicate()`` holds, failing after ``timeout``."""
    poll_until(
        predicate, timeout, between=lambda _left: connection.process_data_events(time_limit=0.05)
    )


# -- health ----------------------------------------------------------------------------------
def assert_broker_serves_pika(broker: BrokerProcess) -> None:
    """The broker process is alive and a fresh pika connection publishes and consumes."""
    assert broker.alive(), "the broker process died"
    connection = connect(broker)
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        queue = channel.queue_declare("", exclusive=True).method.queue
        bodies = [b"ping-1", b"ping-2"]
        for body in bodies:
            channel.basic_publish("", queue, body)
        received = []
        for method, _, body in channel.consume(queue, inactivity_timeout=5):
            assert method is not None, "no delivery within 5 s"
            channel.basic_ack(method.delivery_tag)
            received.append(body)
            if len(received) == len(bodies):
                break
        channel.cancel()
        assert received == bodies
    finally:
        connection.close()
    assert broker.alive(), "the broker process died"
