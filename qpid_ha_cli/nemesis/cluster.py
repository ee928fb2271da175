"""The nemesis drill's cluster: three nodes, ZooKeeper (one server, or three for
``zk-loss``, ``zk-server``, ``zk-ensemble``) and a client host, each in a namespace of its
own on one bridge.

:Status: Beta (the nemesis drill; root only)

Addresses (``10.78.0.0/24``): nodes ``n1``-``n3`` at ``.1``-``.3``, the client host ``c``
at ``.200``, ZooKeeper servers ``zk1``-``zk3`` at ``.251``-``.253``, the virtual IP at
``.100`` (held by the primary's node, set by its agent).

:meth:`Cluster.start` builds it all and waits for a settled cluster;
:meth:`Cluster.stop` stops every process by PID (agents, brokers, ZooKeeper), then
:meth:`~qpid_ha_cli.nemesis.topology.Lan.delete` kills anything left in the namespaces and
deletes them. ``stop`` never raises and may be called twice (the run calls it on success,
on errors and on Ctrl-C).

Settled means: one broker ``active``, the two others ``ready``, and the in-sync set the
primary's agent last wrote at the primary's epoch (its ``in_sync_changed`` log event) is
exactly those two backups: only then may either be promoted, so only then does a nemesis
start.
"""

from __future__ import annotations

import contextlib
import signal
from pathlib import Path

from common.polling import poll_until
from qpid_ha_cli.nemesis.processes import (
    AMQP_PORT,
    PRIMARY_STATES,
    Node,
    NodeSettings,
    ZooKeeperServer,
)
from qpid_ha_cli.nemesis.topology import Host, Lan

__all__ = ["VIP", "Cluster"]

VIP = "10.78.0.100"
CLUSTER = "nemesis"


class Cluster:
    """ZooKeeper, three nodes and a client host, in namespaces on one bridge."""

    def __init__(
        self,
        workdir: Path,
        session_timeout: float,
        link_heartbeat_interval: float,
        zk_servers: int = 1,
        broker_args: tuple[str, ...] = (),
    ) -> None:
        self.workdir = workdir
        self.session_timeout = session_timeout
        self.link_heartbeat_interval = link_heartbeat_interval
        self.zk_count = zk_servers
        self.broker_args = broker_args
        self.lan = Lan()
        self.zookeepers: list[ZooKeeperServer] = []
        self.nodes: list[Node] = []
        self.client: Host | None = None
        self.stopped = False

    @property
    def url(self) -> str:
        """The brokers' fail-over URL list, as clients use it."""
        return ",".join(f"{n.host.address}:{AMQP_PORT}" for n in self.nodes)

    @property
    def zk_addresses(self) -> list[str]:
        return [z.host.address for z in self.zookeepers]

    def start(self, timeout: float = 90.0) -> Cluster:
        lan = self.lan.start()
        zk_hosts = [lan.add_host(f"zk{i}", 250 + i) for i in range(1, self.zk_count + 1)]
        node_hosts = [lan.add_host(f"n{i}", i) for i in (1, 2, 3)]
        self.client = lan.add_host("c", 200)
        self.zookeepers = [
            ZooKeeperServer(h, self.workdir / h.name, i, zk_hosts)
            for i, h in enumerate(zk_hosts, 1)
        ]
        for server in self.zookeepers:
            server.start()
        poll_until(
            lambda: all(z.mode() for z in self.zookeepers), 60, "ZooKeeper serving", interval=0.1
        )
        settings = NodeSettings(
            cluster=CLUSTER,
            session_timeout=self.session_timeout,
            link_heartbeat_interval=self.link_heartbeat_interval,
            brokers_url=",".join(f"{h.address}:{AMQP_PORT}" for h in node_hosts),
            zk_hosts=",".join(z.address for z in self.zookeepers),
            vip=VIP,
            broker_args=self.broker_args,
        )
        self.nodes = [Node(h, self.workdir, settings) for h in node_hosts]
        for node in self.nodes:
            node.start_agent()
        self.wait_settled(timeout)
        return self

    # -- what the cluster looks like -----------------------------------------------------
    def states(self) -> dict[str, str]:
        return {n.name: n.state() for n in self.nodes}

    def primaries(self) -> list[Node]:
        return [n for n in self.nodes if n.state() in PRIMARY_STATES]

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    def settled(self) -> Node | None:
        """The primary when the cluster is settled (see the module's docstring), else None."""
        states = self.states()
        if sorted(states.values()) != ["active", "ready", "ready"]:
            return None
        primary = next(n for n in self.nodes if states[n.name] == "active")
        ha = primary.get("/api/ha?queues=summary")
        if not isinstance(ha, dict):
            return None
        backups = sorted(n.name for n in self.nodes if n is not primary)
        return primary if primary.in_sync_written(int(ha["epoch"])) == backups else None

    def wait_settled(self, timeout: float) -> Node:
        primary: Node = poll_until(
            self.settled, timeout, lambda: f"a settled cluster; states {self.states()}"
        )
        return primary

    def wait_new_primary(self, old: Node, timeout: float) -> Node:
        """Poll until a node other than ``old`` serves as primary; that node."""

        def other() -> Node | None:
            return next((n for n in self.primaries() if n is not old), None)

        found: Node = poll_until(other, timeout, f"a primary other than {old.name}", interval=0.05)
        return found

    def watch_primaries(self) -> tuple[list[str], list[str]]:
        """The nodes whose brokers serve as primary right now (a live sample): in a primary
        state, and, when two or more are, not stopped by a lapsed member lease (a cut-off old
        primary stays ``active`` until its agent fences it, but serves nobody). Second, the
        nodes in a primary state whose lease could not be read (asked again with a longer
        deadline first): they are in neither list's count of serving, and the caller says
        how many samples were not known rather than count them either way."""
        primaries = self.primaries()
        if len(primaries) < 2:
            return sorted(n.name for n in primaries), []
        serving, unknown = [], []
        for node in primaries:
            answer = node.serving()
            if answer is None:
                answer = node.serving(timeout=2.0)
            if answer is None:
                unknown.append(node.name)
            elif answer:
                serving.append(node.name)
        return sorted(serving), sorted(unknown)

    # -- the end -------------------------------------------------------------------------
    def stop(self) -> None:
        """Every process by PID, then the namespaces; never raises, again is harmless."""
        if self.stopped:
            return
        self.stopped = True
        for host in self.lan.hosts.values():
            with contextlib.suppress(Exception):
                host.unblock()  # a cut-off agent stops quicker with ZooKeeper back
        for server in self.zookeepers:
            server.signal(signal.SIGCONT)  # a paused server must stop too
        for node in self.nodes:
            with contextlib.suppress(Exception):
                node.stop()
        for server in self.zookeepers:
            with contextlib.suppress(Exception):
                server.kill()
        self.lan.delete()
