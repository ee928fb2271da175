"""Broker fixtures for the end-to-end tests.

``shared_broker`` is one qpidd per test module (tests use unique queue and exchange names,
so they stay independent of each other); ``start_broker`` starts a dedicated broker with
extra options for a test that needs them. Every broker is stopped by PID. ``conn`` is a pika
BlockingConnection to the module's shared broker, closed after the test.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import pika
import pytest

from tests.broker_process import BrokerProcess
from tests.e2e.support import connect


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One qpidd shared by the tests of a module, stopped (by PID) after the module."""
    process = BrokerProcess(tmp_path_factory.mktemp("qpidd-shared")).start()
    try:
        yield process
    finally:
        process.stop()


StartBroker = Callable[..., BrokerProcess]


@pytest.fixture
def start_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StartBroker]:
    """Start a dedicated qpidd with extra options: ``start_broker("--heartbeat=1")``."""
    started: list[BrokerProcess] = []
    counter = itertools.count()

    def start(*args: str) -> BrokerProcess:
        workdir = tmp_path_factory.mktemp(f"qpidd-{next(counter)}")
        process = BrokerProcess(workdir, args=list(args)).start()
        started.append(process)
        return process

    try:
        yield start
    finally:
        for process in started:
            process.stop()


@pytest.fixture
def conn(shared_broker: BrokerProcess) -> Iterator[pika.BlockingConnection]:
    connection = connect(shared_broker)
    try:
        yield connection
    finally:
        if connection.is_open:
            connection.close()
