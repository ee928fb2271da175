"""The scale soak's clients count where a dial's time went (bench/scale_load.py): the
seconds to connection.start, and a time-out before or after it."""

from __future__ import annotations

import importlib
import multiprocessing
from types import ModuleType

from broker.amqp.client import ConnectionFailed
from tests.ha.scale_soak_module import scale_soak


def scale_load() -> ModuleType:
    """``bench/scale_load.py`` (on the path once the soak is loaded)."""
    scale_soak()
    return importlib.import_module("scale_load")


def test_start_buckets() -> None:
    assert [scale_load().start_bucket(s) for s in (0.05, 0.1, 0.3, 4.0, 29.0, 31.0)] == [
        "0.1",
        "0.1",
        "0.5",
        "5",
        "30",
        "more",
    ]


def test_a_dial_is_counted_by_where_it_timed_out() -> None:
    clients = scale_load().ClientsProcess(
        [("127.0.0.1", 1)], [0], {}, multiprocessing.Value("q", 0)
    )
    timed_out = ConnectionFailed("127.0.0.1:1: no open connection within 30 s")
    clients._dial_ended(100.0, [], timed_out)
    clients._dial_ended(100.0, [112.0], timed_out)
    clients._dial_ended(100.0, [100.05], None)
    clients._dial_ended(100.0, [], ConnectionFailed("127.0.0.1:1: connection refused"))
    counts = clients.counts
    assert (counts.timed_out_before_start, counts.timed_out_after_start) == (1, 1)
    assert counts.start_s == {"20": 1, "0.1": 1}
