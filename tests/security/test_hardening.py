"""Issue 13, item 7: the four faults fuzzing found, each with its regression test.

1. A field table nested 500 deep in connection.start-ok (before login) closed the connection
   with 541 and logged a RecursionError at error level: now 502, a warning, a bounded depth.
2. An authenticated PUT that sent less than its Content-Length and hung up logged a
   traceback at error level: now a client error, no error line.
3. A bad HTTP request line or header made aiohttp print a traceback to stderr, outside the
   JSON log: now one ``management_http_error`` warning in the log, nothing on stderr.
4. ``{"lease": 1000...0}`` (400 digits) on /api/ha/lease or /api/ha/promote raised
   OverflowError and answered 500: now 400.
"""

from __future__ import annotations

import base64
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pamqp import commands, frame

from broker.amqp import framing
from broker.core import properties
from broker.core.field_tables import MAX_DEPTH, depth
from common.polling import poll_until
from tests.amqp.helpers import Client, make_context
from tests.broker_process import BrokerProcess

GUEST_AUTH = "Basic " + base64.b64encode(b"guest:guest").decode()


def nested(levels: int) -> dict[str, Any]:
    table: dict[str, Any] = {}
    for _ in range(levels):
        table = {"a": table}
    return table


def encoded_nested(levels: int) -> bytes:
    """A field table nested ``levels`` deep, encoded without pamqp's recursion."""
    table = b""
    for _ in range(levels - 1):
        body = b"\x01a" + b"F" + len(table).to_bytes(4, "big") + table
        table = body
    return len(table).to_bytes(4, "big") + table


def start_ok_frame(table: bytes) -> bytes:
    mechanism, response = b"PLAIN", b"\x00guest\x00guest"
    payload = (
        b"\x00\x0a\x00\x0b"
        + table
        + bytes((len(mechanism),))
        + mechanism
        + len(response).to_bytes(4, "big")
        + response
        + b"\x05en_US"
    )
    return b"\x01\x00\x00" + len(payload).to_bytes(4, "big") + payload + b"\xce"


class Events:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str, dict[str, Any]]] = []

    def _add(self, level: str, event: str, fields: dict[str, Any]) -> None:
        self.lines.append((level, event, fields))

    def info(self, event: str, **fields: Any) -> None:
        self._add("info", event, fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._add("warning", event, fields)

    def debug(self, event: str, **fields: Any) -> None:
        self._add("debug", event, fields)

    def error(self, event: str, **fields: Any) -> None:
        self._add("error", event, fields)


# -- 1. a field table nested 500 deep ------------------------------------------------------
@pytest.mark.parametrize("levels", [MAX_DEPTH + 1, 500, 5000])
def test_deeply_nested_start_ok_is_a_syntax_error(levels: int) -> None:
    ctx = make_context()
    events = Events()
    ctx.log = events
    client = Client(ctx)
    client.send_bytes(framing.PROTOCOL_HEADER)
    client.send_bytes(start_ok_frame(encoded_nested(levels)))
    closes = [m for _, m in client.frames if isinstance(m, commands.Connection.Close)]
    assert [c.reply_code for c in closes] == [502]
    assert "nest" in closes[0].reply_text
    assert client.conn.user is None
    assert [e for e in events.lines if e[0] == "error"] == []
    assert ("warning", "protocol_error") in [(level, event) for level, event, _ in events.lines]


def test_nesting_up_to_the_bound_is_accepted() -> None:
    ctx = make_context()
    client = Client(ctx)
    client.send_bytes(framing.PROTOCOL_HEADER)
    client.send_bytes(start_ok_frame(encoded_nested(MAX_DEPTH)))
    assert [type(m).__name__ for _, m in client.frames] == ["Start", "Tune"]


def test_deep_message_headers_are_malformed_not_a_crash() -> None:
    raw = properties.encode(commands.Basic.Properties(headers={"x": 1}))
    # Replace the headers table with one nested 500 deep.
    deep = (2 << 12).to_bytes(2, "big") + encoded_nested(500)
    assert raw[:2] == deep[:2]
    with pytest.raises(ValueError, match="nest"):
        properties.decode(deep)


nested_values = st.recursive(
    st.integers() | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner),
    max_leaves=30,
)


def _reference_depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_reference_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_reference_depth(v) for v in value), default=0)
    return 0


@given(nested_values)
def test_depth_matches_the_recursive_definition(value: Any) -> None:
    assert depth(value) == _reference_depth(value)


def test_depth_of_a_chain_stops_early() -> None:
    assert depth(nested(10_000)) == MAX_DEPTH + 1


def test_start_ok_with_ordinary_tables_still_decodes() -> None:
    method = commands.Connection.StartOk(
        client_properties={"capabilities": {"a": True}, "x": [1, {"b": [2]}]},
        mechanism="PLAIN",
        response="\0guest\0guest",
    )
    payload = frame.marshal(method, 0)[7:-1]
    decoded = framing.unmarshal_method(payload)
    assert isinstance(decoded, commands.Connection.StartOk)
    assert decoded.client_properties == {"capabilities": {"a": True}, "x": [1, {"b": [2]}]}


# -- the management API of a real broker --------------------------------------------------
@pytest.fixture
def ha_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(tmp_path / "b")
    broker.port = 0
    from common.polling import free_port

    broker.port = free_port()
    broker.args = ["--ha-cluster=yes", f"--ha-brokers-url=127.0.0.1:{broker.port}"]
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def _exchange(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def _levels(broker: BrokerProcess) -> list[tuple[str, str]]:
    return [(e["level"], e["event"]) for e in broker.events()]


def test_management_input_faults(ha_broker: BrokerProcess) -> None:
    port = ha_broker.mgmt_port
    # 2. an authenticated PUT that sends less than its Content-Length and hangs up
    for _ in range(3):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(
                b"PUT /api/queues/q1 HTTP/1.1\r\nHost: x\r\n"
                + f"Authorization: {GUEST_AUTH}\r\n".encode()
                + b'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"dur'
            )
    # 3. bad request lines and headers, first on a connection and after a good request
    bad = [
        b"get / HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /api/status HTTP/1.1\r\nHost: x\r\n\r\nget / HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET / HTTP/1.1\r\nHo st: x\r\n\r\n",
        b"GET /api/status HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\nHo st: x\r\n\r\n",
    ]
    for data in bad:
        assert b" 400 " in _exchange(port, data)
    # 4. a 400-digit lease (and epoch)
    huge = "1" + "0" * 400
    for path, body in [
        ("/api/ha/lease", f'{{"cluster_manager": true, "lease": {huge}}}'),
        ("/api/ha/promote", f'{{"cluster_manager": true, "lease": {huge}}}'),
        ("/api/ha/promote", f'{{"cluster_manager": true, "epoch": {huge}}}'),
        ("/api/ha/in-sync", f'{{"cluster_manager": true, "epoch": {huge}, "members": []}}'),
    ]:
        raw = body.encode()
        answer = _exchange(
            port,
            f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: {GUEST_AUTH}\r\n".encode()
            + b"Content-Type: application/json\r\nConnection: close\r\n"
            + f"Content-Length: {len(raw)}\r\n\r\n".encode()
            + raw,
        )
        head, _, reply = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 400 "), (path, body[:60], answer[:300])
        assert json.loads(reply)["error"] == "bad_request"
    # The broker still serves, logged no error and printed nothing outside its log.
    status = b"GET /api/status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    assert b" 200 " in _exchange(port, status)
    poll_until(
        lambda: ("warning", "management_http_error") in _levels(ha_broker), 5, "the http warning"
    )
    errors = [e for e in ha_broker.events() if e["level"] in ("error", "critical")]
    assert errors == []
    stderr = (ha_broker.workdir / "stderr").read_text()
    assert "Traceback" not in stderr and stderr.strip() == "", stderr
    assert ha_broker.alive()
