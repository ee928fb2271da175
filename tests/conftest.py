"""Shared fixtures: a real broker process per test that asks for one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.broker_process import BrokerProcess


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A stand-alone qpidd on free loopback ports, stopped (by PID) after the test."""
    process = BrokerProcess(tmp_path / "qpidd").start()
    try:
        yield process
    finally:
        process.stop()
