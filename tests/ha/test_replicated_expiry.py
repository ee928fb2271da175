"""A message expired on arrival at a backup stays until its primary removes it.

Only the primary expires and dead-letters (``broker/ha/queue_replicator.py``). A message with
a TTL of 0 (``expiration: "0"`` or ``x-message-ttl: 0``) that a consumer took at once on the
primary is still on the primary, unacknowledged, and is replicated; a backup applying it
must keep it, not expire it on arrival: a backup that did dropped it at once and, with a
dead-letter exchange, published its own dead-lettered copy, so every queue the exchange
routes to held one message more on the backups than on the primary, for good (the HA
fuzz's quiescent check 33 under load, seed 20261204: three queues one ahead on both
backups). Sans-I/O: the primary's real streams and a backup's real replicator
(``tests/ha/replication_link.py``), a consumer as the core tests make one.
"""

from __future__ import annotations

from typing import Any

import pytest
from pamqp import commands

from broker.core import properties
from broker.core.message import Message, TxMark
from broker.core.vhost import VirtualHost
from broker.ha.primary import Primary, StandaloneBackups
from broker.ha.replicate_level import ReplicateLevel
from broker.ha.replication_contract import ReplicationContract
from broker.ha.streams import PrimaryStreams
from tests.core.fakes import FakeConsumer
from tests.ha.replication_link import Link

TARGETS = ("d1", "d2", "d3")


def _cluster() -> tuple[VirtualHost, Link]:
    vhost = VirtualHost()
    vhost.contract = ReplicationContract(ReplicateLevel.ALL)
    primary = Primary(
        vhost, replicate_default=ReplicateLevel.ALL, clock=lambda: 0.0, auto_delete_grace=10
    )
    streams = PrimaryStreams(primary, StandaloneBackups(primary))
    vhost.declare_exchange("dlx", "fanout")
    for name in TARGETS:
        vhost.declare_queue(name)
        vhost.bind(name, "dlx", "")
    return vhost, Link(streams)


def _counts(vhost: VirtualHost) -> dict[str, tuple[int, int]]:
    """Each queue's ready and unacknowledged messages."""
    return {name: (q.message_count, q.unacked) for name, q in sorted(vhost.queues.items())}


def _backup_counts(vhost: VirtualHost) -> dict[str, int]:
    """Each queue's messages as a backup holds them (a backup delivers nothing)."""
    return {name: q.message_count + q.unacked for name, q in sorted(vhost.queues.items())}


def _primary_counts(vhost: VirtualHost) -> dict[str, int]:
    return {name: ready + unacked for name, (ready, unacked) in _counts(vhost).items()}


@pytest.mark.parametrize(
    ("arguments", "expiration"),
    [({}, "0"), ({"x-message-ttl": 0}, None)],
    ids=["expiration-0", "x-message-ttl-0"],
)
def test_a_message_a_consumer_took_on_arrival_stays_on_the_backups_until_it_leaves(
    arguments: dict[str, Any], expiration: str | None
) -> None:
    vhost, link = _cluster()
    vhost.declare_queue("q", arguments={"x-dead-letter-exchange": "dlx", **arguments})
    link.settle()
    queue = vhost.queue("q")
    consumer = FakeConsumer()
    queue.add_consumer(consumer)
    raw = properties.encode(commands.Basic.Properties(expiration=expiration))
    vhost.publish(vhost.exchange(""), Message("", "q", raw, b"taken at once"))
    assert len(consumer.unacked) == 1  # taken on arrival: not expired on the primary
    link.settle()
    backup = link.backup.default
    assert (
        _backup_counts(backup)
        == _primary_counts(vhost)
        == {
            "d1": 0,
            "d2": 0,
            "d3": 0,
            "q": 1,
        }
    )
    assert backup.queue("q").expired_total == 0
    assert [e.message.body for e in backup.queue("q").entries()] == [b"taken at once"]

    # The consumer goes away: the message is back on the primary, expired, and the primary
    # dead-letters it (its copy replicated like any publish); the backup removes its own.
    queue.remove_consumer(consumer)
    queue.requeue(consumer.unacked)
    vhost.tick()
    link.settle()
    assert _primary_counts(vhost) == {"d1": 1, "d2": 1, "d3": 1, "q": 0}
    assert _backup_counts(backup) == _primary_counts(vhost)
    for name in TARGETS:
        (entry,) = backup.queue(name).entries()
        assert entry.message.body == b"taken at once"


def test_an_acknowledged_one_leaves_the_backups_with_no_dead_letter() -> None:
    vhost, link = _cluster()
    vhost.declare_queue("q", arguments={"x-dead-letter-exchange": "dlx"})
    queue = vhost.queue("q")
    consumer = FakeConsumer()
    queue.add_consumer(consumer)
    link.settle()
    raw = properties.encode(commands.Basic.Properties(expiration="0"))
    for number in range(5):
        vhost.publish(vhost.exchange(""), Message("", "q", raw, b"m%d" % number))
    link.settle()
    backup = link.backup.default
    assert _backup_counts(backup) == {"d1": 0, "d2": 0, "d3": 0, "q": 5}
    queue.settle_all(consumer.unacked)
    link.settle()
    assert _backup_counts(backup) == _primary_counts(vhost) == {"d1": 0, "d2": 0, "d3": 0, "q": 0}


def test_a_transactions_message_expired_on_arrival_is_dead_lettered_once() -> None:
    """A committed transaction's message is sent even when it left the primary before it
    was sent (its transaction's total counts it), then its dequeue: expired on arrival on
    the primary (and dead-lettered there), it reaches the backup and must not be expired
    and dead-lettered a second time there."""
    vhost, link = _cluster()
    vhost.declare_queue("q", arguments={"x-dead-letter-exchange": "dlx"})
    link.settle()
    mark = TxMark()  # as tx.commit publishes: one mark on each of the transaction's messages
    raw = properties.encode(commands.Basic.Properties(expiration="0"))
    for body in (b"t1", b"t2"):
        message = Message("", "q", raw, body)
        message.tx = mark
        vhost.publish(vhost.exchange(""), message)
    assert _primary_counts(vhost) == {"d1": 2, "d2": 2, "d3": 2, "q": 0}
    link.settle()
    backup = link.backup.default
    assert _backup_counts(backup) == _primary_counts(vhost)
    assert [e.message.body for e in backup.queue("d1").entries()] == [b"t1", b"t2"]
