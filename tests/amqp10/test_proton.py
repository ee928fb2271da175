"""A real AMQP 1.0 client, Qpid Proton (PyPI ``python-qpid-proton``), against a real
broker process on the 0-9-1 port: send and receive (unsettled and pre-settled), across
protocols with pika both ways, and bad input on raw sockets, each answered with its error
while the broker goes on serving. One broker per test worker for the whole run (starting
one is most of the time these take); it keeps a data directory, so the durable test can
kill and restart it on the same port, and the others, which declare what they use, pass
before or after."""

from __future__ import annotations

import contextlib
import socket
import struct
import urllib.request
from typing import Any

import pika
import pytest
from proton import Message
from proton.reactor import AtMostOnce
from proton.utils import BlockingConnection, ConnectionClosed, LinkDetached

from broker.amqp10 import codec
from broker.amqp10.framing import AMQP_HEADER, FRAME_SASL, SASL_HEADER, frame
from broker.amqp10.performatives import (
    Begin,
    Close,
    End,
    Open,
    SaslInit,
    SaslMechanisms,
    SaslOutcome,
    Transfer,
)
from tests.amqp10.helpers import declare
from tests.broker_process import BrokerProcess
from tests.ha.cluster import AUTH, http
from tests.management.support import parse_metrics, sample

#: Meant for one worker; the broker fixture is per worker and per run all the same (this
#: environment's pytest 9.2 / pytest-xdist 3.8 do not honour xdist_group: a worker that
#: gets some of these starts its own broker once, never once per stretch of this module).
pytestmark = pytest.mark.xdist_group("amqp10_proton")
N = 20
_HEAD = struct.Struct(">IBBH")


def proton(broker: BrokerProcess) -> BlockingConnection:
    return BlockingConnection(
        f"amqp://guest:guest@127.0.0.1:{broker.port}", allowed_mechs="PLAIN", timeout=10
    )


def test_send_and_receive_unsettled(broker: BrokerProcess) -> None:
    declare(broker, "p-unsettled")
    connection = proton(broker)
    try:
        sender = connection.create_sender("p-unsettled")
        for i in range(N):  # each send waits for the broker's accepted disposition
            sender.send(Message(body=f"m{i}", durable=True, properties={"i": i}))
        receiver = connection.create_receiver("/queues/p-unsettled", credit=5)
        got = []
        for _ in range(N):
            message = receiver.receive(timeout=10)
            properties: dict[str, Any] = message.properties or {}
            got.append((message.body, properties.get("i"), message.durable))
            receiver.accept()
        assert got == [(f"m{i}", i, True) for i in range(N)]
    finally:
        connection.close()


def test_send_and_receive_presettled(broker: BrokerProcess) -> None:
    declare(broker, "p-settled")
    connection = proton(broker)
    try:
        sender = connection.create_sender("/amq/queue/p-settled", options=AtMostOnce())
        for i in range(N):
            sender.send(Message(body=f"s{i}"))
        receiver = connection.create_receiver("p-settled", options=AtMostOnce(), credit=N)
        bodies = [receiver.receive(timeout=10).body for _ in range(N)]
        assert bodies == [f"s{i}" for i in range(N)]
    finally:
        connection.close()


def test_proton_to_pika_and_pika_to_proton(broker: BrokerProcess) -> None:
    declare(broker, "p-cross")
    connection = proton(broker)
    pika_connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        sender = connection.create_sender("p-cross")
        message = Message(
            body=b"from proton", content_type="application/octet-stream",
            properties={"colour": "red"}, durable=True, id="id-1",
        )  # fmt: skip
        message.inferred = True  # bytes as a data section (else an amqp-value: kept encoded)
        sender.send(message)
        channel = pika_connection.channel()
        method, props, body = channel.basic_get("p-cross", auto_ack=True)
        assert method is not None and body == b"from proton"
        assert props.content_type == "application/octet-stream"
        assert props.headers == {"colour": "red"} and props.delivery_mode == 2
        assert props.message_id == "id-1"
        channel.basic_publish(
            "", "p-cross", b"from pika",
            pika.BasicProperties(content_type="text/plain", headers={"size": 3}, delivery_mode=2),
        )  # fmt: skip
        receiver = connection.create_receiver("p-cross")
        message = receiver.receive(timeout=10)
        receiver.accept()
        assert message.body == b"from pika" and message.content_type == "text/plain"
        assert message.properties == {"size": 3} and message.durable
    finally:
        pika_connection.close()
        connection.close()


def test_the_anonymous_relay(broker: BrokerProcess) -> None:
    declare(broker, "p-relay-1", "p-relay-2")
    connection = proton(broker)
    try:
        sender = connection.create_sender(None)  # no target address: each message's to
        sender.send(Message(address="p-relay-1", body="one"))
        sender.send(Message(address="/queues/p-relay-2", body="two"))
        for name, body in (("p-relay-1", "one"), ("p-relay-2", "two")):
            receiver = connection.create_receiver(name)
            assert receiver.receive(timeout=10).body == body
            receiver.accept()
    finally:
        connection.close()


def test_an_attach_to_a_missing_queue_is_not_found(broker: BrokerProcess) -> None:
    connection = proton(broker)
    try:
        with pytest.raises(LinkDetached, match="amqp:not-found"):
            connection.create_sender("no-such-queue")
        declare(broker, "p-after")
        connection.create_sender("p-after").send(Message(body="still serving"))
    finally:
        connection.close()


class Raw:
    """A socket speaking AMQP 1.0 by hand (for input no client library sends)."""

    def __init__(self, broker: BrokerProcess) -> None:
        self.sock = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
        self.buffer = b""

    def login(self) -> None:
        self.sock.sendall(SASL_HEADER)
        assert self.header() == SASL_HEADER
        assert isinstance(self.performative(), SaslMechanisms)
        init = SaslInit(mechanism="PLAIN", initial_response=b"\x00guest\x00guest")
        self.sock.sendall(frame(0, init, kind=FRAME_SASL) + AMQP_HEADER)
        outcome = self.performative()
        assert isinstance(outcome, SaslOutcome) and outcome.code == 0
        assert self.header() == AMQP_HEADER

    def _read(self, size: int) -> bytes:
        while len(self.buffer) < size:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError(f"closed with {self.buffer!r} read")
            self.buffer += chunk
        data, self.buffer = self.buffer[:size], self.buffer[size:]
        return data

    def header(self) -> bytes:
        return self._read(8)

    def performative(self) -> Any:
        head = self._read(8)
        size, doff, _, _ = _HEAD.unpack(head)
        body = self._read(size - 8)[doff * 4 - 8 :]
        return codec.decode(body)[0] if body else None

    def closed(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def close(self) -> None:
        self.sock.close()


def condition(performative: Any) -> str:
    error = performative.error
    return "" if error is None else str(error.condition)


def still_serving(broker: BrokerProcess) -> None:
    declare(broker, "p-alive")
    connection = proton(broker)
    try:
        connection.create_sender("p-alive").send(Message(body="alive"))
    finally:
        connection.close()


def test_garbage_after_the_header(broker: BrokerProcess) -> None:
    raw = Raw(broker)
    try:
        raw.sock.sendall(SASL_HEADER + b"\x00\x00\x00\x10\x02\x01\x00\x00garbage!")
        assert raw.header() == SASL_HEADER
        assert isinstance(raw.performative(), SaslMechanisms)
        outcome = raw.performative()  # not a sasl-init: failed, and closed
        assert isinstance(outcome, SaslOutcome) and outcome.code == 1
        assert raw.closed()
    finally:
        raw.close()
    raw = Raw(broker)
    try:
        raw.login()
        raw.sock.sendall(b"\x00\x00\x00\x0c\x02\x00\x00\x00\xee\xee\xee\xee")
        assert isinstance(raw.performative(), Open)
        closed = raw.performative()
        assert isinstance(closed, Close) and condition(closed) == "amqp:decode-error"
    finally:
        raw.close()
    still_serving(broker)


def test_a_frame_larger_than_max_frame_size(broker: BrokerProcess) -> None:
    raw = Raw(broker)
    try:
        raw.login()
        raw.sock.sendall(frame(0, Open(container_id="raw")))
        opened = raw.performative()
        assert isinstance(opened, Open)
        too_big = int(opened.max_frame_size) + 1
        raw.sock.sendall(_HEAD.pack(too_big, 2, 0, 0))
        closed = raw.performative()
        assert isinstance(closed, Close)
        assert condition(closed) == "amqp:connection:framing-error"
    finally:
        raw.close()
    still_serving(broker)


def test_a_transfer_before_attach(broker: BrokerProcess) -> None:
    raw = Raw(broker)
    try:
        raw.login()
        raw.sock.sendall(
            frame(0, Open(container_id="raw"))
            + frame(0, Begin(next_outgoing_id=0, incoming_window=10, outgoing_window=10))
            + frame(0, Transfer(handle=3, delivery_id=0, delivery_tag=b"t"), b"\x00Su\xa0\x00")
        )
        assert isinstance(raw.performative(), Open)
        assert isinstance(raw.performative(), Begin)
        ended = raw.performative()
        assert isinstance(ended, End)
        assert condition(ended) == "amqp:session:unattached-handle"
    finally:
        raw.close()
    still_serving(broker)


def test_the_plain_header_without_sasl_is_refused(broker: BrokerProcess) -> None:
    raw = Raw(broker)
    try:
        raw.sock.sendall(AMQP_HEADER)
        assert raw.header() == SASL_HEADER and raw.closed()
    finally:
        raw.close()


def test_a_durable_message_is_stored_before_accepted(broker: BrokerProcess) -> None:
    """An accepted durable message of a durable queue survives a kill -9: the disposition
    waited for the disk, as a 0-9-1 confirm does."""
    declare(broker, "p-durable")
    connection = proton(broker)
    try:
        connection.create_sender("p-durable").send(Message(body="kept", durable=True))
    finally:
        connection.close()
    broker.stop(sig=9)
    broker.start()
    connection = proton(broker)
    try:
        receiver = connection.create_receiver("p-durable")
        assert receiver.receive(timeout=10).body == "kept"
        receiver.accept()
    finally:
        connection.close()


def test_a_proton_connection_in_the_management_api_and_metrics(broker: BrokerProcess) -> None:
    """Listed by ``/api/connections`` (ids one series with 0-9-1's), counted by
    ``/metrics``, closed by ``DELETE /api/connections/{id}`` with connection:forced."""
    declare(broker, "p-api")
    connection = proton(broker)
    try:
        connection.create_receiver("p-api")  # a session and a link
        rows = [
            row
            for row in http("GET", broker.mgmt_port, "/api/connections")
            if row["protocol"] == "AMQP 1-0" and row["state"] == "open"
        ]
        assert len(rows) == 1 and rows[0]["user"] == "guest" and rows[0]["vhost"] == "/"
        assert rows[0]["channels"] == 1 and rows[0]["frame_max"] >= 512
        request = urllib.request.Request(f"http://127.0.0.1:{broker.mgmt_port}/metrics")
        request.add_header("Authorization", AUTH)
        with urllib.request.urlopen(request, timeout=10) as response:
            samples = parse_metrics(response.read().decode())
        assert sample(samples, "qpidd_connections_amqp_1_0") >= 1
        assert sample(samples, "qpidd_connections") >= sample(samples, "qpidd_connections_amqp_1_0")
        closed = http("DELETE", broker.mgmt_port, f"/api/connections/{rows[0]['id']}")
        assert closed["protocol"] == "AMQP 1-0"
        with pytest.raises(ConnectionClosed) as raised:
            connection.create_sender("nowhere-needed")
        assert "amqp:connection:forced" in str(raised.value)
    finally:
        with contextlib.suppress(Exception):
            connection.close()


def test_request_reply_through_a_dynamic_queue(broker: BrokerProcess) -> None:
    """Proton's request/reply: the client's reply queue is a dynamic source (a temporary
    queue named by the broker), the server answers through the anonymous relay to the
    request's ``reply_to``; the queue goes with the link."""
    declare(broker, "p-requests")
    client, server = proton(broker), proton(broker)
    try:
        replies = client.create_receiver(None, dynamic=True, credit=5)
        reply_to = replies.remote_source.address
        assert reply_to and reply_to.startswith("amq.gen-")
        requests = client.create_sender("p-requests")
        for word in ("alpha", "beta"):
            requests.send(Message(body=word, reply_to=reply_to, correlation_id=word))
        incoming = server.create_receiver("p-requests", credit=5)
        relay = server.create_sender(None)
        for _ in range(2):
            request = incoming.receive(timeout=10)
            relay.send(
                Message(
                    address=request.reply_to, body=str(request.body).upper(),
                    correlation_id=request.correlation_id,
                )
            )  # fmt: skip
            incoming.accept()
        answers = []
        for _ in range(2):
            answer = replies.receive(timeout=10)
            answers.append((answer.correlation_id, answer.body))
            replies.accept()
        assert answers == [("alpha", "ALPHA"), ("beta", "BETA")]
        replies.close()
        names = {q["name"] for q in http("GET", broker.mgmt_port, "/api/queues")}
        assert reply_to not in names  # deleted with its only consumer's link
    finally:
        for connection in (client, server):
            with contextlib.suppress(Exception):
                connection.close()
