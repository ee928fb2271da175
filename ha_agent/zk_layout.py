"""Where a cluster keeps its state in ZooKeeper: every znode path of the agent, in one place.

:Status: Stable (the layout is shared by every agent of a cluster and by ``qpid-ha --zk``:
    change it only with a version bump of the whole cluster)

Layout (docs: /work/shared/ARCHITECTURE.md, "ZooKeeper layout")::

    /qpid-ha/<cluster>/members/<node>   ephemeral, JSON member record (ha_agent.membership)
    /qpid-ha/<cluster>/election/        kazoo Election (Lock) contenders, taken while the
                                        in-sync set is in ZooKeeper format 1
                                        (ha_agent.primary_claim)
    /qpid-ha/<cluster>/primary          ephemeral, JSON: node, epoch, url of the primary
                                        (created by a promotion's multi-op:
                                        ha_agent.promotion_txn)
    /qpid-ha/<cluster>/epoch            the fencing epoch counter (ha_agent.epoch_counter)
    /qpid-ha/<cluster>/in-sync          persistent, JSON: the in-sync set (ha_agent.in_sync)
    /qpid-ha/<cluster>/hints/<node>     ephemeral, JSON: a backup's link to the primary is
                                        down (ha_agent.link_hint)
    /qpid-ha/<cluster>/agents/<node>    ephemeral, JSON: what the agent tells operators: its
                                        fence brake, why it waits (ha_agent.agent_status;
                                        added after 0.1.0, whose agents never read it)
    /qpid-ha/<cluster>/ended            persistent, JSON: the epochs whose primary's broker
                                        process its agent saw reaped (ha_agent.ended;
                                        added after 0.1.0, whose agents never read it)

Error Handling
==============

Cluster and node names become path elements, so they are checked here:
:func:`check_name` (and so :class:`ClusterLayout` and :meth:`ClusterLayout.member`) raises
:class:`ValueError` naming the bad value. A command line turns that into a message and
exit 2. Nothing here talks to ZooKeeper.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["ROOT", "ClusterLayout", "check_name"]

#: Parent of every cluster's znodes.
ROOT = "/qpid-ha"

# Host names, instance names and the like: no "/", no "." or ".." element, no spaces or
# control characters, nothing ZooKeeper reserves ("zookeeper" is only reserved at the root).
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def check_name(kind: str, name: str) -> str:
    """Return ``name`` if it can be a path element, else raise ValueError naming ``kind``."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(
            f"bad {kind} name {name!r}: 1 to 128 characters of letters, digits, '.', '_' "
            "and '-', starting with a letter or digit"
        )
    return name


@dataclass(frozen=True)
class ClusterLayout:
    """The znode paths of one cluster."""

    cluster: str

    def __post_init__(self) -> None:
        check_name("cluster", self.cluster)

    @property
    def root(self) -> str:
        """``/qpid-ha/<cluster>``."""
        return f"{ROOT}/{self.cluster}"

    @property
    def members(self) -> str:
        """``/qpid-ha/<cluster>/members``: the parent of the member records."""
        return f"{self.root}/members"

    def member(self, node: str) -> str:
        """``/qpid-ha/<cluster>/members/<node>``: one agent's ephemeral record."""
        return f"{self.members}/{check_name('node', node)}"

    @property
    def election(self) -> str:
        """``/qpid-ha/<cluster>/election``: the election recipe's contenders live below."""
        return f"{self.root}/election"

    @property
    def primary(self) -> str:
        """``/qpid-ha/<cluster>/primary``: the current primary's ephemeral record."""
        return f"{self.root}/primary"

    @property
    def epoch(self) -> str:
        """``/qpid-ha/<cluster>/epoch``: the fencing epoch counter."""
        return f"{self.root}/epoch"

    @property
    def in_sync(self) -> str:
        """``/qpid-ha/<cluster>/in-sync``: the committed in-sync set (persistent)."""
        return f"{self.root}/in-sync"

    @property
    def ended(self) -> str:
        """``/qpid-ha/<cluster>/ended``: the epochs whose primary's process exited."""
        return f"{self.root}/ended"

    @property
    def hints(self) -> str:
        """``/qpid-ha/<cluster>/hints``: the parent of the backups' link hints."""
        return f"{self.root}/hints"

    @property
    def agents(self) -> str:
        """``/qpid-ha/<cluster>/agents``: the parent of the agents' status records."""
        return f"{self.root}/agents"

    def agent(self, node: str) -> str:
        """``/qpid-ha/<cluster>/agents/<node>``: one agent's ephemeral status record."""
        return f"{self.agents}/{check_name('node', node)}"

    def hint(self, node: str) -> str:
        """``/qpid-ha/<cluster>/hints/<node>``: one backup's ephemeral link hint."""
        return f"{self.hints}/{check_name('node', node)}"
