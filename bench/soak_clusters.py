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

Which broker is the primary, each second, is read off the brokers' event loops
(:class:`LivenessReader`): each broker's ``GET /liveness`` (its liveness thread's answer:
``ha_state``, ``fenced``, ``epoch``, ``pid``), the port learnt once per broker instance
from ``GET /api/ha``. The soak first asked ``GET /api/status``, which the loop answers: at
10,000 queues and load 20-30 a primary whose loop ran 1-2 s late answered it after the
sampler's 1 s, and those seconds were counted "without a primary" (three of the 13
stretches of the 2026-11-30 run, docs/reliability.md), a measure of the sampler's
patience, not of the cluster. Whether the primary served meanwhile (its member lease in
force, its confirms flowing) is the drill's confirm gaps, reported beside it.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

from demo import NODES, LocalCluster

from qpid_ha_cli.nemesis.cluster import Cluster
from qpid_ha_cli.nemesis.processes import AMQP_PORT, MGMT_PORT, PRIMARY_STATES, Node

__all__ = [
    "AUTH",
    "UNKNOWN",
    "LivenessReader",
    "LoopbackCluster",
    "NamespaceCluster",
    "SoakCluster",
    "primary_of",
    "sample_of",
]

AUTH = "Basic " + base64.b64encode(b"guest:guest").decode()
#: every namespace node's liveness port (a namespace of its own each: one port for all;
#: learning it from ``/api/ha`` took 2.3 s at 10,000 queues and load 25)
LIVENESS_PORT = 8673
#: a sample in which no broker said it was the primary but one did not answer in time (vs.
#: a definite answer from each: not a primary, fenced, or nothing listening)
UNKNOWN = "unknown"


class SoakCluster(Protocol):
    """What the soak asks of a cluster."""

    nodes: tuple[str, ...]
    #: the clients' network namespace (None: the soak's own)
    client_namespace: str | None

    def start(self) -> object: ...
    def stop(self) -> None: ...
    def settled(self) -> bool: ...
    def primary(self) -> str | None: ...
    def sample(self) -> str | None: ...
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


def primary_of(answers: Mapping[str, Mapping[str, Any] | None]) -> str | None:
    """The node whose broker's liveness answer says it is a primary (a primary state, not
    fenced); of several (an old primary not told yet beside a new one), the newest epoch's.
    None: no answer says so. Pure."""
    said = [
        (int(answer.get("epoch") or 0), node)
        for node, answer in answers.items()
        if answer is not None
        and answer.get("ha_state") in PRIMARY_STATES
        and not answer.get("fenced")
    ]
    return max(said)[1] if said else None


def sample_of(answers: Mapping[str, Mapping[str, Any] | str | None]) -> str | None:
    """One sample of the primary from each node's answer (a mapping), None (a definite no
    answer: nothing listened) or :data:`UNKNOWN` (no answer within the timeout): the
    primary (:func:`primary_of`); else :data:`UNKNOWN` when a node did not answer in time
    (it may be a primary whose liveness thread ran late); else None. Pure."""
    said = {node: a for node, a in answers.items() if not isinstance(a, str)}
    primary = primary_of(said)
    if primary is None and any(a == UNKNOWN for a in answers.values()):
        return UNKNOWN
    return primary


def _refused(exc: OSError) -> bool:
    """Nothing listened (the broker instance whose port it was is gone)."""
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    return isinstance(reason, ConnectionRefusedError)


class LivenessReader:
    """Each node's broker's liveness answer, off its loop (see the module docstring).

    ``fetch(node, port, path, timeout)`` GETs ``path`` from ``node``'s management
    interface at ``port`` (None: the management port). THREAD UNSAFE: the soak's sampling
    thread owns it."""

    def __init__(
        self, fetch: Callable[[str, int | None, str, float], bytes], port: int | None = None
    ) -> None:
        self.fetch = fetch
        #: every broker's liveness port when the cluster gives it (``--ha-liveness-port``)
        self.port = port
        #: each node's liveness port, learnt from ``GET /api/ha`` (forgotten when refused)
        self.ports: dict[str, int] = {}

    def answer(self, node: str, timeout: float = 1.0) -> dict[str, Any] | None:
        """``node``'s ``GET /liveness`` (None: no answer within ``timeout``, or none to ask)."""
        answer = self.read(node, timeout)
        return None if isinstance(answer, str) else answer

    def read(self, node: str, timeout: float = 1.0) -> dict[str, Any] | str | None:
        """``node``'s ``GET /liveness``; None: a definite no answer (nothing listened);
        :data:`UNKNOWN`: none within ``timeout``, or one that could not be read."""
        port: int | str | None = self.ports.get(node, self.port)
        if port is None:
            port = self._learn(node, timeout)
        if port is None or isinstance(port, str):
            return port
        try:
            answer = json.loads(self.fetch(node, port, "/liveness", timeout))
        except OSError as exc:
            if _refused(exc):  # another instance now, maybe on another port
                self.ports.pop(node, None)
                return None
            return UNKNOWN
        except ValueError:
            return UNKNOWN
        return answer if isinstance(answer, dict) else UNKNOWN

    def primary(self, nodes: Iterable[str], timeout: float = 1.0) -> str | None:
        """The primary as the brokers say it off their loops (:func:`primary_of`)."""
        found = self.sample(nodes, timeout)
        return None if found == UNKNOWN else found

    def sample(self, nodes: Iterable[str], timeout: float = 1.0) -> str | None:
        """The primary, None, or :data:`UNKNOWN` (:func:`sample_of`)."""
        return sample_of({node: self.read(node, timeout) for node in nodes})

    def _learn(self, node: str, timeout: float) -> int | str | None:
        try:
            ha = json.loads(self.fetch(node, None, "/api/ha?queues=summary", timeout))
        except OSError as exc:
            return None if _refused(exc) else UNKNOWN
        except ValueError:
            return UNKNOWN
        liveness = ha.get("liveness") if isinstance(ha, dict) else None
        port = liveness.get("port") if isinstance(liveness, dict) else None
        if not isinstance(port, int) or isinstance(port, bool):
            return UNKNOWN
        self.ports[node] = port
        return port


class LoopbackCluster(LocalCluster):
    """The demo's :class:`~demo.LocalCluster` with the soak's faults but a partition."""

    nodes: tuple[str, ...] = NODES
    client_namespace: str | None = None

    def __init__(
        self, workdir: Path, session_timeout: float | None, broker_args: tuple[str, ...]
    ) -> None:
        super().__init__(workdir, session_timeout)
        self.broker_args = broker_args
        self.liveness = LivenessReader(self._fetch_at)

    def _fetch_at(self, node: str, port: int | None, path: str, timeout: float) -> bytes:
        return _fetch(
            f"http://127.0.0.1:{self.mgmt[node] if port is None else port}{path}", timeout
        )

    def primary(self) -> str | None:
        """The primary as the brokers say it off their loops (:class:`LivenessReader`)."""
        return self.liveness.primary(self.nodes)

    def sample(self) -> str | None:
        """The primary, None or :data:`UNKNOWN` (:meth:`LivenessReader.sample`)."""
        return self.liveness.sample(self.nodes)

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
        broker_args = (*broker_args, f"--ha-liveness-port={LIVENESS_PORT}")
        self.cluster = Cluster(
            workdir, session_timeout, link_heartbeat_interval, 3, broker_args=broker_args
        )
        self.client_namespace: str | None = None
        self.liveness = LivenessReader(self._fetch_at, LIVENESS_PORT)

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
        """A primary and two ready backups, both in the in-sync set its agent wrote at its
        epoch, read off the loops (:class:`LivenessReader`). The nemesis's own check reads
        the primary's whole ``GET /api/ha`` (10,000 queue rows: 3.3 MB, 4.8 s at load 25)
        within 0.5 s: at 10,000 queues under load it never held, and the soak waited out
        its 900 s (2026-11-30, soak30)."""
        answers = {node: self.liveness.answer(node) for node in self.nodes}
        states = sorted(str(a.get("ha_state")) if a else "down" for a in answers.values())
        primary = primary_of(answers)
        if states != ["active", "ready", "ready"] or primary is None:
            return False
        answer = answers[primary]
        epoch = answer.get("epoch") if answer else None
        if not isinstance(epoch, int):
            return False
        backups = sorted(n for n in self.nodes if n != primary)
        try:
            return self._node(primary).in_sync_written(epoch) == backups
        except (OSError, ValueError):
            return False

    def primary(self) -> str | None:
        """The primary as the brokers say it off their loops (:class:`LivenessReader`),
        each given 1 s (the nemesis's own state read asks ``/api/status`` with 0.5 s,
        which at load 20-70 left many seconds with no answer from anyone)."""
        return self.liveness.primary(self.nodes)

    def sample(self) -> str | None:
        """The primary, None or :data:`UNKNOWN` (:meth:`LivenessReader.sample`)."""
        return self.liveness.sample(self.nodes)

    def _fetch_at(self, node: str, port: int | None, path: str, timeout: float) -> bytes:
        host = self._node(node).host
        url = f"http://127.0.0.1:{MGMT_PORT if port is None else port}{path}"
        return bytes(host.call(lambda: _fetch(url, timeout)))

    def address(self, node: str) -> tuple[str, int]:
        return self._node(node).host.address, AMQP_PORT

    def get(self, node: str, path: str, timeout: float = 5.0) -> bytes:
        host = self._node(node).host
        return bytes(host.call(lambda: _fetch(f"http://127.0.0.1:{MGMT_PORT}{path}", timeout)))

    def broker_pid(self, node: str) -> int | None:
        """Its broker's pid, from its liveness answer (off its loop), else its status."""
        answer = self.liveness.answer(node)
        pid = None if answer is None else answer.get("pid")
        if isinstance(pid, int) and not isinstance(pid, bool):
            self._node(node).broker_pids.add(pid)  # stopped by PID at the end
            return pid
        try:
            pid = self._node(node).broker_pid()
        except (OSError, ValueError, KeyError):
            return None
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
