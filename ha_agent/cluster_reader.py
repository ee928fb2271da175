"""What the agent reads of its cluster in ZooKeeper at each check, and its own member record.

:Status: Beta

:class:`ClusterReader` is the agent's part that, at each check (the agent's loop thread
only), publishes this node's member record when it changed (what its broker answered:
state, epoch, position, ids, formats), covers the broker's epoch in ZooKeeper's counter,
and reads the member records, the primary record and (unless the in-sync keeper has just
read it) the in-sync set, and, while the cluster has no primary and its broker joins, where
the other clusters' primaries run (:func:`~ha_agent.node_loads.read_node_loads`); it
deletes a primary record that names this node while its agent
no longer leads (:func:`~ha_agent.primary_record.drop_stale_primary`), and publishes or
withdraws the backup's link hint (:class:`~ha_agent.agent_hints.AgentHints`).

It keeps what it read for the agent's decisions: :attr:`~ClusterReader.members`,
:attr:`~ClusterReader.primary`, the records of a format it cannot read
(:attr:`~ClusterReader.format_faults`), and when the last read that succeeded was sent
(:attr:`~ClusterReader.read_at`; a read that fails leaves the older records, which the
decision then takes as stale after a reconnection: :func:`ha_agent.promotion.stale_cluster`).

THREAD UNSAFE: the agent's loop thread only. It calls its collaborators, never the agent.

Error Handling
==============

A ZooKeeper error (connection loss, retries exhausted) is logged (``zookeeper_error``) and
:meth:`ClusterReader.read` returns None: the records stay as last read, and the next check
tries again. A record of a format the agent cannot read is not an error here: it is noted
(:class:`~ha_agent.zk_format.FormatFaults`) and the primary record reads as none.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

import structlog
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

from common.version import REPLICATION_FORMATS
from ha_agent.agent_hints import AgentHints
from ha_agent.agent_report import AgentReport
from ha_agent.cluster_records import BrokerView, PrimaryRecord
from ha_agent.epoch_counter import cover_epoch
from ha_agent.in_sync_keeper import InSyncKeeper
from ha_agent.membership import Member, MemberPublisher, read_members
from ha_agent.node_loads import read_node_loads
from ha_agent.primary_record import drop_stale_primary, read_primary
from ha_agent.zk_format import FormatFaults, ZkFormatError

__all__ = ["ClusterReader"]

_log = structlog.get_logger("ha_agent.cluster_reader", component="agent")


class ClusterReader:
    """See the module docstring. ``address``: the broker's address as the agent knows it
    (its member record's URL while the broker does not say its own)."""

    def __init__(
        self,
        client: Any,
        cluster: str,
        node: str,
        address: str,
        keeper: InSyncKeeper,
        hints: AgentHints,
        report: AgentReport,
    ) -> None:
        self.client, self.cluster, self.node, self.address = client, cluster, node, address
        self.keeper, self.hints, self.report = keeper, hints, report
        #: this node's member record in ZooKeeper (None: not published yet)
        self.publisher: MemberPublisher | None = None
        #: the epoch ZooKeeper's counter is known to have reached (its broker's checked)
        self.epoch_floor = 0
        self.members: dict[str, Member] = {}
        self.primary: PrimaryRecord | None = None
        #: the ZooKeeper records of a format it cannot read, at the last read
        self.format_faults = FormatFaults()
        #: primaries each node runs in the other clusters on this ZooKeeper, read while
        #: this cluster has no primary and its broker joins (ha_agent.spread); else empty
        self.node_loads: dict[str, int] = {}
        #: when the last read that succeeded was sent (never: stale once connected)
        self.read_at = float("-inf")

    def member(self, view: BrokerView | None) -> Member:
        """This node's member record for what its broker answered (None: it did not)."""
        return Member(
            node=self.node,
            broker_url=(view.url if view is not None and view.url else self.address),
            ha_state="down" if view is None else view.ha_state,
            epoch=0 if view is None else view.epoch,
            store_status="unknown" if view is None else view.store_status,
            replication_position=0 if view is None else view.replication_position,
            broker_id="" if view is None else view.broker_id,
            store_id="" if view is None else view.store_id,
            # the broker's; this package's (the broker's once restarted) while it is silent
            replication_formats=(view and view.replication_formats) or REPLICATION_FORMATS.text,
        )

    def read(
        self, view: BrokerView | None, leads: bool, read_in_sync_set: bool, timeout: float
    ) -> float | None:
        """Publish, cover, read (the module docstring), given the broker's ``view`` and
        whether this agent ``leads`` (or promoted); ``timeout``: how long a publication
        waits for an older session's record to go (the first one's, and after LOST).
        When it was sent (monotonic) if every call answered, else None (logged)."""
        member = self.member(view)
        sent = time.monotonic()
        try:
            if self.publisher is None:
                publisher = MemberPublisher(self.client, self.cluster, member)
                publisher.publish(timeout=timeout)
                self.publisher = publisher
            elif self.publisher.member != member:
                changes = {k: getattr(member, k) for k in asdict(member) if k != "node"}
                self.publisher.update(wait=timeout, **changes)
            if member.epoch > self.epoch_floor:
                self.epoch_floor = cover_epoch(self.client, self.cluster, member.epoch)
            unreadable: list[ZkFormatError] = []
            self.members = read_members(self.client, self.cluster, unreadable)
            try:
                self.primary = read_primary(self.client, self.cluster)
            except ZkFormatError as exc:  # not "no primary": a record it cannot read
                self.primary = None
                unreadable.append(exc)
            self.format_faults.note(unreadable)
            if self.primary is not None:
                self.report.note_primary(self.primary.epoch, time.monotonic())
            if drop_stale_primary(self.client, self.cluster, self.node, self.primary, leads):
                self.primary = None
            joining = view is not None and view.ha_state == "joining"
            fresh = self.primary is None and joining
            self.node_loads = read_node_loads(self.client, self.cluster) if fresh else {}
            self.hints.publish(view, self.primary)
            if read_in_sync_set:
                self.keeper.read()
        except (KazooException, KazooTimeoutError) as exc:
            _log.warning("zookeeper_error", reason=repr(exc))
            return None
        self.read_at = sent
        return sent

    def withdraw(self) -> None:
        """Delete this node's member record (the agent stops); kazoo's errors propagate."""
        if self.publisher is not None:
            self.publisher.withdraw()
