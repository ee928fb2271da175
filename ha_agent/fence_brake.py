"""The fence brake: successive primaries replaced in quick succession are a cascade, not a
string of dead brokers (issue 25).

:Status: Beta

A busy cluster (1,004 queues, load 14-18 on 2 cores) saw its agents fence six freshly
promoted primaries in a row, each for "did not answer" within ``--broker-timeout``: every
new primary was as busy as the last, and each fence made the next one busier. Liveness
answered off the loop (:mod:`broker.liveness`) removes the cause; this brake makes sure
whatever cause remains cannot cascade.

:class:`FenceBrake` is pure (times come in as numbers): the agent tells it each primary
epoch it reads in ZooKeeper (:meth:`FenceBrake.note_primary`) and asks it how long a silent
primary may stay silent before the agent fences it (:meth:`FenceBrake.patience`). While
more than :attr:`FenceBrake.limit` promotions happened within :attr:`FenceBrake.window`
seconds, the patience doubles for each one beyond, up to ``max_factor`` times the
``--broker-timeout``: back-off. :meth:`FenceBrake.engaged` says so (the agent logs
``agent_fence_cascade``, an alarm, once per cascade, and the reason it decides by names
it).

It applies only to the fence of a broker that is silent but not gone (its checks time out,
or its loop stopped making progress). A broker that is gone (refused, exited), another
primary named in ZooKeeper, a lost session: these fence at once, as before. Availability
only: the primary's lease and the ZooKeeper session still decide who may serve.

Error Handling
==============

Raises nothing.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

__all__ = ["FenceBrake"]


@dataclass
class FenceBrake:
    """See the module docstring."""

    #: seconds over which promotions are counted
    window: float = 60.0
    #: promotions within the window before the brake engages (the first primary and one
    #: fail-over are normal)
    limit: int = 2
    #: the longest patience, in multiples of ``--broker-timeout``
    max_factor: float = 8.0
    #: (epoch, when first seen) of the recent promotions
    seen: deque[tuple[int, float]] = field(default_factory=deque)
    _last_epoch: int = 0

    def note_primary(self, epoch: int, now: float) -> bool:
        """A primary record at ``epoch`` was read at ``now``; True when it is a promotion
        not seen before."""
        if epoch <= self._last_epoch:
            return False
        self._last_epoch = epoch
        self.seen.append((epoch, now))
        self._forget(now)
        return True

    def _forget(self, now: float) -> None:
        while self.seen and now - self.seen[0][1] > self.window:
            self.seen.popleft()

    def recent(self, now: float) -> int:
        """Promotions seen within the window."""
        self._forget(now)
        return len(self.seen)

    def engaged(self, now: float) -> bool:
        return self.recent(now) > self.limit

    def patience(self, broker_timeout: float, now: float) -> float:
        """How long a silent (not gone) primary may stay silent before its agent fences
        it: ``broker_timeout``, doubled for each promotion beyond :attr:`limit` within
        :attr:`window`, at most ``max_factor`` times it. 0 stays 0 (fence at once)."""
        beyond = self.recent(now) - self.limit
        if beyond <= 0 or broker_timeout <= 0:
            return broker_timeout
        return float(min(broker_timeout * 2.0**beyond, broker_timeout * self.max_factor))
