"""The agent's record of its broker's answers: the watchdog's clock and a view's freshness.

:Status: Beta

:class:`BrokerWatch` is pure (no I/O, no threads, no clock; times come in as numbers on the
agent's monotonic clock). THREAD UNSAFE: the agent (:mod:`ha_agent.agent`) serialises its
calls; they come from its loop (checks, fence, watchdog), the session watcher's thread (the
session fence) and the supervisor's (the broker exited).

The rule (issue 10, item 4): a broker that was killed (watchdog, fence, any reason) or that
exited is a new broker. Its silence counts only once it has answered: a broker still
starting is not hung, and the silence of the one that was killed is not its own. Without
this, a fence that killed a broker whose last answer was long ago (the agent's loop blocked
in ZooKeeper during a partition) let the watchdog kill the restarted broker tens of
milliseconds after its start ("silent for 18.2 s").

An answer counts only if the check was sent after the last reset: an answer to a check sent
before the kill may come from the broker that was killed. The same time, :attr:`reset_at`,
makes a broker view read before it stale (:func:`ha_agent.promotion.stale_view`).

Error Handling
==============

Raises nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BrokerWatch"]


@dataclass
class BrokerWatch:
    """When the broker last answered, and when it was last killed or seen exiting."""

    #: when the last counted answer arrived (None: none since the last reset)
    answered_at: float | None = None
    #: when the broker was last killed or seen exiting (None: never)
    reset_at: float | None = None

    def answered(self, sent_at: float, at: float) -> bool:
        """A check sent at ``sent_at`` was answered at ``at``. False (not counted) when it
        was sent before the last reset: the answer may be the killed broker's."""
        if self.reset_at is not None and (sent_at < self.reset_at or at < self.reset_at):
            return False  # (a liveness answer's ``at`` is when the loop last progressed)
        if self.answered_at is None or at > self.answered_at:
            self.answered_at = at
        return True

    def reset(self, at: float) -> None:
        """The broker was killed, or exited, at ``at``: forget its answers."""
        if self.reset_at is None or at > self.reset_at:
            self.reset_at = at
        self.answered_at = None

    def silent_for(self, now: float) -> float:
        """Seconds since the last counted answer; 0 when none was counted since the last
        reset (the watchdog waits for a restarted broker's first answer)."""
        if self.answered_at is None:
            return 0.0
        return max(0.0, now - self.answered_at)
