"""A backup's store that holds an era its primary's store never saw (issue 12, item 3): the
rule (pure), and end to end with real brokers: moved aside to ``_cluster.bak.NNNN``, never
dequeued away, and the backup catches up empty."""

from __future__ import annotations

import json

import pika
import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.ha.store_history import diverged
from common.polling import poll_until
from tests.ha.cluster import Cluster

PERSISTENT = pika.BasicProperties(delivery_mode=2)


@pytest.mark.parametrize(
    ("store", "base", "primary", "expected"),
    [
        (1, 1, 3, False),  # the same era as the primary's store: the handshake reconciles
        (0, 1, 3, False),  # an older or empty store
        (2, 1, 3, True),  # era 2: the primary's store (era 1) never saw it
        (3, 1, 3, False),  # it replicated this primary already
        (2, None, 3, False),  # a primary that does not say
    ],
)
def test_the_rule(store: int, base: int | None, primary: int, expected: bool) -> None:
    assert diverged(store, base, primary) is expected


@given(st.integers(0, 9), st.integers(0, 9), st.integers(0, 9))
def test_a_store_never_diverges_from_a_primary_of_its_own_lineage(store, base, primary) -> None:
    """A store at most as new as the primary's base, or the primary's own era, never
    diverges; one strictly between always does."""
    if store <= base or store == primary:
        assert not diverged(store, base, primary)
    elif store < primary:
        assert diverged(store, base, primary)


def publish(port: int, bodies: list[str]) -> None:
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    channel = connection.channel()
    channel.confirm_delivery()
    channel.queue_declare("orders", durable=True)
    for body in bodies:
        channel.basic_publish("", "orders", body.encode(), PERSISTENT)
    connection.close()


def test_a_diverged_backup_moves_its_store_aside_and_catches_up(pair: Cluster) -> None:
    """b0 (era 1) is made primary again by hand after b1 confirmed messages alone in era 2:
    b1 must not let the handshake dequeue them: it keeps them in _cluster.bak.0001."""
    pair.promote(0, epoch=1)
    pair.wait_state(1, "ready")
    publish(pair.ports[0], [f"a{i}" for i in range(20)])
    pair.kill(0)
    pair.promote(1, epoch=2)
    pair.wait_state(1, "active")
    publish(pair.ports[1], [f"b{i}" for i in range(30)])  # era 2: only b1 has them
    pair.kill(1)
    pair.brokers[0].start()
    pair.promote(0, epoch=3)  # the operator's override: an older store made primary
    pair.wait_state(0, "active")

    backup = pair.brokers[1]
    try:  # it stops before replicating anything, maybe before it is seen listening
        backup.start()
    except RuntimeError as exc:
        assert "qpidd exited with 1" in str(exc)
    proc = backup.proc
    assert proc is not None
    poll_until(lambda: proc.poll() is not None, 15)
    assert proc.returncode == 1
    diverged_lines = [
        json.loads(line)
        for line in backup.log_file.read_text().splitlines()
        if '"ha_store_diverged"' in line
    ]
    assert diverged_lines and diverged_lines[-1]["store_epoch"] == 2
    backup.start()  # as its agent or service manager would: the store goes aside
    pair.wait_state(1, "ready")
    moved = backup.log_file.read_text()
    assert '"store_moved_aside"' in moved
    kept = backup.workdir / "data" / "_cluster.bak.0001"
    assert "diverged" in (kept / "reason").read_text()
    assert list((kept / "store").glob("*.seg"))  # era 2's messages, kept for the operator
    poll_until(lambda: pair.queue_messages(1, "orders") == 20, 10)
