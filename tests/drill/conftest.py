"""Fixtures of the drill's tests (ZooKeeper and cluster names: tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path
