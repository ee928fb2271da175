"""pika BlockingConnection: refused credentials, the connection limit, heartbeats."""

from __future__ import annotations

import time

import pika
import pytest
from pika.exceptions import (
    AuthenticationError,
    ProbableAccessDeniedError,
    ProbableAuthenticationError,
)

from common.polling import poll_until
from tests.broker_process import BrokerProcess
from tests.e2e.conftest import StartBroker
from tests.e2e.support import RawClient, connect, events, pika_params


def test_wrong_password_is_refused(shared_broker: BrokerProcess) -> None:
    for user, password in (("guest", "n0t-the-Pa55word"), ("nobody", "guest")):
        params = pika_params(shared_broker, credentials=pika.PlainCredentials(user, password))
        with pytest.raises(ProbableAuthenticationError) as info:
            pika.BlockingConnection(params)
        assert "403" in str(info.value) and "ACCESS_REFUSED" in str(info.value)
    # A mechanism the broker does not offer fails in the client before any credentials.
    params = pika_params(shared_broker, credentials=pika.credentials.ExternalCredentials())
    with pytest.raises(AuthenticationError):
        pika.BlockingConnection(params)
    failures = [e for e in events(shared_broker) if e["event"] == "authentication_failed"]
    assert len(failures) >= 2
    assert all("n0t-the-Pa55word" not in str(e) for e in failures)  # no password logged


def test_max_connections_is_enforced(start_broker: StartBroker) -> None:
    broker = start_broker("--max-connections=2")
    first, second = connect(broker), connect(broker)
    try:
        with pytest.raises(ProbableAccessDeniedError) as info:
            connect(broker)
        assert "530" in str(info.value)
        assert "NOT_ALLOWED - connection limit (2) reached" in str(info.value)
        first.close()
        third = connect(broker)  # a slot is free again
        third.channel().queue_declare("", exclusive=True)
        third.close()
    finally:
        for connection in (first, second):
            if connection.is_open:
                connection.close()
    refusals = [e for e in events(broker) if e.get("reply_code") == 530]
    assert [e["event"] for e in refusals] == ["protocol_error"]


def test_heartbeats_keep_a_live_client_and_drop_a_silent_one(start_broker: StartBroker) -> None:
    broker = start_broker()
    live = connect(broker, heartbeat=1)
    with RawClient(broker) as silent:
        silent.handshake(heartbeat=1)
        # The pika client sends heartbeats from process_data_events; the raw client only
        # reads. After 2 heartbeat intervals of silence the broker drops the raw client.
        received = []

        def pump(_left: float) -> None:
            live.process_data_events(time_limit=0.1)
            try:
                got = silent.read_frame(timeout=0.1)
            except TimeoutError:
                return
            if got is not None:
                received.append(got[1])

        poll_until(lambda: silent.eof, 6, "the broker to drop the silent client", between=pump)
        assert received, "the broker sent no heartbeat to the silent client"
        event = silent.wait_for_event("heartbeat_timeout")
        assert event["heartbeat"] == 1
        closed = silent.wait_for_event("connection_closed")
        assert "missed heartbeats" in closed["reason"]

        # The live client stayed idle (apart from heartbeats) for as long, and more.
        idle_until = time.monotonic() + 1.5
        while time.monotonic() < idle_until:
            live.process_data_events(time_limit=0.25)
    assert live.is_open
    channel = live.channel()
    assert channel.queue_declare("", exclusive=True).method.queue
    live.close()
    assert [e for e in events(broker) if e["event"] == "heartbeat_timeout"] == [event]
    opened = [e for e in events(broker) if e["event"] == "connection_opened"]
    assert sorted(e["heartbeat"] for e in opened) == [1, 1]
