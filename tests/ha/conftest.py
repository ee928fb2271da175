"""Fixtures of every HA test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from broker.core.message import TxMark


@pytest.fixture(autouse=True)
def fresh_transaction_ids() -> Iterator[None]:
    """Transaction ids count per process (one broker a process); a test that commits a
    transaction in process must not change what a later in-process primary sends first
    (a TXBASE once any transaction was committed)."""
    saved = TxMark._next_id
    try:
        yield
    finally:
        TxMark._next_id = saved
