"""The agent's part in link hints (issue 10, item 7): a backup publishes a hint when its link
to the recorded primary goes down, and the primary's agent, watching the hints, checks its
broker at once instead of at its next check.

:Status: Beta

The hint's record, its rule and its ZooKeeper node are :mod:`ha_agent.link_hint`; this is
the shell the agent's loop calls: :meth:`AgentHints.watch` once its session is up (kazoo's
thread then puts a :class:`~ha_agent.loop_events.Hinted` on the loop's queue),
:meth:`~AgentHints.hinted` when that event comes, :meth:`~AgentHints.publish` at each read
of the cluster. A hint only makes a check come sooner: what the agent then does is decided
on the broker's own answer.

Error Handling
==============

ZooKeeper errors are logged (``zookeeper_error``): watching is retried until the agent
stops, a failed read of the hints is no hint (the regular check is on time), and
:meth:`~AgentHints.publish` lets them through to the caller's ZooKeeper ``try``.
"""

from __future__ import annotations

import queue
import threading
from typing import Any

import structlog
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

from ha_agent.link_hint import HintPublisher, LinkWatch, hints_against, read_hints
from ha_agent.loop_events import Hinted, LoopEvent
from ha_agent.promotion import BrokerView, PrimaryRecord
from ha_agent.zk_layout import ClusterLayout

__all__ = ["AgentHints"]

_log = structlog.get_logger("ha_agent.agent", component="agent")


class AgentHints:
    """One agent's hints: publishes its own, watches the others' (see the module docstring)."""

    def __init__(
        self,
        client: Any,
        cluster: str,
        node: str,
        events: queue.SimpleQueue[LoopEvent],
        stop: threading.Event,
    ) -> None:
        self.client = client
        self.cluster = cluster
        self.node = node
        self.events = events
        self._stop = stop
        self.publisher = HintPublisher(client, cluster, node)
        self.link_watch = LinkWatch()

    def watch(self) -> None:
        """Watch the backups' link hints (kazoo's thread calls back: queue an event)."""
        hints = ClusterLayout(self.cluster).hints
        while not self._stop.is_set():
            try:
                self.client.ensure_path(hints)
                self.client.ChildrenWatch(hints, self._changed)
                return
            except (KazooException, KazooTimeoutError) as exc:
                _log.warning("zookeeper_error", reason=repr(exc))

    def _changed(self, children: list[str]) -> bool:
        if children:
            self.events.put(Hinted())
        return not self._stop.is_set()  # False ends the watch

    def hinted(self, promoted_epoch: int | None) -> bool:
        """A backup's hint names this agent's primary (promoted at ``promoted_epoch``):
        True (logged) to check at once."""
        if promoted_epoch is None:
            return False
        try:
            hints = read_hints(self.client, self.cluster)
        except (KazooException, KazooTimeoutError) as exc:
            _log.warning("zookeeper_error", reason=repr(exc))
            return False
        against = hints_against(hints, self.node, promoted_epoch)
        if not against:
            return False
        _log.info(
            "link_hint_received",
            backups=[h.node for h in against],
            reasons=[h.reason for h in against],
        )
        return True

    def against(self, primary: str, epoch: int) -> frozenset[str]:
        """The nodes whose hints name the primary on ``primary`` at ``epoch`` (the takeover
        rule asks, :class:`ha_agent.takeover.LapsedGrant`); none when ZooKeeper does not
        answer (the rule then waits)."""
        try:
            hints = read_hints(self.client, self.cluster)
        except (KazooException, KazooTimeoutError):
            return frozenset()
        return frozenset(h.node for h in hints_against(hints, primary, epoch))

    def publish(self, view: BrokerView | None, primary: PrimaryRecord | None) -> None:
        """Publish or withdraw this backup's hint (inside the caller's ZooKeeper try)."""
        hint = self.link_watch.observe(self.node, view, primary)
        if self.publisher.publish(hint):
            if hint is not None:
                _log.info(
                    "link_hint_published", primary=hint.primary, primary_epoch=hint.epoch,
                    reason=hint.reason,
                )  # fmt: skip
            else:
                _log.info("link_hint_withdrawn")
