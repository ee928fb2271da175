"""The two clusters ``bench/scale_soak.py`` runs on, behind one face (:class:`SoakCluster`).

- :class:`LoopbackCluster`: the demo's local cluster (``deploy/demo.py``
  :class:`~demo.LocalCluster`: three ZooKeeper servers, three agents each supervising its
  broker, every process on loopback). Every fault but a partition: on loopback every
  process shares one address, so no rule can cut one node off from the others.
- :class:`NamespaceCluster`: ``qpid-ha drill --nemesis``'s cluster
  (:class:`qpid_ha_cli.nemesis.cluster.Cluster`, root only): each node, each of the three
  ZooKeeper servers and the clients' host in a network namespace of its own on one bridge;
  a partition is its nft rules in the primary's namespace (dropping everything to and from
  the other nodes and ZooKeeper; clients still reach it), as its ``partition`` nemesis does.

Both run every timing at its built-in default but a given session timeout, and the
brokers with ``--max-connections`` raised for the scenario's connections (not a timing).
Processes are signalled by PID; :meth:`SoakCluster.stop` stops every one (the namespace
cluster deletes its namespaces too).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import subprocess
import urllib.request
from pathlib import Path
from typing import Protocol

from demo import NODES, LocalCluster

from qpid_ha_cli.nemesis.cluster import Cluster
from qpid_ha_cli.nemesis.processes import AMQP_PORT, MGMT_PORT, PRIMARY_STATES, Node

__all__ = ["AUTH", "LoopbackCluster", "NamespaceCluster", "SoakCluster"]

AUTH = "Basic " + base64.b64encode(b"guest:guest").decode()


class SoakCluster(Protocol):
    """What the soak asks of a cluster."""

    nodes: tuple[str, ...]
    #: the clients' network namespace (None: the soak's own)
    client_namespace: str | None

    def start(self) -> object: ...
    def stop(self) -> None: ...
    def settled(self) -> bool: ...
    def primary(self) -> str | None: ...
    def address(self, node: str) -> tuple[str, int]: ...
    def get(self, node: str, path: str, timeout: float = 5.0) -> bytes: ...
    def broker_pid(self, node: str) -> int | None: ...
    def signal_broker(self, node: str, sig: int, pid: int) -> None: ...
    def kill_node(self, node: str) -> int | None: ...
    def restart_agent(self, node: str) -> None: ...
    def partition(self, node: str) -> None: ...
    def heal(self, node: str) -> None: ...
    def client_argv(self, argv: list[str]) -> list[str]: ...
    def agent_log(self, node: str) -> Path: ...
    def broker_log(self, node: str) -> Path: ...


def _fetch(url: str, timeout: float) -> bytes:
    request = urllib.request.Request(url, headers={"Authorization": AUTH})
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        return bytes(answer.read())


class LoopbackCluster(LocalCluster):
    """The demo's :class:`~demo.LocalCluster` with the soak's faults but a partition."""

    nodes: tuple[str, ...] = NODES
    client_namespace: str | None = None

    def __init__(
        self, workdir: Path, session_timeout: float | None, broker_args: tuple[str, ...]
    ) -> None:
        super().__init__(workdir, session_timeout)
        self.broker_args = broker_args

    def broker_command(self, node: str) -> list[str]:
        return [*super().broker_command(node), *self.broker_args]

    def address(self, node: str) -> tuple[str, int]:
        return "127.0.0.1", self.ports[node]

    def get(self, node: str, path: str, timeout: float = 5.0) -> bytes:
        return _fetch(f"http://127.0.0.1:{self.mgmt[node]}{path}", timeout)

    def broker_pid(self, node: str) -> int | None:  # type: ignore[override]
        try:
            return super().broker_pid(node)
        except (OSError, ValueError, KeyError):
            return None

    def signal_broker(self, node: str, sig: int, pid: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)

    def kill_node(self, node: str) -> int | None:
        """SIGKILL ``node``'s agent, then its broker: the node is lost."""
        pid = self.broker_pid(node)
        agent = self.processes[node]
        agent.kill()
        agent.wait(timeout=15)
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return pid

    def restart_agent(self, node: str) -> None:
        with open(self.workdir / f"{node}.agent.err", "ab") as err:
            self.processes[node] = subprocess.Popen(self.agent_command(node), stderr=err)

    def partition(self, node: str) -> None:
        raise SystemExit(
            "scale_soak: a partition needs --netns (every loopback process shares 127.0.0.1:"
            " no rule cuts one node off)"
        )

    def heal(self, node: str) -> None:
        pass

    def client_argv(self, argv: list[str]) -> list[str]:
        return argv

    def agent_log(self, node: str) -> Path:
        return self.workdir / f"{node}.agent.log"

    def broker_log(self, node: str) -> Path:
        return self.workdir / f"{node}.broker.log"


class NamespaceCluster:
    """The nemesis drill's cluster, three ZooKeeper servers, as a :class:`SoakCluster`."""

    nodes: tuple[str, ...] = ("n1", "n2", "n3")

    def __init__(
        self,
        workdir: Path,
        session_timeout: float,
        link_heartbeat_interval: float,
        broker_args: tuple[str, ...],
    ) -> None:
        self.workdir = workdir
        self.cluster = Cluster(
            workdir, session_timeout, link_heartbeat_interval, 3, broker_args=broker_args
        )
        self.client_namespace: str | None = None

    def start(self) -> NamespaceCluster:
        try:
            self.cluster.start(timeout=180)
        except BaseException:
            self.cluster.stop()
            raise
        assert self.cluster.client is not None
        self.client_namespace = self.cluster.client.namespace
        return self

    def stop(self) -> None:
        self.cluster.stop()

    def _node(self, node: str) -> Node:
        return self.cluster.node(node)

    def settled(self) -> bool:
        try:
            return self.cluster.settled() is not None
        except (OSError, ValueError, KeyError):
            return False

    def primary(self) -> str | None:
        """The node whose broker says it is the primary, each given 1 s to answer (as the
        loopback cluster's; the nemesis's own state read gives 0.5 s, which at load 20-70
        left many seconds with no answer from anyone)."""
        for node in self.nodes:
            try:
                state = json.loads(self.get(node, "/api/status", 1.0)).get("ha_state")
            except (OSError, ValueError):
                continue
            if state in PRIMARY_STATES:
                return node
        return None

    def address(self, node: str) -> tuple[str, int]:
        return self._node(node).host.address, AMQP_PORT

    def get(self, node: str, path: str, timeout: float = 5.0) -> bytes:
        host = self._node(node).host
        return bytes(host.call(lambda: _fetch(f"http://127.0.0.1:{MGMT_PORT}{path}", timeout)))

    def broker_pid(self, node: str) -> int | None:
        pid = self._node(node).broker_pid()
        return None if pid is None else int(pid)

    def signal_broker(self, node: str, sig: int, pid: int) -> None:
        self._node(node).signal_broker(sig, pid)

    def kill_node(self, node: str) -> int | None:
        target = self._node(node)
        pid = target.broker_pid()
        target.kill_agent()
        target.signal_broker(signal.SIGKILL, pid)
        return None if pid is None else int(pid)

    def restart_agent(self, node: str) -> None:
        self._node(node).start_agent()

    def partition(self, node: str) -> None:
        """As the ``partition`` nemesis: drop everything between ``node`` and the other
        nodes and ZooKeeper (its clients still reach it)."""
        peers = [n.host.address for n in self.cluster.nodes if n.name != node]
        self._node(node).host.block(peers + self.cluster.zk_addresses)

    def heal(self, node: str) -> None:
        self._node(node).host.unblock()

    def client_argv(self, argv: list[str]) -> list[str]:
        assert self.cluster.client is not None
        return list(self.cluster.client.exec_argv(argv))

    def agent_log(self, node: str) -> Path:
        return Path(self._node(node).agent_log)

    def broker_log(self, node: str) -> Path:
        return Path(self._node(node).broker_log)
