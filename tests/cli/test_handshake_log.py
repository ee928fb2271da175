"""A client that hangs up mid-handshake leaves a log line (issue 15): ``handshake_abandoned``
with the step it stopped at, info once the protocol header came, debug for a bare TCP probe
(a load balancer's check must not fill the log)."""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest

from common.polling import poll_until
from tests.broker_process import BrokerProcess
from tests.drill.log_schema import problems

pytestmark = pytest.mark.xdist_group("cli_brokers")  # one solo and one pair (conftest)

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"


def _abandoned(broker: BrokerProcess, port: int) -> dict[str, Any] | None:
    peer = f"127.0.0.1:{port}"
    found = [
        e
        for e in broker.events()
        if e.get("event") == "handshake_abandoned" and e.get("peer") == peer
    ]
    return found[0] if found else None


def test_hang_up_after_connection_start_is_logged(solo: BrokerProcess) -> None:
    with socket.create_connection(("127.0.0.1", solo.port), timeout=5) as sock:
        port = sock.getsockname()[1]
        sock.sendall(PROTOCOL_HEADER)
        assert sock.recv(7)  # the frame header of connection.start
    event = poll_until(lambda: _abandoned(solo, port), 10, "handshake_abandoned")
    assert (event["level"], event["state"], event["component"]) == (
        "info",
        "await-start-ok",
        "amqp",
    )
    assert event["connection"].startswith(f"127.0.0.1:{port} #")
    assert event["reason"] and problems(event) == []


def test_a_bare_tcp_probe_is_logged_at_debug(solo: BrokerProcess) -> None:
    with socket.create_connection(("127.0.0.1", solo.port), timeout=5) as sock:
        port = sock.getsockname()[1]
    event = poll_until(lambda: _abandoned(solo, port), 10, "handshake_abandoned")
    assert (event["level"], event["state"]) == ("debug", "await-header")


def test_an_abandoned_handshake_says_where_its_time_went(solo: BrokerProcess) -> None:
    """The line says how long the socket waited to be made, how long the connection lived,
    how long ago it last wrote (connection.start) and read, and what it read but had not
    handled (here: the first 5 bytes of a frame, never completed)."""
    with socket.create_connection(("127.0.0.1", solo.port), timeout=5) as sock:
        port = sock.getsockname()[1]
        sock.sendall(PROTOCOL_HEADER)
        assert sock.recv(7)  # the frame header of connection.start
        sock.sendall(b"\x01\x00\x00\x00\x00")  # a method frame's first bytes, no more
        held = 0.4
        time.sleep(held)  # not a synchronisation: the client's wait, which the line shows
    event = poll_until(lambda: _abandoned(solo, port), 10, "handshake_abandoned")
    assert event["state"] == "await-start-ok"
    assert event["wrote_s_ago"] >= held * 0.9
    assert event["lived_s"] >= event["wrote_s_ago"]
    assert 0 <= event["read_s_ago"] <= event["lived_s"]
    assert event["waited_s"] >= 0 and event["unread"] == 0
    assert event["buffered"] == 5
    assert problems(event) == []
