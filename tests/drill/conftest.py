"""Fixtures of the drill's tests: a real ZooKeeper for the session, a cluster name per test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.zookeeper import ZooKeeper, start_zookeeper


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeper]:
    """One ZooKeeper for the drill tests (container or Debian package), stopped at the end."""
    server = start_zookeeper(tmp_path_factory.mktemp("zookeeper"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def cluster() -> str:
    """A cluster name of this test alone."""
    return f"d-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path
