"""A drill whose worker thread dies fails; its connect loop takes every way pika reports a
failed attempt as one, and tries again: pika 1.4 raises ValueError ("Expected connected
socket, but getpeername() failed") when the socket is reset between the TCP connect and its
check, as when the broker is SIGKILLed with the connection in its accept queue (seen in CI:
the publisher thread died and the drill went on without it). A real qpidd and real pika."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pika
import pytest

from qpid_ha_cli.drill.clients import PikaClient
from qpid_ha_cli.drill.run import DrillRun, WorkerFailed
from qpid_ha_cli.drill.settings import DrillSettings, parse_drill_url
from tests.broker_process import BrokerProcess

PIKA_RESET = (
    "Expected connected socket, but getpeername() failed: error=OSError(107, 'Transport"
    " endpoint is not connected')"
)


def test_a_socket_reset_during_connect_is_a_failed_attempt_tried_again(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "b").start()
    try:
        _connect_after_a_reset(broker)
    finally:
        broker.stop()


def _connect_after_a_reset(broker: BrokerProcess) -> None:
    def reset() -> Any:
        raise ValueError(PIKA_RESET)

    _connect_after_a_failed_attempt(broker, reset, "ValueError:")


def _connect_after_a_failed_attempt(
    broker: BrokerProcess, first_attempt: Callable[[], Any], failure: str
) -> None:
    """The drill's publisher connects: its first attempt is ``first_attempt`` (a way pika
    fails), the next dials ``broker``; the drill tried again and says why the first
    failed (``failure``: how its reason begins)."""
    settings = DrillSettings(url=parse_drill_url(f"amqp:guest/guest@127.0.0.1:{broker.port}")[0])
    run = DrillRun(settings)
    attempts: list[int] = []

    def blocking_connection(params: Any) -> Any:
        attempts.append(1)
        if len(attempts) == 1:
            return first_attempt()
        return pika.BlockingConnection(params)

    assert isinstance(run.client, PikaClient)
    run.client._pika = SimpleNamespace(
        BlockingConnection=blocking_connection, exceptions=pika.exceptions
    )
    got = run._connect("publisher", time.monotonic() + 30, threading.Event())
    assert got is not None
    try:
        assert len(attempts) == 2 and got.address == f"127.0.0.1:{broker.port}"
        assert run._last_failure is not None and run._last_failure.startswith(failure)
    finally:
        got.close()


def test_a_worker_thread_that_dies_fails_the_drill(tmp_path: Path) -> None:
    """A consumer that stops on an error the drill does not expect: the drill fails with its
    reason (before, the thread died with a traceback and the drill said OK for the part it
    saw)."""
    broker = BrokerProcess(tmp_path / "b").start()
    try:
        url = parse_drill_url(f"amqp:guest/guest@127.0.0.1:{broker.port}")[0]
        run = DrillRun(DrillSettings(url=url, duration=30.0, rate=50.0))

        def consumer() -> None:
            raise RuntimeError("boom")

        run._consumer = consumer  # type: ignore[method-assign]
        started = time.monotonic()
        with pytest.raises(WorkerFailed, match="the consumer stopped on RuntimeError: boom"):
            run.run()
        assert time.monotonic() - started < 25  # it stopped the publisher, not ran its 30 s
    finally:
        broker.stop()


def test_a_handshake_past_pikas_stack_timeout_is_a_failed_attempt_tried_again(
    tmp_path: Path,
) -> None:
    """pika raises its connector's own exception, not an AMQPError, for a handshake not
    done within its stack timeout (AMQPConnectorStackTimeout: a starved new primary under
    the reconnect storm of 2,000 clients, seen in the scale soak: the drill's publisher
    stopped and the whole drill failed). A real listener that never answers, real pika."""
    broker = BrokerProcess(tmp_path / "b").start()
    silent = socket.socket()
    try:
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)

        def mute() -> Any:
            params = pika.ConnectionParameters(
                host="127.0.0.1",
                port=silent.getsockname()[1],
                connection_attempts=1,
                stack_timeout=0.5,
            )
            return pika.BlockingConnection([params])

        _connect_after_a_failed_attempt(broker, mute, "AMQPConnectorStackTimeout")
    finally:
        silent.close()
        broker.stop()
