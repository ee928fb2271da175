"""The fail-over's quiet: housekeeping over every queue waits while a broker is promoted.

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

What waits is bookkeeping only (rates and histories, expiry a moment late, a resource
sample); nothing a confirm or a delivery rests on. Sans-I/O: the caller gives the time.

THREAD UNSAFE: the broker's event loop.
"""

from __future__ import annotations

__all__ = ["AFTER", "LONGEST", "PromotionQuiet"]

#: Seconds the quiet lasts after a promotion ends: the clients' redial and first confirms.
AFTER = 1.0
#: Longest quiet from a promotion's start, however long the promotion takes.
LONGEST = 5.0


class PromotionQuiet:
    """See the module docstring."""

    def __init__(self) -> None:
        self._began: float | None = None
        self._until = float("-inf")

    def began(self, now: float) -> None:
        """A promotion starts."""
        self._began = now
        self._until = now + LONGEST

    def ended(self, now: float) -> None:
        """The promotion ended (promoted, refused or failed)."""
        began = self._began if self._began is not None else now
        self._began = None
        self._until = min(now + AFTER, began + LONGEST)

    def holds(self, now: float) -> bool:
        """Does housekeeping over every queue wait now?"""
        return now < self._until
