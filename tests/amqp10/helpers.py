"""A scripted AMQP 1.0 client driving a sans-I/O broker Connection, no sockets."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Any

import pika
import pytest

from broker.amqp.context import BrokerContext, ConnectionSettings
from broker.amqp10 import codec
from broker.amqp10.connection import Connection
from broker.amqp10.framing import AMQP_HEADER, FRAME_AMQP, FRAME_SASL, SASL_HEADER, frame
from broker.amqp10.performatives import (
    RECEIVER,
    SENDER,
    Attach,
    Begin,
    Flow,
    Open,
    SaslInit,
    Source,
    Target,
    Transfer,
)
from broker.amqp10.sections import AmqpMessage, Data, Header, Properties
from broker.core.vhost import VirtualHost
from broker.security.sasl import Authenticator, UserDatabase
from tests.amqp.helpers import FakeClock
from tests.broker_process import BrokerProcess

__all__ = ["Client10", "FakeClock", "declare", "make_context", "rhea_expected", "run_rhea"]

_HEAD = struct.Struct(">IBBH")
#: One user database for every test: guest's password is hashed (slowly) once, then
#: remembered, so each test's login is quick.
_USERS = UserDatabase.default()


def make_context(clock: FakeClock | None = None, **settings: Any) -> BrokerContext:
    """A broker context (the default vhost, guest/guest, authentication on)."""
    clock = clock or FakeClock()
    return BrokerContext(
        vhost=VirtualHost(clock=clock),
        authenticator=Authenticator(_USERS, True),
        settings=ConnectionSettings(**settings),
        clock=clock,
    )


AMQP, SASL = FRAME_AMQP, FRAME_SASL


class Client10:
    """Feeds bytes to a 1.0 Connection and decodes what it sends back: ``frames`` holds
    (type, channel, performative, payload), ``headers`` the protocol headers seen."""

    def __init__(
        self, ctx: BrokerContext, peer_host: str | None = "127.0.0.1",
        tls_identity: str | None = None,
    ) -> None:  # fmt: skip
        self.ctx = ctx
        self.conn = Connection(ctx, "test:1", peer_host=peer_host, tls_identity=tls_identity)
        self.frames: list[tuple[int, int, Any, bytes]] = []
        self.headers: list[bytes] = []
        self._pending = b""
        self._expect_header = True

    # -- sending ---------------------------------------------------------------------------
    def send_bytes(self, data: bytes) -> None:
        self.conn.receive_data(data)
        check = self.conn.login_check
        if check is not None:
            self.conn.password_checked(check.run())
        self._collect()

    def send(self, channel: int, performative: Any, payload: bytes = b"") -> None:
        self.send_bytes(frame(channel, performative, payload))

    def login(self, user: str = "guest", password: str = "guest") -> None:
        self.send_bytes(SASL_HEADER)
        self._expect_header = True
        response = b"\x00" + user.encode() + b"\x00" + password.encode()
        self.send_bytes(
            frame(0, SaslInit(mechanism="PLAIN", initial_response=response), kind=FRAME_SASL)
        )
        self._expect_header = True
        self.send_bytes(AMQP_HEADER)

    def open(self, **fields: Any) -> None:
        self.send(0, Open(container_id="test-client", **fields))

    def connect(self, **open_fields: Any) -> None:
        self.login()
        self.open(**open_fields)
        self.send(0, Begin(next_outgoing_id=0, incoming_window=1000, outgoing_window=1000))

    def attach_sender(self, address: str, handle: int = 0, settled: bool = False) -> None:
        """A link on which the client sends (the broker receives)."""
        self.send(
            0,
            Attach(
                name=f"sender-{handle}", handle=handle, role=SENDER,
                snd_settle_mode=1 if settled else 0, source=Source(address="client"),
                target=Target(address=address), initial_delivery_count=0,
            ),
        )  # fmt: skip

    def attach_receiver(self, address: str, handle: int = 1, settled: bool = False) -> None:
        """A link on which the client receives (the broker sends)."""
        self.send(
            0,
            Attach(
                name=f"receiver-{handle}", handle=handle, role=RECEIVER,
                snd_settle_mode=1 if settled else 0, source=Source(address=address),
                target=Target(address="client"),
            ),
        )  # fmt: skip

    def credit(
        self, handle: int, credit: int, delivery_count: int = 0, drain: bool = False
    ) -> None:
        self.send(
            0,
            Flow(
                next_incoming_id=0, incoming_window=1000, next_outgoing_id=0,
                outgoing_window=1000, handle=handle, delivery_count=delivery_count,
                link_credit=credit, drain=drain,
            ),
        )  # fmt: skip

    def transfer(
        self, handle: int, delivery_id: int, body: bytes, settled: bool = False,
        durable: bool = False, **properties: Any,
    ) -> None:  # fmt: skip
        message = AmqpMessage(
            header=Header(durable=durable),
            properties=Properties(**properties) if properties else None,
            body=[Data(body)],
        )
        self.send(
            0,
            Transfer(
                handle=handle, delivery_id=delivery_id, delivery_tag=b"%d" % delivery_id,
                message_format=0, settled=settled,
            ),
            message.encode(),
        )  # fmt: skip

    # -- receiving -------------------------------------------------------------------------
    def _collect(self) -> None:
        self._pending += self.conn.data_to_send()
        data = self._pending
        pos = 0
        while len(data) - pos >= 8:
            if data[pos : pos + 4] == b"AMQP":
                self.headers.append(data[pos : pos + 8])
                pos += 8
                continue
            size, doff, kind, channel = _HEAD.unpack_from(data, pos)
            if len(data) - pos < size:
                break
            body = data[pos + doff * 4 : pos + size]
            pos += size
            if not body:
                self.frames.append((kind, channel, None, b""))
                continue
            performative, at = codec.decode(body)
            self.frames.append((kind, channel, performative, body[at:]))
        self._pending = data[pos:]

    def flush(self) -> None:
        self._collect()

    def take(self, kind: type | None = None) -> list[Any]:
        """The performatives received (of ``kind``), and forget every frame so far."""
        self._collect()
        found = [p for _, _, p, _ in self.frames if kind is None or isinstance(p, kind)]
        self.frames.clear()
        return found

    def transfers(self) -> list[tuple[Transfer, bytes]]:
        self._collect()
        found = [(p, payload) for _, _, p, payload in self.frames if isinstance(p, Transfer)]
        self.frames = [f for f in self.frames if not isinstance(f[2], Transfer)]
        return found


def declare(broker: BrokerProcess, *names: str) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        channel = connection.channel()
        for name in names:
            channel.queue_declare(name, durable=True)
    finally:
        connection.close()


NODE_DIR = Path(__file__).resolve().parents[1] / "compat" / "node"


def run_rhea(port: int, queue: str, count: int) -> Any:
    """What tests/compat/node/rhea_client.js printed (one JSON line) after sending and
    receiving ``count`` messages on ``queue`` at ``port``."""
    node = shutil.which("node")
    if node is None or not (NODE_DIR / "node_modules" / "rhea").is_dir():
        pytest.fail("Node.js or rhea missing: run `make test` (it installs both)")
    done = subprocess.run(
        [node, str(NODE_DIR / "rhea_client.js"), "127.0.0.1", str(port), queue, str(count)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def rhea_expected(count: int) -> list[dict[str, Any]]:
    """What rhea_client.js receives of its own ``count`` messages."""
    return [
        {"body": f"r{i}", "colour": "red" if i % 2 else "blue", "durable": True,
         "delivery_count": 0}
        for i in range(count)
    ]  # fmt: skip
