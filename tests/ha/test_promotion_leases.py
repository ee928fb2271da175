"""A promotion restarts the ``x-expires`` lease of every queue (``entered_steps``).

A backup never sees a queue used: its consumers and gets are on the primary, so the
backup's copy was last used at its declare. Before the promotion restarted the leases, the
new primary's first walk of the queues (``VirtualHost.tick``, once the promotion's quiet
ends) deleted every ``x-expires`` queue declared longer ago than its lease whose consumers
had not come back yet, with its confirmed messages. The real promotion
(:func:`~broker.ha.primary_start.start_primary`) on a virtual host as a backup holds it,
a clock the test moves, no sockets.
"""

from __future__ import annotations

import asyncio
from typing import Any

from broker.core.message import Message
from broker.core.vhost import VirtualHost
from broker.ha.primary_start import start_primary
from broker.ha.replicate_level import ReplicateLevel
from tests.core.fakes import FakeClock
from tests.ha.test_guard_first_use import Identity, Lineage

LEASE_MS = 60_000


def _backup_for_an_hour() -> tuple[VirtualHost, FakeClock]:
    """A backup's virtual host: queues declared (replicated) an hour ago, one with
    ``x-expires``, each with a message; never used here since."""
    clock = FakeClock()
    vhost = VirtualHost(clock=clock)
    vhost.declare_queue("leased", arguments={"x-expires": LEASE_MS})
    vhost.declare_queue("plain")
    for name in ("leased", "plain"):
        vhost.publish(vhost.exchange(""), Message("", name, body=b"confirmed"))
    clock.advance(3600.0)  # in use on the primary all along
    return vhost, clock


def _promote(vhost: VirtualHost, clock: FakeClock) -> None:
    args: dict[str, Any] = {  # (the store's lineage and the cluster's id: stand-ins)
        "epoch": 2,
        "lineage": Lineage(),
        "identity": Identity(),
        "replicate_default": ReplicateLevel.ALL,
        "clock": clock,
        "auto_delete_grace": 10.0,
    }
    asyncio.run(start_primary(vhost, {}, **args))


def test_a_promoted_queue_gets_its_whole_lease_from_the_promotion() -> None:
    vhost, clock = _backup_for_an_hour()
    _promote(vhost, clock)
    clock.advance(LEASE_MS / 1000.0 - 1.0)  # its clients not back yet
    vhost.tick()
    assert "leased" in vhost.queues
    assert vhost.queues["leased"].message_count == 1
    clock.advance(2.0)  # unused for its whole lease since the promotion: gone, as it would be
    vhost.tick()
    assert "leased" not in vhost.queues
    assert "plain" in vhost.queues


def test_a_queue_used_after_the_promotion_keeps_its_lease_from_its_use() -> None:
    vhost, clock = _backup_for_an_hour()
    _promote(vhost, clock)
    clock.advance(30.0)
    vhost.queues["leased"].get()  # a client's basic.get: a use
    clock.advance(LEASE_MS / 1000.0 - 1.0)
    vhost.tick()
    assert "leased" in vhost.queues
