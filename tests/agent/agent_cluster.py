"""Real agent clusters for end-to-end tests: N ``qpid-ha-agent`` processes on one ZooKeeper,
each supervising its own ``qpidd`` (``--broker-command``), all on loopback free ports.

Every process is stopped by PID: the agents with SIGTERM (they stop their brokers), then
any broker still alive (its PID read from ``/api/status`` whenever it answered) with SIGKILL.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

from common.polling import free_port, poll_until
from ha_agent.in_sync import read_in_sync
from ha_agent.membership import read_members
from ha_agent.primary_record import read_primary
from ha_agent.promotion import PrimaryRecord
from tests.broker_process import QPIDD
from tests.netns import Host

AGENT = str(Path(sys.executable).parent / "qpid-ha-agent")


def get_json(port: int, path: str, timeout: float = 2.0) -> Any:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as answer:
        return json.load(answer)


def read_events(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    events = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError):  # a half-written last line
            events.append(json.loads(line))
    return events


class Node:
    """One agent with its supervised broker.

    With ``host`` (a network namespace of :mod:`tests.netns`), agent and broker run inside
    that namespace: the broker serves AMQP on every address there (its own and the virtual
    IP), its management API on the namespace's loopback, reached through ``host.call``.
    """

    def __init__(
        self,
        root: Path,
        name: str,
        port: int,
        mgmt_port: int,
        brokers_url: str,
        *,
        host: Host | None = None,
    ) -> None:
        self.name = name
        self.host = host
        self.dir = root / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = port
        self.mgmt_port = mgmt_port
        self.broker_command = [
            QPIDD,
            "--interface=127.0.0.1" if host is None else "--interface=0.0.0.0",
            f"--port={port}",
            "--mgmt-interface=127.0.0.1",
            f"--mgmt-port={mgmt_port}",
            f"--node-name={name}",
            f"--data-dir={self.dir / 'data'}",
            f"--log-file={self.broker_log}",
            "--log-format=json",
            "--ha-cluster=yes",
            f"--ha-brokers-url={brokers_url}",
            "--ha-replicate=all",
            "--ha-username=guest",
            "--ha-password=guest",
            "--loopback-users=",  # the test's hosts log in as guest across namespaces
            "--link-maintenance-interval=0.1",
            "--link-heartbeat-interval=2",
            "--ha-backup-timeout=5",
        ]
        self.agent: subprocess.Popen[bytes] | None = None
        self.broker_pids: set[int] = set()
        #: the brokers the test started itself (start_broker), reaped at stop
        self.brokers: list[subprocess.Popen[bytes]] = []
        #: where the programs come from (the tests' venv; tests/upgrade: a release's)
        self.bin_dir = Path(AGENT).parent
        #: environment variables added to the agent's (and so its broker's)
        self.env: dict[str, str] = {}

    @property
    def broker_log(self) -> Path:
        return self.dir / "qpidd.log"

    @property
    def agent_log(self) -> Path:
        return self.dir / "agent.log"

    def broker_argv(self, cluster: str) -> list[str]:
        """The broker's command line (its log lines name the agents' cluster:
        docs/log-schema.md)."""
        qpidd = str(self.bin_dir / "qpidd")
        return [qpidd, *self.broker_command[1:], f"--ha-cluster-name={cluster}"]

    def start_broker(self, cluster: str) -> None:
        """Start the broker alone (for an agent started without ``supervise``); its PID is
        stopped with the node's."""
        with open(self.dir / "qpidd.out", "ab") as out:
            broker = subprocess.Popen(self.broker_argv(cluster), stdout=out, stderr=out)
        self.broker_pids.add(broker.pid)
        self.brokers.append(broker)

    def start_agent(self, zk_hosts: str, cluster: str, *extra: str, supervise: bool = True) -> None:
        """Start the agent; it starts and supervises the broker unless ``supervise`` is
        False (then the test started it: :meth:`start_broker`)."""
        broker = self.broker_argv(cluster)
        supervised = [
            f"--broker-command={shlex.join(broker)}",
            f"--broker-log={self.dir / 'qpidd.out'}",
        ]
        cmd = [
            str(self.bin_dir / "qpid-ha-agent"),
            f"--zk={zk_hosts}",
            f"--cluster={cluster}",
            f"--node={self.name}",
            f"--broker=guest/guest@127.0.0.1:{self.mgmt_port}",
            *(supervised if supervise else []),
            f"--log-file={self.agent_log}",
            *extra,
        ]
        if self.host is not None:
            cmd = self.host.exec_argv(cmd)
        env = {**os.environ, **self.env} if self.env else None
        with open(self.dir / "agent.err", "ab") as err:
            self.agent = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env)

    def status(self) -> dict[str, Any] | None:
        try:
            if self.host is None:
                status = dict(get_json(self.mgmt_port, "/api/status", timeout=0.5))
            else:
                port = self.mgmt_port
                status = dict(self.host.call(lambda: get_json(port, "/api/status", timeout=0.5)))
        except (OSError, ValueError):
            return None
        if isinstance(status.get("pid"), int):
            self.broker_pids.add(status["pid"])
        return status

    def state(self) -> str:
        status = self.status()
        return "down" if status is None else str(status.get("ha_state"))

    def broker_pid(self) -> int:
        status = self.status()
        assert status is not None, f"{self.name}'s broker does not answer"
        return int(status["pid"])

    def agent_events(self) -> list[dict[str, Any]]:
        return read_events(self.agent_log)

    def in_sync_written(self) -> list[str] | None:
        """The in-sync set (node names) this node's agent last wrote; None if it never did
        (for clusters whose ZooKeeper the test process cannot reach)."""
        changes = [e for e in self.agent_events() if e["event"] == "in_sync_changed"]
        return None if not changes else sorted(changes[-1]["members"])

    def broker_events(self) -> list[dict[str, Any]]:
        return read_events(self.broker_log)

    def signal_agent(self, sig: int) -> None:
        assert self.agent is not None
        os.kill(self.agent.pid, sig)

    def stop(self) -> None:
        self.ask_to_stop()
        self.finish_stop()

    def ask_to_stop(self) -> None:
        """Note the broker's current pid, then SIGTERM the agent (SIGCONT first, in case it
        is stopped); it stops its broker. Does not wait: :meth:`finish_stop` does."""
        self.status()
        if self.agent is not None and self.agent.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.agent.pid, signal.SIGCONT)
                os.kill(self.agent.pid, signal.SIGTERM)

    def finish_stop(self) -> None:
        """Wait for the agent (SIGKILL after 15 s), then SIGKILL whatever broker it left."""
        if self.agent is not None and self.agent.poll() is None:
            try:
                self.agent.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.agent.kill()
                self.agent.wait(timeout=5)
        for pid in self.broker_pids:  # whatever the agent did not stop
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGKILL)
        for broker in self.brokers:
            with contextlib.suppress(subprocess.TimeoutExpired):
                broker.wait(timeout=5)


class AgentCluster:
    """``size`` nodes (agent + broker) in ``cluster`` on the ZooKeeper at ``zk_hosts``, named
    ``n1``, ``n2``... or ``names`` (several clusters on one set of nodes share the names)."""

    def __init__(
        self,
        root: Path,
        zk_hosts: str,
        cluster: str,
        size: int = 3,
        names: list[str] | None = None,
    ) -> None:
        self.zk_hosts = zk_hosts
        self.cluster = cluster
        names = names or [f"n{i + 1}" for i in range(size)]
        ports = [free_port() for _ in names]
        url = ",".join(f"127.0.0.1:{p}" for p in ports)
        self.nodes = [
            Node(root, name, port, free_port(), url)
            for name, port in zip(names, ports, strict=True)
        ]
        self.stopped = False
        self.zk = KazooClient(hosts=zk_hosts, timeout=4.0)
        self.zk.start(timeout=10)

    @property
    def amqp_ports(self) -> list[int]:
        return [node.port for node in self.nodes]

    def start(self, *extra: str, session_timeout: float = 2.0) -> AgentCluster:
        for node in self.nodes:
            self.start_node(node, *extra, session_timeout=session_timeout)
        return self

    def start_node(
        self, node: Node, *extra: str, session_timeout: float = 2.0, supervise: bool = True
    ) -> None:
        """Start one node's agent (and so its broker, if it ``supervise``s), as
        :meth:`start` does each."""
        node.start_agent(
            self.zk_hosts,
            self.cluster,
            f"--cluster-size={len(self.nodes)}",
            f"--session-timeout={session_timeout}",
            "--check-interval=0.1",
            *extra,
            supervise=supervise,
        )

    def stop(self) -> None:
        """Stop every process (by PID); again is harmless (a test may stop first to read
        whole logs, then the fixture stops).

        Every agent is asked first, then each is waited for: stopped one after the other,
        the cluster failed over to each next node in turn (an election, a promotion, the
        backups' catch-up: about a CPU second a stop, for nothing the test asked). A node
        whose stop raises leaves none of the others running: its error is raised after."""
        if self.stopped:
            return
        self.stopped = True
        errors: list[BaseException] = []  # one node's failure stops none of the others
        for step in [node.ask_to_stop for node in self.nodes] + [
            node.finish_stop for node in self.nodes
        ]:
            try:
                step()
            except Exception as exc:  # raised again once every node is stopped
                errors.append(exc)
        self.zk.stop()
        self.zk.close()
        if errors:
            raise errors[0]

    def states(self) -> list[str]:
        return [node.state() for node in self.nodes]

    def primaries(self) -> list[Node]:
        return [n for n in self.nodes if n.state() in ("active", "recovering")]

    def wait_settled(self, timeout: float = 30.0) -> Node:
        """One active primary, every other node a ready backup in the committed in-sync set
        (only then may a backup be promoted), every store of the set named by its id (what a
        total failure chooses by: a member is named once its agent published its record);
        returns the primary."""

        def settled() -> Node | None:
            states = sorted(self.states())
            if states != ["active"] + ["ready"] * (len(self.nodes) - 1):
                return None
            members = self.members()
            primaries = self.primaries()  # read again: it may have changed since the states
            if len(primaries) != 1:
                return None
            (primary,) = primaries
            ids = {m.broker_id for n, m in members.items() if n != primary.name}
            if len(members) != len(self.nodes) or "" in ids:
                return None
            read = read_in_sync(self.zk, self.cluster)
            if read is None or set(read.record.broker_ids) != ids:
                return None
            record = read.record
            named = bool(record.primary_store_id) and all(m.store_id for m in record.members)
            return primary if named else None

        try:  # each look is 6 HTTP requests and 3 ZooKeeper reads: 10 a second, not 50
            primary: Node = poll_until(settled, timeout, interval=0.1)
        except AssertionError:
            raise AssertionError(
                f"not settled in {timeout} s: states {self.states()}, "
                f"primary record {self.primary_record()}"
            ) from None
        return primary

    def in_sync(self) -> set[str]:
        """The broker ids of the committed in-sync set (empty when none is recorded)."""
        read = read_in_sync(self.zk, self.cluster)
        return set() if read is None else set(read.record.broker_ids)

    def primary_record(self) -> PrimaryRecord | None:
        return read_primary(self.zk, self.cluster)

    def members(self) -> dict[str, Any]:
        return read_members(self.zk, self.cluster)

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)
