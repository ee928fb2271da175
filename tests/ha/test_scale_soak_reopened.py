"""``bench/scale_soak.py``'s time to every client open again after a primary fault, from the
brokers' ``connection_opened`` lines (soak48: the clients' own watcher recorded none while
every lost connection was opened again). Sans I/O."""

from __future__ import annotations

from typing import Any

from broker.amqp.client.handshake import CLIENT_PRODUCT
from tests.ha.scale_soak_module import scale_soak

soak = scale_soak()

FAULTS = [
    (100.0, "kill", "n1"),
    (200.0, "kill-node", "n2"),
    (202.3, "heal kill-node", "n2"),
    (300.0, "partition", "n1"),
    (302.2, "heal partition", "n1"),
    (400.0, "restart-backup", "n1"),
]


def _opened(at: str, client: str) -> dict[str, Any]:
    return {"event": "connection_opened", "ts": at, "client": client}


def test_only_the_scale_clients_connections_are_counted() -> None:
    events = [
        _opened("2026-12-02T13:47:00+00:00", f"{CLIENT_PRODUCT} 0.1.0"),
        _opened("2026-12-02T13:47:01+00:00", "Pika Python Client Library 1.4.4"),
        _opened("2026-12-02T13:47:02+00:00", "qpidd HA backup link 0.1.0"),
        {"event": "connection_closed", "ts": "2026-12-02T13:47:03+00:00"},
    ]
    assert len(soak.clients_opened(events)) == 1


def test_each_primary_fault_counts_to_the_last_client_before_the_next() -> None:
    opened = [101.0, 103.5, 105.0]  # the kill: all 3 back 5.0 s after it
    opened += [210.0, 230.0]  # the node loss: 2 of 3 before the partition
    opened += [301.0, 302.0, 320.5, 410.0]  # the partition: the third 20.5 s after
    assert soak.clients_reopened(opened, FAULTS, 3) == [5.0, None, 20.5]
    assert soak.clients_reopened(sorted(opened, reverse=True), FAULTS, 3) == [5.0, None, 20.5]
    assert soak.clients_reopened(opened, [], 3) == []
    assert soak.clients_reopened(opened, FAULTS, 0) == [None, None, None]
