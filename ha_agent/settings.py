"""The agent's settings: what ``qpid-ha-agent`` was started with.

:Status: Beta

:class:`AgentSettings` holds the command line's values (:mod:`ha_agent.main`) for one
:class:`~ha_agent.agent.Agent`; :meth:`AgentSettings.check` is pure and runs before anything
starts. The agent reads the settings and never changes them.

Error Handling
==============

- :meth:`AgentSettings.check` raises ValueError naming the first bad value (the command
  line turns it into exit 2; :class:`~ha_agent.agent.Agent` checks again when made).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ha_agent.zk_auth import ZkAuth
from ha_agent.zk_layout import check_name
from ha_agent.zk_tls import ZkTls

__all__ = ["AgentSettings"]


@dataclass
class AgentSettings:
    zk_hosts: str
    cluster: str
    node: str
    broker: str  # management address of the local broker, [user/password@]host:port
    broker_command: str | None = None
    broker_log: str | None = None  # where a supervised broker's stdout/stderr go
    session_timeout: float = 4.0
    check_interval: float = 0.5
    cluster_size: int = 1
    vip: str | None = None
    vip_interface: str | None = None
    vip_netns: str | None = None  # run the ip commands in this namespace (tests)
    watchdog_timeout: float = 10.0
    #: how long a primary's broker may leave checks unanswered (timed out) before the agent
    #: fences it; a refused check fences at once (ha_agent.promotion.slow_not_gone)
    broker_timeout: float = 2.0
    #: ZooKeeper digest credentials (--zk-auth): the agent's znodes are theirs alone.
    zk_auth: ZkAuth | None = None
    #: TLS to ZooKeeper (--zk-ssl, --zk-ssl-ca-file ...): None, plain TCP.
    zk_tls: ZkTls | None = None
    #: --designated-primary: run the broker as primary without ZooKeeper (ha_agent.designated)
    designated_primary: bool = False
    #: --peer: the other brokers' management addresses, checked before a designation
    peers: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    def check(self) -> None:
        """ValueError naming the first bad value."""
        check_name("cluster", self.cluster)
        check_name("node", self.node)
        if not self.zk_hosts.strip():
            raise ValueError("--zk: no ZooKeeper address given")
        if not 1 <= self.session_timeout <= 60:
            raise ValueError(f"--session-timeout must be 1 to 60 s: {self.session_timeout!r}")
        if not 0 < self.check_interval <= self.session_timeout / 2:
            raise ValueError(
                f"--check-interval must be positive and at most half the session timeout: "
                f"{self.check_interval!r}"
            )
        if self.cluster_size < 1:
            raise ValueError(f"--cluster-size must be at least 1: {self.cluster_size!r}")
        if not 0 <= self.broker_timeout <= 60:
            raise ValueError(f"--broker-timeout must be 0 to 60 s: {self.broker_timeout!r}")
        if self.watchdog_timeout < 0:
            raise ValueError(f"--watchdog-timeout must be 0 (off) or more: {self.watchdog_timeout}")
        if (self.vip is None) != (self.vip_interface is None):
            raise ValueError("--vip and --vip-interface go together")
        if self.designated_primary and not self.peers:
            raise ValueError(
                "--designated-primary needs --peer: the other broker's management address"
                " (it must not answer as primary)"
            )
        if self.peers and not self.designated_primary:
            raise ValueError("--peer goes with --designated-primary")
