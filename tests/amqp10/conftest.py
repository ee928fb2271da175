"""The AMQP 1.0 end-to-end tests' broker: one per test worker for the whole run (starting
one is most of the time these take), shared by the Proton and rhea tests. It keeps a data
directory, so the durable test can kill and restart it on the same port, and the others,
which declare what they use, pass before or after."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.broker_process import BrokerProcess


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    workdir = tmp_path_factory.mktemp("amqp10")
    process = BrokerProcess(workdir / "qpidd", args=[f"--data-dir={workdir / 'data'}"])
    process.start(timeout=40)  # slow when the machine is loaded; quick otherwise
    try:
        yield process
    finally:
        process.stop()
