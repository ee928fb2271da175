"""The nemesis drill's processes: ZooKeeper servers and nodes (an agent with its broker),
each in a host (network namespace) of :mod:`~qpid_ha_cli.nemesis.topology`.

:Status: Beta (the nemesis drill; root only)

- :class:`ZooKeeperServer`: the Debian package's server (``java ... QuorumPeerMain``) on
  its host's address, port 2181; one standalone, or one of a 3-server ensemble (peer ports
  2888/3888). ``minSessionTimeout``/``maxSessionTimeout`` are 1 s and 60 s, so every
  ``--session-timeout`` of the matrix is granted as asked.
- :class:`Node`: ``qpid-ha-agent`` started inside the node's host, supervising its
  ``qpidd`` (``--broker-command``). The broker serves AMQP on every address of the host
  (port 5672) and its management API on the host's loopback (port 8672), reached with
  :func:`~qpid_ha_cli.nemesis.topology.call_in`. Every broker PID seen is remembered.

Every process is started by us and signalled by PID (``kill``, ``stop``, ``cont``); the
last resort is :meth:`~qpid_ha_cli.nemesis.topology.Lan.delete`, which kills whatever still
runs in the namespaces. Logs go under the run's work directory: ``<node>/qpidd.log`` and
``<node>/agent.log`` (JSON lines), ``zk<N>/zookeeper.log``.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common.priority import coordinator_argv
from qpid_ha_cli.nemesis.topology import Host, in_namespace

__all__ = [
    "AGENT",
    "AMQP_PORT",
    "MGMT_PORT",
    "PRIMARY_STATES",
    "QPIDD",
    "ZOOKEEPER_JAR",
    "Node",
    "NodeSettings",
    "ZooKeeperServer",
]

AMQP_PORT = 5672
MGMT_PORT = 8672
ZK_PORT = 2181
PRIMARY_STATES = ("active", "recovering")
BIN = Path(sys.executable).parent
QPIDD = str(BIN / "qpidd")
AGENT = str(BIN / "qpid-ha-agent")
ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
CLASSPATH = "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar"
AUTH = "Basic " + base64.b64encode(b"guest:guest").decode()


@dataclass
class ZooKeeperServer:
    """One ZooKeeper server on ``host`` (``peers``: the ensemble's hosts, itself included)."""

    host: Host
    workdir: Path
    myid: int
    peers: list[Host] = field(default_factory=list)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"{self.host.address}:{ZK_PORT}"

    def config(self) -> str:
        lines = [
            "tickTime=100",  # expiry is checked once a tick: T to T + 0.1 s
            f"dataDir={self.workdir / 'data'}",
            f"clientPort={ZK_PORT}",
            f"clientPortAddress={self.host.address}",
            "minSessionTimeout=1000",
            "maxSessionTimeout=60000",
            "admin.enableServer=false",
            "4lw.commands.whitelist=*",
        ]
        if len(self.peers) > 1:
            lines += ["initLimit=50", "syncLimit=25"]  # 5 s and 2.5 s
            lines += [f"server.{i}={p.address}:2888:3888" for i, p in enumerate(self.peers, 1)]
        return "\n".join(lines) + "\n"

    def start(self) -> None:
        (self.workdir / "data").mkdir(parents=True, exist_ok=True)
        (self.workdir / "data" / "myid").write_text(f"{self.myid}\n")
        cfg = self.workdir / "zoo.cfg"
        cfg.write_text(self.config())
        java = shutil.which("java") or "java"
        with open(self.workdir / "zookeeper.log", "ab") as log:
            self.proc = subprocess.Popen(
                self.host.exec_argv(
                    # ahead of the brokers and clients (common.priority: a starved JVM
                    # missed syncLimit, the ensemble re-elected, an agent fenced)
                    coordinator_argv(
                        [
                            java,
                            "-Xmx256m",
                            "-cp",
                            CLASSPATH,
                            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
                            str(cfg),
                        ]
                    )
                ),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )

    def mode(self) -> str | None:
        """``standalone``, ``leader`` or ``follower`` while it serves, else None."""
        address = self.host.address

        def srvr() -> str:
            try:
                with socket.create_connection((address, ZK_PORT), timeout=0.5) as sock:
                    sock.sendall(b"srvr")
                    sock.shutdown(socket.SHUT_WR)
                    return sock.recv(4096).decode("utf-8", "replace")
            except OSError:
                return ""

        for line in self.host.call(srvr).splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            assert self.proc is not None
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, sig)

    def kill(self) -> None:
        """SIGKILL and reap."""
        self.signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(timeout=10)


@dataclass(frozen=True)
class NodeSettings:
    """What every node runs with: the two timings under test and the cluster's name."""

    cluster: str
    session_timeout: float
    link_heartbeat_interval: float
    brokers_url: str
    zk_hosts: str
    vip: str | None = None
    #: more broker options, not timings (``bench/scale_soak.py``: ``--max-connections``)
    broker_args: tuple[str, ...] = ()


class Node:
    """One agent with its supervised broker, on ``host``."""

    def __init__(self, host: Host, workdir: Path, settings: NodeSettings) -> None:
        self.host = host
        self.name = host.name
        self.dir = workdir / host.name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.settings = settings
        self.agent: subprocess.Popen[bytes] | None = None
        self.broker_pids: set[int] = set()

    @property
    def broker_log(self) -> Path:
        return self.dir / "qpidd.log"

    @property
    def agent_log(self) -> Path:
        return self.dir / "agent.log"

    def broker_command(self) -> list[str]:
        s = self.settings
        return [
            QPIDD,
            "--interface=0.0.0.0",
            f"--port={AMQP_PORT}",
            "--mgmt-interface=127.0.0.1",
            f"--mgmt-port={MGMT_PORT}",
            f"--node-name={self.name}",
            f"--data-dir={self.dir / 'data'}",
            f"--log-file={self.broker_log}",
            "--log-format=json",
            "--ha-cluster=yes",
            f"--ha-cluster-name={s.cluster}",  # the agents' --cluster, in the broker's logs
            f"--ha-brokers-url={s.brokers_url}",
            "--ha-replicate=all",
            "--ha-username=guest",
            "--ha-password=guest",
            "--loopback-users=",  # the drill's hosts log in as guest across namespaces
            # the setting under test; every other timing at its built-in default (the
            # deployed set: docs/deploy.md, "One set of settings")
            f"--link-heartbeat-interval={s.link_heartbeat_interval}",
            *s.broker_args,
        ]

    def agent_command(self) -> list[str]:
        """The agent supervising :meth:`broker_command`: the session timeout under test,
        every other timing at its built-in default."""
        s = self.settings
        argv = [
            AGENT,
            f"--zk={s.zk_hosts}",
            f"--cluster={s.cluster}",
            f"--node={self.name}",
            f"--broker=guest/guest@127.0.0.1:{MGMT_PORT}",
            f"--broker-command={shlex.join(self.broker_command())}",
            f"--broker-log={self.dir / 'qpidd.out'}",
            f"--log-file={self.agent_log}",
            "--cluster-size=3",
            f"--session-timeout={s.session_timeout}",
        ]
        if s.vip is not None:
            argv += [f"--vip={s.vip}/24", "--vip-interface=eth0"]
        return argv

    def start_agent(self) -> None:
        argv = self.agent_command()
        with open(self.dir / "agent.err", "ab") as err:
            self.agent = subprocess.Popen(  # its broker at the default priority
                self.host.exec_argv(coordinator_argv(argv)), stdout=subprocess.DEVNULL, stderr=err
            )

    def agent_alive(self) -> bool:
        return self.agent is not None and self.agent.poll() is None

    # -- the broker's management API (on the host's loopback) ----------------------------
    def get(self, path: str, timeout: float = 0.5) -> Any:
        """GET ``path`` of the broker's management API; None when it does not answer."""
        request = urllib.request.Request(
            f"http://127.0.0.1:{MGMT_PORT}{path}", headers={"Authorization": AUTH}
        )

        def fetch() -> Any:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                return json.load(answer)

        try:
            return self.host.call(fetch)
        except (OSError, ValueError):
            return None

    def status(self) -> dict[str, Any] | None:
        status = self.get("/api/status")
        if not isinstance(status, dict):
            return None
        if isinstance(status.get("pid"), int):
            self.broker_pids.add(status["pid"])
        return status

    def state(self) -> str:
        status = self.status()
        return "down" if status is None else str(status.get("ha_state"))

    def serving(self, timeout: float = 0.5) -> bool | None:
        """Does this broker serve clients, as far as its member lease says (``GET /api/ha``
        ``member_lease.serving``)? True without a member lease in the answer; None when the
        broker did not answer within ``timeout`` (not known: a loaded machine)."""
        ha = self.get("/api/ha?queues=summary", timeout)
        if not isinstance(ha, dict):
            return None
        lease = ha.get("member_lease")
        return not (isinstance(lease, dict) and lease.get("serving") is False)

    def broker_pid(self) -> int | None:
        status = self.status()
        return None if status is None else int(status["pid"])

    def in_sync_written(self, epoch: int) -> list[str] | None:
        """The in-sync set (node names) this node's agent last wrote at ``epoch``."""
        last: list[str] | None = None
        for line in self.agent_log.read_text().splitlines() if self.agent_log.exists() else []:
            if '"in_sync_changed"' not in line:
                continue
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                if event.get("in_sync_epoch") == epoch:
                    last = sorted(event["members"])
        return last

    def broker_events(self, name: str) -> list[dict[str, Any]]:
        """The broker's log events called ``name`` (every process's, oldest first)."""
        found = []
        for line in self.broker_log.read_text().splitlines() if self.broker_log.exists() else []:
            if f'"{name}"' in line:
                with contextlib.suppress(ValueError):
                    event = json.loads(line)
                    if event.get("event") == name:
                        found.append(event)
        return found

    # -- signals, by PID -----------------------------------------------------------------
    def signal_broker(self, sig: int, pid: int | None = None) -> int | None:
        """Send ``sig`` to the broker (``pid``, or the one answering now); its PID."""
        pid = pid if pid is not None else self.broker_pid()
        if pid is not None and in_namespace(pid, self.host.namespace):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        return pid

    def signal_agent(self, sig: int) -> None:
        """Send ``sig`` to the agent (``ip netns exec`` execs it: the child's PID is its)."""
        if self.agent is not None and self.agent.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.agent.pid, sig)

    def kill_agent(self) -> None:
        if self.agent is not None and self.agent.poll() is None:
            os.kill(self.agent.pid, signal.SIGKILL)
            self.agent.wait(timeout=10)

    def stop(self) -> None:
        """SIGTERM the agent (it stops its broker), then SIGKILL whatever broker is left."""
        self.status()
        if self.agent is not None and self.agent.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.agent.pid, signal.SIGCONT)
                os.kill(self.agent.pid, signal.SIGTERM)
            try:
                self.agent.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.agent.kill()
                self.agent.wait(timeout=5)
        for pid in self.broker_pids:
            if not in_namespace(pid, self.host.namespace):
                continue
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGKILL)
