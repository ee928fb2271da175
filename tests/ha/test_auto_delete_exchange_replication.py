"""A backup leaves an auto-delete exchange's deletion to the primary (found by the HA fuzzer,
seed 20261203: an auto-delete topic exchange on the primary, on neither backup).

A backup does not see every binding of the primary's exchanges: none to a queue the primary
does not replicate (``qpid.replicate: none``). When it applied an unbind or a queue's
deletion with the core's own auto-delete rule, it deleted an exchange the primary kept (its
binding to the unreplicated queue left), and a fail-over then lost the exchange. Now what a
backup applies never auto-deletes an exchange; the primary's auto-deletion reaches it as an
exchange deletion of its own. Real vhosts, streams and replicator, in memory
(tests/ha/replication_link.py)."""

from __future__ import annotations

from broker.core.vhost import VirtualHost
from broker.ha.primary import Primary, StandaloneBackups
from broker.ha.replicate_level import ReplicateLevel
from broker.ha.replication_contract import ReplicationContract
from broker.ha.streams import PrimaryStreams
from tests.ha.replication_link import Link

NOT_REPLICATED = {"qpid.replicate": "none"}


def _linked() -> tuple[VirtualHost, Link]:
    """A primary's vhost with an auto-delete exchange ``ad`` bound to a replicated queue
    ``r`` and to an unreplicated one ``n``, and a backup holding what it replicates."""
    default = ReplicateLevel.ALL
    vhost = VirtualHost()
    vhost.contract = ReplicationContract(default)
    primary = Primary(vhost, replicate_default=default, clock=lambda: 0.0, auto_delete_grace=10)
    link = Link(PrimaryStreams(primary, StandaloneBackups(primary)))
    vhost.declare_exchange("ad", "topic", auto_delete=True)
    vhost.declare_queue("r")
    vhost.declare_queue("n", arguments=NOT_REPLICATED)
    vhost.bind("r", "ad", "k.#")
    vhost.bind("n", "ad", "k.#")
    link.settle()
    backup = link.backup.default
    assert "ad" in backup.exchanges and "n" not in backup.queues
    assert [b.destination.name for b in backup.exchanges["ad"].bindings.values()] == ["r"]
    return vhost, link


def test_an_unbind_that_leaves_the_primary_a_binding_keeps_the_exchange_on_the_backup() -> None:
    vhost, link = _linked()
    vhost.unbind("r", "ad", "k.#")
    link.settle()
    assert "ad" in vhost.exchanges  # its binding to n is left
    backup = link.backup.default
    assert "ad" in backup.exchanges, "the backup deleted an exchange the primary kept"
    assert not backup.exchanges["ad"].bindings


def test_a_queue_deleted_leaves_the_exchange_the_primary_kept() -> None:
    vhost, link = _linked()
    vhost.delete_queue("r")
    link.settle()
    assert "ad" in vhost.exchanges
    assert "ad" in link.backup.default.exchanges
    assert "r" not in link.backup.default.queues


def test_the_primarys_auto_deletion_reaches_the_backup() -> None:
    vhost, link = _linked()
    vhost.unbind("n", "ad", "k.#")
    vhost.unbind("r", "ad", "k.#")  # the last binding: the primary deletes it
    link.settle()
    assert "ad" not in vhost.exchanges
    assert "ad" not in link.backup.default.exchanges


def test_the_primarys_auto_deletion_by_a_queue_deleted_reaches_the_backup() -> None:
    vhost, link = _linked()
    vhost.delete_queue("n")
    vhost.delete_queue("r")
    link.settle()
    assert "ad" not in vhost.exchanges
    assert "ad" not in link.backup.default.exchanges


def test_an_exchange_to_exchange_unbind_keeps_the_source_the_primary_kept() -> None:
    vhost, link = _linked()
    vhost.declare_exchange("dest", "fanout")
    vhost.bind_exchange("dest", "ad", "k.#")
    link.settle()
    vhost.unbind("r", "ad", "k.#")
    vhost.unbind_exchange("dest", "ad", "k.#")
    link.settle()
    assert "ad" in vhost.exchanges  # still bound to n
    assert "ad" in link.backup.default.exchanges


def test_the_core_rule_is_unchanged_for_what_is_not_replicated() -> None:
    """A client's unbind or queue.delete (``replicated`` False) still auto-deletes; the
    primary's event applied (``replicated`` True) does not."""
    for replicated in (False, True):
        vhost = VirtualHost()
        vhost.declare_exchange("ad", "direct", auto_delete=True)
        vhost.declare_queue("q")
        vhost.bind("q", "ad", "k")
        vhost.unbind("q", "ad", "k", replicated=replicated)
        assert ("ad" in vhost.exchanges) is replicated
        vhost = VirtualHost()
        vhost.declare_exchange("ad", "direct", auto_delete=True)
        vhost.declare_queue("q")
        vhost.bind("q", "ad", "k")
        vhost.delete_queue("q", replicated=replicated)
        assert ("ad" in vhost.exchanges) is replicated
