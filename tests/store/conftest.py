"""Fixtures of the store tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.store.store_brokers import StoreBrokers


@pytest.fixture
def brokers(tmp_path: Path) -> Iterator[StoreBrokers]:
    """Brokers on one data directory; every one started is killed by PID at the end."""
    started = StoreBrokers(tmp_path)
    try:
        yield started
    finally:
        started.stop_all()
