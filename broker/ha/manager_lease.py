"""The cluster manager's lease on an HA primary (the agent's: docs/agent.md, "Fencing: the
timing argument"): the renewals the liveness thread took off the loop, applied by the loop;
whether the lease holds now, a query that changes nothing (the confirm path's gate asks it as
confirms are written: ``CONFIRM_PATH`` in broker/core/queue_contracts.py); and a timer at its
end, so the role fences then (its Tick) instead of at the next housekeeping tick.

Run out, the lease still "holds" while every member of a non-empty committed in-sync set
grants the member lease (issue 26, item 2: ``MemberLeases.grants_until``; the role decides,
:meth:`~broker.ha.role.HaRole.may_confirm`): the primary serves through a ZooKeeper outage on
its members' grants, and the timer then wakes at the earliest grant's end, where a lapse
fences it.

The role machine keeps the lease itself (``HaRole.lease_until``, set by ``LeaseGranted``)
and decides the fence; this object only feeds it and asks it.

THREAD UNSAFE: the broker's event loop owns it (:class:`~broker.liveness.LeaseOffers`
is the one part a thread touches).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Protocol

from broker.ha.role import HaRole
from broker.ha.role_events import Event, LeaseGranted, PromoteError
from broker.liveness import LeaseOffers


class ManagerLeaseHost(Protocol):
    """What the lease needs of the HA broker that owns it."""

    @property
    def role(self) -> HaRole: ...

    def handle(self, event: Event) -> None:
        """Feed one event to the role and perform its actions (``PromoteError``: refused)."""
        ...

    def now(self) -> float: ...

    def grants_until(self) -> float | None:
        """Until when every member of the committed set grants (``MemberLeases``)."""
        ...

    def tick(self) -> None:
        """The broker's housekeeping tick (applies a renewal taken, then the role's Tick)."""
        ...


class ManagerLease:
    """The cluster manager's lease of one HA broker (see the module docstring)."""

    def __init__(self, host: ManagerLeaseHost, offers: LeaseOffers | None = None) -> None:
        self._host = host
        #: Renewals the liveness thread took (None: renewals come through the loop only).
        self.offers = offers
        #: The longest lease the cluster manager gave (seconds): what a renewal right after
        #: its contact with ZooKeeper gives, the measure of :meth:`silent`.
        self.longest = 0.0
        self._end: asyncio.TimerHandle | None = None

    def grant(self, seconds: float) -> None:
        """The cluster manager vouches for this primary for ``seconds`` more from now (the
        host's ``PromoteError``: not a primary)."""
        host = self._host
        host.handle(LeaseGranted(seconds, host.now()))
        self.longest = max(self.longest, seconds)
        self._arm()

    def take_offered(self) -> None:
        """Apply a renewal the liveness thread took (as received: its time, not now)."""
        offer = None if self.offers is None else self.offers.take()
        if offer is not None:
            with contextlib.suppress(PromoteError):  # refused (no longer primary): nothing
                self._host.handle(LeaseGranted(*offer))
                self.longest = max(self.longest, offer[0])
            self._arm()

    def holds(self) -> bool:
        """Does the lease hold now (not fenced, not run out)? A query that changes nothing:
        a renewal taken and not yet applied counts as the next tick will apply it, and the
        fence is the role's decision, on that tick or at the lease's end (meanwhile this
        answers False, so nothing is confirmed)."""
        role = self._host.role
        if role.fenced:
            return False
        now = self._host.now()
        offer = None if self.offers is None else self.offers.peek()
        if offer is not None and role.state.is_primary:
            seconds, received = offer  # the latest renewal wins, as LeaseGranted applies it
            if now <= received + seconds:
                return True
        elif not role.lease_expired(now):
            return True
        return role.may_confirm(now, self._host.grants_until())

    def left(self) -> float | None:
        """Seconds left of the lease now (negative: run out), a renewal taken and not
        applied yet counted as the next tick applies it; None: no cluster manager's lease."""
        role, now = self._host.role, self._host.now()
        until = role.lease_until
        offer = None if self.offers is None else self.offers.peek()
        if offer is not None and role.state.is_primary:
            seconds, received = offer
            until = received + seconds
        return None if until is None else until - now

    def silent(self) -> bool:
        """Has the cluster manager not vouched anew for this primary for half its longest
        lease? A ZooKeeper agent's lease is its session's (its last answered request plus
        0.9 of the session timeout), renewed at every check (at most half the session
        timeout apart, its session heartbeat 0.4 of it): less than half of it left means
        the agent has heard nothing from ZooKeeper for longer than it ever should while
        connected. A primary whose lapsed members are all leaving then closes its clients
        at once (:meth:`~broker.ha.member_lease.MemberLeases.close_clients_due`): it is cut
        off, and its agent cannot commit their removal. Availability only."""
        left = self.left()
        offer = None if self.offers is None else self.offers.peek()
        longest = max(self.longest, 0.0 if offer is None else offer[0])
        return left is not None and longest > 0 and left < longest / 2

    def stop(self) -> None:
        if self._end is not None:
            self._end.cancel()
            self._end = None

    @property
    def timer_armed(self) -> bool:
        """Is a timer set at the lease's end?"""
        return self._end is not None

    def _arm(self) -> None:
        """Tick when the lease ends (a stalled loop: on its first turn after). Availability
        only: the gate compares the lease with the clock as confirms are written."""
        role, host = self._host.role, self._host
        until = role.lease_until
        call_later = _call_later()
        if until is None or call_later is None or role.fenced or not role.state.is_primary:
            return
        now = host.now()
        grants = host.grants_until()
        if until <= now and role.on_grants and grants is not None:
            until = grants  # serving on grants: the first lapse fences (issue 26, item 2)
        self.stop()
        self._end = call_later(max(until - now, 0.001), self._ended)

    def _ended(self) -> None:
        self._end = None
        self._host.tick()  # applies a renewal taken meanwhile, else the role fences
        if self._end is None:
            self._arm()  # woken a hair early, or renewed: the lease's new end


def _call_later() -> Callable[[float, Callable[[], None]], asyncio.TimerHandle] | None:
    """The running loop's ``call_later``; None outside a loop (a test driving the role)."""
    try:
        return asyncio.get_running_loop().call_later
    except RuntimeError:
        return None
