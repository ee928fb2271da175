"""The fail-over's quiet: housekeeping over every queue waits while a broker is promoted,
and while a backup whose link to its primary went down links to the new one.

:Status: Beta

A promotion is the time the service is down. At 10,000 queues the once-a-second work over
every queue (the console's sampler: 40-45 ms of CPU; the broker's tick: message expiry
and the bytes held, each a walk of every queue) landed inside it and, on a loaded machine,
doubled the time from the old primary's death to the clients' first confirms on the new one
(issue 25). :class:`PromotionQuiet` says when that work waits: from the promotion's start
until :data:`AFTER` seconds after its end (the clients' return), at most :data:`LONGEST`
seconds in all, so a promotion that hangs never stops the housekeeping for good. The
sampler's work is in slices: one begun before the promotion stops between two slices
while the quiet holds (in a profile of one promotion at 10,000 queues, the slices of a
sample begun just before it were 28 % of the CPU the loop spent meanwhile).

A member of the in-sync set is on the same path: the new primary's confirms on a busy queue
wait for its stream of that queue, which it opens once it has linked to the new primary and
decoded its snapshot. Its quiet holds from its link's loss until it caught up again, at most
:data:`LONGEST` seconds (:meth:`HaBroker.handle <broker.ha.ha_broker.HaBroker.handle>`). In
a profile of a member's first seconds after a fail-over at 10,000 queues (load 30), the
console's sampler and the resource sample were most of its loop's CPU.

What waits is bookkeeping only (rates and histories, expiry a moment late, a resource
sample); nothing a confirm or a delivery rests on. Sans-I/O: the caller gives the time.

THREAD UNSAFE: the broker's event loop.
"""

from __future__ import annotations

__all__ = ["AFTER", "LONGEST", "PromotionQuiet"]

#: Seconds the quiet lasts after a promotion ends: the clients' redial and first confirms,
#: the members' links and first streams (at load 20-30 on 2 cores: seconds, issue 25).
AFTER = 3.0
#: Longest quiet from a promotion's start (or a member's link's loss), however long the
#: promotion (or the catch-up) takes.
LONGEST = 6.0


class PromotionQuiet:
    """See the module docstring."""

    def __init__(self) -> None:
        self._began: float | None = None
        self._until = float("-inf")

    def began(self, now: float) -> None:
        """A promotion starts (or a member's link to its primary went down)."""
        self._began = now
        self._until = now + LONGEST

    def ended(self, now: float) -> None:
        """The promotion ended (promoted, refused or failed), or the member caught up."""
        began = self._began if self._began is not None else now
        self._began = None
        self._until = min(now + AFTER, began + LONGEST)

    def holds(self, now: float) -> bool:
        """Does housekeeping over every queue wait now?"""
        return now < self._until
