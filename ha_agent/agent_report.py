"""What one agent tells operators, in its log and in ZooKeeper (issues 25 and 26).

:Status: Beta

:class:`AgentReport` is the agent's voice: the reason it decides by
(``promotion_eligibility``, logged when it changes: whether its broker may be promoted, and
in a cluster without a primary which broker is needed and why), its fence brake
(:class:`~ha_agent.fence_brake.FenceBrake`: the alarm ``agent_fence_cascade`` once per
cascade), and both in its status record (:mod:`ha_agent.agent_status`), which
``qpid-ha status --all`` and the console show. Before, the brake's state was only in the
log.

THREAD UNSAFE: the agent's loop thread owns it.

Error Handling
==============

:meth:`AgentReport.publish` logs ZooKeeper errors (``zookeeper_error``,
``during=agent_status``) and writes again at the next check: nothing decides by the record.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import structlog
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

from ha_agent.agent_status import AgentStatus, BrakeStatus, StatusPublisher
from ha_agent.fence_brake import FenceBrake

__all__ = ["AgentReport"]

_log = structlog.get_logger("ha_agent.agent_report", component="agent")


class AgentReport:
    """See the module docstring. ``broker_timeout``: the agent's ``--broker-timeout``."""

    def __init__(self, node: str, broker_timeout: float) -> None:
        self.node = node
        self.broker_timeout = broker_timeout
        #: the back-off of silence fences while primaries follow each other quickly
        self.brake = FenceBrake()
        #: the reason the agent last decided by ("" before its first decision)
        self.eligibility = ""
        #: its claim's state (ha_agent.primary_claim.Leadership), set by the agent
        self.claim = ""
        #: when the brake last engaged (UTC, ISO 8601; "" when it is not engaged)
        self.engaged_since = ""
        self.publisher: StatusPublisher | None = None

    def patience(self, now: float) -> float:
        """What a silent (not gone) primary is given before its agent fences it."""
        return self.brake.patience(self.broker_timeout, now)

    def note_primary(self, epoch: int, now: float) -> None:
        """A primary epoch read in ZooKeeper: the brake counts promotions; the first time
        it engages in a cascade, the alarm (``agent_fence_cascade``)."""
        was = self.brake.engaged(now)
        if self.brake.note_primary(epoch, now) and not was and self.brake.engaged(now):
            self.engaged_since = _utc_now()
            _log.error(
                "agent_fence_cascade",
                promotions=self.brake.recent(now),
                window_s=self.brake.window,
                patience_s=self.patience(now),
                reason="primaries replaced in quick succession: a silent (not gone) primary"
                " is given longer before it is fenced",
            )

    def decided(self, eligibility: str) -> None:
        """The reason of the decision just made: logged when it changed."""
        if eligibility != self.eligibility:
            self.eligibility = eligibility
            _log.info("promotion_eligibility", reason=eligibility)

    def status(self, now: float) -> AgentStatus:
        """This agent's status record as of ``now`` (monotonic)."""
        engaged = self.brake.engaged(now)
        if not engaged:
            self.engaged_since = ""
        brake = BrakeStatus(
            engaged=engaged,
            since=self.engaged_since,
            promotions=self.brake.recent(now),
            window_s=self.brake.window,
            patience_s=self.patience(now),
            broker_timeout_s=self.broker_timeout,
        )
        return AgentStatus(self.node, self.eligibility, brake, self.claim)

    def publish(self, client: Any, cluster: str) -> None:
        """Write the status record when it changed (any ZooKeeper error: logged; not tried
        while the client is disconnected: the check goes on, the next one writes it)."""
        if not getattr(client, "connected", True):
            return
        if self.publisher is None:
            self.publisher = StatusPublisher(client, cluster, self.node)
        try:
            self.publisher.publish(self.status(time.monotonic()))
        except (KazooException, KazooTimeoutError) as exc:
            _log.warning("zookeeper_error", reason=repr(exc), during="agent_status")


def _utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
