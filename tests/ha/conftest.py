"""Fixtures of every HA test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.core.message import TxMark
from tests.ha.cluster import Cluster


@pytest.fixture(autouse=True)
def fresh_transaction_ids() -> Iterator[None]:
    """Transaction ids count per process (one broker a process); a test that commits a
    transaction in process must not change what a later in-process primary sends first
    (a TXBASE once any transaction was committed). Each HA test starts as a fresh process
    would, whatever tests outside ``tests/ha`` committed before it in this worker."""
    saved = TxMark._next_id
    TxMark._next_id = 1
    try:
        yield
    finally:
        TxMark._next_id = saved


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[Cluster]:
    """Two brokers of a cluster, started (not promoted), stopped by PID afterwards."""
    cluster = Cluster(tmp_path, 2).start()
    try:
        yield cluster
    finally:
        cluster.stop()
