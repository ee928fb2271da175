"""Malformed input on raw sockets: the broker answers as the spec says, logs it, and lives on.

Each test talks to the broker through :class:`~tests.e2e.support.RawClient` (pamqp frames
over a plain socket). A malformed frame after a valid handshake must get connection.close
with the right reply code (decoded with pamqp), close the socket after close-ok, and log a
``protocol_error`` event with that code; garbage instead of the protocol header gets the
AMQP 0-9-1 header back and a closed socket. After every test a pika client on a fresh
connection still publishes and consumes, and the broker process is alive.
"""

from __future__ import annotations

import base64
import json
import os
import random
import socket
import struct
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pika
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pamqp import commands, frame, header
from pamqp.base import Frame as Method

from broker.amqp10.framing import AMQP_HEADER, HEADERS_1_0, SASL_HEADER, TLS_HEADER
from common.polling import poll_until
from tests.broker_process import BrokerProcess
from tests.e2e.conftest import StartBroker
from tests.e2e.support import (
    PROTOCOL_HEADER,
    RawClient,
    assert_broker_serves_pika,
    connect,
    connection_events,
    events,
    log_size,
    unique,
)

_HEAD = struct.Struct(">BHI")


@pytest.fixture(autouse=True)
def broker_still_serves(shared_broker: BrokerProcess) -> Iterator[None]:
    """After every test: the broker is alive and serves a pika client on a new connection."""
    yield
    assert_broker_serves_pika(shared_broker)


def raw_frame(frame_type: int, channel: int, payload: bytes, end: int = 0xCE) -> bytes:
    return _HEAD.pack(frame_type, channel, len(payload)) + payload + bytes((end,))


def method_payload(method: Method) -> bytes:
    return frame.marshal(method, 1)[7:-1]


def open_client(broker: BrokerProcess, **handshake: Any) -> RawClient:
    client = RawClient(broker)
    client.handshake(**handshake)
    client.open_channel(1)
    return client


def connections_listed(broker: BrokerProcess) -> list[dict[str, Any]]:
    """The management API's connection list (every Connection the broker still holds)."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{broker.mgmt_port}/api/connections",
        headers={"Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()},
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        listed: list[dict[str, Any]] = json.load(response)
    return listed


def listed_ports(broker: BrokerProcess) -> set[int]:
    return {int(c["peer"].rsplit(":", 1)[1]) for c in connections_listed(broker)}


def assert_header_answer_and_close(client: RawClient) -> None:
    """The broker answered a bad protocol header with its own and closed the socket."""
    assert client.read_exact(8) == PROTOCOL_HEADER
    assert client.wait_eof() == []


# -- no AMQP header ------------------------------------------------------------------------
def random_garbage(seed: int, size: int = 256) -> bytes:
    data = bytearray(random.Random(seed).randbytes(size))
    data[0] = 0x47 if data[0] == 0x41 else data[0]  # never starts like "AMQP"
    return bytes(data)


@pytest.mark.parametrize(
    "sent",
    [
        pytest.param(random_garbage(1), id="random-bytes"),
        pytest.param(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n", id="http-request"),
        pytest.param(b"AMQP\x01\x01\x00\x0a", id="amqp-0-10-header"),
        pytest.param(b"AMQP\x00\x00\x09\x00", id="amqp-0-9-0-header"),
        pytest.param(b"AMQP\x00\x00\x08\x00", id="amqp-0-8-header"),
        pytest.param(b"\x16\x03\x01\x02\x00\x01\x00\x01", id="tls-client-hello"),
    ],
)
def test_bad_protocol_header_gets_ours_back_and_a_close(
    shared_broker: BrokerProcess, sent: bytes
) -> None:
    with RawClient(shared_broker) as client:
        client.send(sent)
        assert_header_answer_and_close(client)
        event = client.wait_for_event("protocol_error")
    assert event["reply_code"] is None
    assert "bad protocol header" in event["reason"]


@pytest.mark.parametrize(
    "sent",
    [
        pytest.param(b"AMQP\x00\x01\x00\x00", id="amqp-1-0-without-sasl"),
        pytest.param(b"AMQP\x02\x01\x00\x00", id="amqp-1-0-tls-layer"),
    ],
)
def test_an_amqp_1_0_header_without_sasl_gets_the_sasl_header_and_a_close(
    shared_broker: BrokerProcess, sent: bytes
) -> None:
    """AMQP 1.0 is served on this port (docs/amqp-1-0.md), through SASL only while
    authentication is on: its plain and TLS-layer headers get the SASL header back."""
    with RawClient(shared_broker) as client:
        client.send(sent)
        assert client.read_exact(8) == b"AMQP\x03\x01\x00\x00"
        assert client.wait_eof() == []
        event = client.wait_for_event("protocol_error")
    assert event["reply_code"] is None
    assert f"protocol header {sent!r}" in event["reason"]


# -- malformed frames after a valid handshake -----------------------------------------------
def _queue_declare_truncated() -> bytes:
    payload = method_payload(commands.Queue.Declare(queue="q", arguments={"x-max-length": 5}))
    return raw_frame(1, 1, payload[:-6])


def _publish_truncated() -> bytes:
    payload = method_payload(commands.Basic.Publish(exchange="", routing_key="abc"))
    return raw_frame(1, 1, payload[:-3])  # routing key short string overruns the frame


def _content_header() -> bytes:
    return frame.marshal(header.ContentHeader(0, 3, commands.Basic.Properties()), 1)


MALFORMED: dict[str, tuple[Callable[[], bytes], int]] = {
    # 501 FRAME_ERROR
    "wrong-frame-end": (lambda: raw_frame(1, 1, method_payload(commands.Basic.Qos()), 0x00), 501),
    "oversized-frame": (lambda: _HEAD.pack(3, 1, 10 * 1024 * 1024), 501),
    "unknown-frame-type": (lambda: raw_frame(9, 0, b"\x00\x01\x02"), 501),
    "heartbeat-on-channel": (lambda: raw_frame(8, 1, b""), 501),
    "method-without-id": (lambda: raw_frame(1, 1, b"\x00\x32"), 501),
    # 502 SYNTAX_ERROR
    "truncated-queue-declare": (_queue_declare_truncated, 502),
    "truncated-basic-publish": (_publish_truncated, 502),
    # 503 COMMAND_INVALID
    "unknown-method": (lambda: raw_frame(1, 1, b"\x00\x63\x00\x01"), 503),
    # 504 CHANNEL_ERROR
    "method-on-unopened-channel": (
        lambda: frame.marshal(commands.Queue.Declare(queue="q"), 7),
        504,
    ),
    "content-on-unopened-channel": (
        lambda: frame.marshal(header.ContentHeader(0, 3, commands.Basic.Properties()), 9),
        504,
    ),
    "channel-open-twice": (lambda: frame.marshal(commands.Channel.Open(), 1), 504),
    # 505 UNEXPECTED_FRAME
    "content-header-without-publish": (_content_header, 505),
    "content-body-without-header": (lambda: raw_frame(3, 1, b"abc"), 505),
    "method-instead-of-content": (
        lambda: (
            frame.marshal(commands.Basic.Publish(routing_key="q"), 1)
            + frame.marshal(commands.Basic.Qos(), 1)
        ),
        505,
    ),
    "start-ok-when-open": (
        lambda: frame.marshal(
            commands.Connection.StartOk(mechanism="PLAIN", response="\0guest\0guest"), 0
        ),
        505,
    ),
}


CODE_NAMES = {
    501: "FRAME_ERROR",
    502: "SYNTAX_ERROR",
    503: "COMMAND_INVALID",
    504: "CHANNEL_ERROR",
    505: "UNEXPECTED_FRAME",
}


@pytest.mark.parametrize(("build", "code"), MALFORMED.values(), ids=list(MALFORMED))
def test_malformed_frame_closes_the_connection_with_its_reply_code(
    shared_broker: BrokerProcess, build: Callable[[], bytes], code: int
) -> None:
    with open_client(shared_broker) as client:
        client.send(build())
        close = client.expect_connection_close()
        assert close.reply_code == code
        assert close.reply_text.startswith(f"{CODE_NAMES[code]} - ")
        event = client.wait_for_event("protocol_error")
        assert (event["reply_code"], event["scope"]) == (code, "connection")
        closed = client.wait_for_event("connection_closed")
        assert closed["reason"].startswith(str(code))


def test_truncated_method_names_the_method_in_the_close(shared_broker: BrokerProcess) -> None:
    with open_client(shared_broker) as client:
        client.send(_queue_declare_truncated())
        close = client.expect_connection_close()
    assert (close.reply_code, close.class_id, close.method_id) == (502, 50, 10)


def test_frame_larger_than_negotiated_frame_max(start_broker: StartBroker) -> None:
    broker = start_broker("--max-frame-size=4096")
    # pika negotiates 4096 and splits a large body into frames that fit.
    connection = connect(broker)
    channel = connection.channel()
    queue = channel.queue_declare("", exclusive=True).method.queue
    body = os.urandom(50_000)
    channel.basic_publish("", queue, body)
    assert channel.basic_get(queue, auto_ack=True)[2] == body
    connection.close()

    with RawClient(broker) as client:
        tune = client.handshake(frame_max=4096)
        assert tune.frame_max == 4096
        client.open_channel(1)
        client.send(frame.marshal(commands.Basic.Publish(routing_key=queue), 1))
        client.send(frame.marshal(header.ContentHeader(0, 5000, commands.Basic.Properties()), 1))
        client.send(raw_frame(3, 1, b"x" * 5000))  # 5008 bytes > 4096
        close = client.expect_connection_close()
        assert close.reply_code == 501
        assert "frame-max" in close.reply_text
        assert client.wait_for_event("protocol_error")["reply_code"] == 501
    assert_broker_serves_pika(broker)


def test_frame_max_above_the_brokers_is_refused_at_tune(shared_broker: BrokerProcess) -> None:
    with RawClient(shared_broker) as client:
        client.send(PROTOCOL_HEADER)
        client.expect(commands.Connection.Start)
        client.send_method(
            0, commands.Connection.StartOk(mechanism="PLAIN", response="\0guest\0guest")
        )
        tune = client.expect(commands.Connection.Tune)
        client.send_method(0, commands.Connection.TuneOk(frame_max=tune.frame_max * 2))
        close = client.expect_connection_close()
    assert close.reply_code == 530


# -- well-framed content the broker cannot decode ------------------------------------------
#: Properties with only the headers flag set and a table of the right length whose one
#: field has the unknown type "Z": the layout checks pass, decoding the table fails.
UNDECODABLE_HEADERS = b"\x20\x00" + struct.pack(">I", 3) + b"\x01kZ"


def publish_raw(client: RawClient, exchange: str, routing_key: str, props: bytes) -> None:
    body = b"undecodable"
    content_header = struct.pack(">HHQ", 60, 0, len(body)) + props
    client.send(
        frame.marshal(commands.Basic.Publish(exchange=exchange, routing_key=routing_key), 1)
        + raw_frame(2, 1, content_header)
        + raw_frame(3, 1, body)
    )


def test_undecodable_headers_table_is_routed_and_dead_lettered(
    shared_broker: BrokerProcess,
) -> None:
    """Regression: such a message used to kill its connection (headers exchange, nack to a
    DLX) or the broker's housekeeping loop (TTL expiry to a DLX) with a ValueError."""
    connection = connect(shared_broker)
    channel = connection.channel()
    matched, dead = unique("undecodable-match"), unique("undecodable-dead")
    expiring, rejected = unique("undecodable-ttl"), unique("undecodable-nack")
    dlx = {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dead}
    channel.queue_declare(dead)
    channel.queue_declare(expiring, arguments={"x-message-ttl": 20, **dlx})
    channel.queue_declare(rejected, arguments=dlx)
    channel.queue_declare(matched, auto_delete=True)
    channel.queue_bind(matched, "amq.match", arguments={"x-match": "any", "k": 1})
    try:
        with open_client(shared_broker) as client:
            publish_raw(client, "amq.match", "", UNDECODABLE_HEADERS)  # routed as no headers
            publish_raw(client, "", expiring, UNDECODABLE_HEADERS)
            publish_raw(client, "", rejected, UNDECODABLE_HEADERS)
            client.send_method(1, commands.Basic.Get(queue=rejected))
            get_ok = client.expect(commands.Basic.GetOk)
            client.send_method(
                1, commands.Basic.Nack(delivery_tag=get_ok.delivery_tag, requeue=False)
            )
            client.send_method(1, commands.Queue.Declare(queue=matched, passive=True))
            replies: list[Any] = []
            while not replies or not isinstance(replies[-1], commands.Queue.DeclareOk):
                received = client.read_frame()
                assert received is not None, "the broker dropped the connection"
                replies.append(received[1])  # the get-ok's content frames, then declare-ok
            assert replies[-1].message_count == 0
            assert (
                connection_events(
                    shared_broker, "protocol_error", client.local_port, client.log_offset
                )
                == []
            )

        # A well-formed message expiring after it shows the expiry loop still runs.
        channel.basic_publish("", expiring, b"fine", pika.BasicProperties(headers={"ok": 1}))
        reasons: dict[bytes, list[str]] = {}

        def collect() -> bool:
            method, props, body = channel.basic_get(dead, auto_ack=True)
            if method is not None:
                reasons.setdefault(body, []).append(props.headers["x-death"][0]["reason"])
            return sum(map(len, reasons.values())) == 3

        poll_until(collect, 5)
        assert sorted(reasons[b"undecodable"]) == ["expired", "rejected"]
        assert reasons[b"fine"] == ["expired"]
    finally:
        for queue in (dead, expiring, rejected):
            channel.queue_delete(queue)
        connection.close()


# -- a peer that goes away or never speaks -------------------------------------------------
def test_half_frame_then_disconnect(shared_broker: BrokerProcess) -> None:
    with open_client(shared_broker) as opened:
        data = frame.marshal(commands.Queue.Declare(queue="half"), 1)
        opened.send(data[: len(data) // 2])
    with RawClient(shared_broker) as handshaking:
        handshaking.send(PROTOCOL_HEADER + b"\x01\x00")  # half a frame in the handshake
    assert opened.wait_for_event("connection_closed")["reason"] == "socket closed"
    ports = [opened.local_port, handshaking.local_port]
    poll_until(lambda: not listed_ports(shared_broker) & set(ports), 10)


def test_silent_clients_are_dropped_after_the_handshake_timeout(
    start_broker: StartBroker,
) -> None:
    """Three stalled handshakes at once, on a broker with ``--handshake-timeout 2s`` (the
    default, 10 s, is in tests/test_options.py and tests/amqp)."""
    broker = start_broker("--handshake-timeout=2s")
    silent = RawClient(broker)  # sends nothing at all
    header_only = RawClient(broker)  # stops after the protocol header
    header_only.send(PROTOCOL_HEADER)
    header_only.expect(commands.Connection.Start)
    # the time-out runs from each connection's accept: the last one made (no_open) is not
    # dropped before 2 s from here (taken after its own handshake, a loaded machine's
    # second of StartOk and Tune came off the 2 s and the bound failed a right broker)
    started = time.monotonic()
    no_open = RawClient(broker)  # stops before connection.open
    no_open.send(PROTOCOL_HEADER)
    no_open.expect(commands.Connection.Start)
    no_open.send_method(
        0, commands.Connection.StartOk(mechanism="PLAIN", response="\0guest\0guest")
    )
    no_open.expect(commands.Connection.Tune)
    clients = {"await-header": silent, "await-start-ok": header_only, "await-tune-ok": no_open}
    try:
        for state, client in clients.items():
            assert client.wait_eof(timeout=15) == [], state
            event = client.wait_for_event("handshake_timeout")
            assert event["state"] == state
        assert time.monotonic() - started >= 1.9  # not before the 2 s timeout
    finally:
        for client in clients.values():
            client.close()


# -- many at once, and generated garbage ---------------------------------------------------
def garbage_session(broker: BrokerProcess, seed: int) -> tuple[int, bytes]:
    """Connect, send garbage of one of three kinds, half-close, read until EOF."""
    rng = random.Random(seed)
    with RawClient(broker, timeout=10) as client:
        kind = seed % 3
        if kind == 0:
            client.send(random_garbage(seed, rng.randint(1, 2048)))
        elif kind == 1:
            client.send(PROTOCOL_HEADER + rng.randbytes(rng.randint(1, 2048)))
        else:
            client.handshake()
            client.send(rng.randbytes(rng.randint(1, 2048)))
        client.sock.shutdown(socket.SHUT_WR)  # the broker sees EOF if it still reads
        received = client.read_exact(1 << 20)
        return client.local_port, received


def test_many_garbage_connections_in_parallel(shared_broker: BrokerProcess) -> None:
    count = 60
    since = log_size(shared_broker)
    with ThreadPoolExecutor(max_workers=12) as pool:
        futures = [pool.submit(garbage_session, shared_broker, seed) for seed in range(count)]
        assert_broker_serves_pika(shared_broker)  # while the garbage is still coming
        results = [future.result(timeout=30) for future in futures]
    ports = {port for port, _ in results}
    for seed, (_, received) in enumerate(results):
        if seed % 3 == 0:
            assert received == PROTOCOL_HEADER, seed
    poll_until(lambda: not listed_ports(shared_broker) & ports, 10)
    bad_headers = [
        e
        for e in events(shared_broker, since)
        if e["event"] == "protocol_error" and e["reply_code"] is None
    ]
    assert len(bad_headers) >= len(range(0, count, 3))


MAX_FRAME_TYPE = 255
method_ids = st.sampled_from(sorted(commands.INDEX_MAPPING))


@st.composite
def fuzz_frames(draw: st.DrawFn) -> bytes:
    """A well-delimited frame (the size is right) with arbitrary type, channel, payload."""
    frame_type = draw(st.sampled_from([1, 1, 1, 2, 3, 8]) | st.integers(0, MAX_FRAME_TYPE))
    channel = draw(st.sampled_from([0, 1, 1, 1, 2]) | st.integers(0, 65535))
    if frame_type == 1 and draw(st.booleans()):
        payload = struct.pack(">I", draw(method_ids)) + draw(st.binary(max_size=48))
    else:
        payload = draw(st.binary(max_size=64))
    end = draw(st.sampled_from([0xCE] * 9 + [0x00]))
    return raw_frame(frame_type, channel, payload, end)


ACCEPTABLE_CLOSE_CODES = {403, 404, 405, 406, 501, 502, 503, 504, 505, 530, 540}


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(frames=st.lists(fuzz_frames(), min_size=1, max_size=4))
def test_fuzzed_frames_after_handshake(shared_broker: BrokerProcess, frames: list[bytes]) -> None:
    """Whatever well-delimited frames arrive, the broker answers with a close or carries on.

    A probe (channel.open on a fresh channel) follows the frames: the broker either opens
    it, or has already closed the connection with a reply code and a protocol_error event.
    """
    probe = 2000
    with open_client(shared_broker) as client:
        client.send(b"".join(frames) + frame.marshal(commands.Channel.Open(), probe))
        outcome: Any = None
        while outcome is None:
            received = client.read_frame(timeout=5)
            assert received is not None, "socket closed without connection.close"
            channel, value = received
            if isinstance(value, commands.Connection.Close):
                outcome = value
            elif isinstance(value, commands.Connection.CloseOk):
                outcome = "closed"  # a fuzzed frame was a well-formed connection.close
            elif isinstance(value, commands.Channel.OpenOk) and channel == probe:
                outcome = "open"
        if isinstance(outcome, commands.Connection.Close):
            assert outcome.reply_code in ACCEPTABLE_CLOSE_CODES, outcome
            client.send_method(0, commands.Connection.CloseOk())
            client.wait_eof()
            event = client.wait_for_event("protocol_error")
            assert event["reply_code"] == outcome.reply_code
    assert shared_broker.alive()


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    data=st.one_of(
        st.binary(min_size=1, max_size=512),
        st.builds(
            bytes.__add__,
            st.sampled_from(sorted(HEADERS_1_0)),
            st.binary(max_size=256),
        ),
    )
)
@example(data=AMQP_HEADER + b"\x00" * 8)
@example(data=SASL_HEADER + b"junk")
@example(data=TLS_HEADER)
def test_fuzzed_bytes_instead_of_a_handshake(shared_broker: BrokerProcess, data: bytes) -> None:
    """Arbitrary first bytes: the broker answers (or waits for more), never crashes.

    An AMQP 1.0 header (any of its three layers) is answered in 1.0 (the SASL header,
    or the plain one when authentication is off); any other 8 bytes with 0-9-1's header.
    """
    with RawClient(shared_broker) as client:
        client.send(data)
        client.sock.shutdown(socket.SHUT_WR)
        received = client.read_exact(1 << 20)
    if len(data) >= 8 and data[:8] in HEADERS_1_0:
        assert received[:8] in HEADERS_1_0, received[:16]
    elif len(data) >= 8 and data[:8] != PROTOCOL_HEADER:
        assert received == PROTOCOL_HEADER
    elif not PROTOCOL_HEADER.startswith(data[:4]):
        assert received == PROTOCOL_HEADER  # refused as soon as it cannot be AMQP
    assert shared_broker.alive()
