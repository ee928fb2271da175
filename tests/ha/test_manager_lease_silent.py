"""The cluster manager's lease: when a primary counts its manager silent (issue 26, item 4).

A ZooKeeper agent renews its primary's lease with what is left of its session's lease (its
last answered request plus 0.9 of the session timeout); a primary whose lease has less than
half the longest one it was given left has not been vouched for anew for that long: its
agent lost ZooKeeper (``ManagerLease.silent``; a cut-off primary then closes its clients).
"""

from __future__ import annotations

import pytest

from broker.ha.manager_lease import ManagerLease
from broker.ha.role_events import Event, LeaseGranted
from broker.ha.state import HaState
from broker.liveness import LeaseOffers


class Role:
    def __init__(self) -> None:
        self.lease_until: float | None = None
        self.state = HaState.ACTIVE
        self.fenced = False
        self.on_grants = False


class Host:
    """What ManagerLease reads of its broker; the test sets the clock."""

    def __init__(self) -> None:
        self.role = Role()
        self.clock = 100.0

    def handle(self, event: Event) -> None:
        assert isinstance(event, LeaseGranted)
        self.role.lease_until = event.now + event.seconds

    def now(self) -> float:
        return self.clock

    def grants_until(self) -> float | None:
        return None

    def tick(self) -> None:
        pass


def test_a_manager_is_silent_once_less_than_half_its_longest_lease_is_left() -> None:
    host = Host()
    lease = ManagerLease(host)  # type: ignore[arg-type]  # the Protocol's structural fake
    assert lease.left() is None and not lease.silent()  # no cluster manager's lease
    lease.grant(3.6)  # a renewal right after the agent's contact with ZooKeeper
    assert not lease.silent()
    host.clock += 0.5
    lease.grant(3.4)  # its next check: contact 0.2 s before, renewed
    assert lease.left() == pytest.approx(3.4) and not lease.silent()
    host.clock += 1.5
    assert not lease.silent()  # 1.9 s left of 3.6: not yet half gone
    host.clock += 0.2
    assert lease.silent()  # 1.7 s left: no contact for 1.9 s
    lease.grant(lease.left() or 0.0)  # renewed, but nothing new from ZooKeeper: still silent
    assert lease.silent()
    lease.grant(3.5)  # in contact again
    assert not lease.silent()
    host.clock += 10.0
    assert lease.silent() and (lease.left() or 0.0) < 0  # run out


def test_a_renewal_taken_off_the_loop_counts_before_it_is_applied() -> None:
    host = Host()
    offers = LeaseOffers()
    lease = ManagerLease(host, offers)  # type: ignore[arg-type]
    lease.grant(3.6)
    host.clock += 2.0
    assert lease.silent()
    offers._offer = (3.6, host.clock)  # the liveness thread took a fresh renewal
    assert not lease.silent() and lease.left() == pytest.approx(3.6)
    lease.take_offered()
    assert offers.peek() is None and not lease.silent() and lease.longest == 3.6
