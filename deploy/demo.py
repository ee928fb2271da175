"""`make demo`: a local HA cluster run by its agents; automatic fail-over; nothing lost.

1. starts a ZooKeeper ensemble of three servers (the Debian package's server, as
   ``deploy/zoo.cfg`` sets it, on loopback ports) and three ``qpid-ha-agent``s on
   loopback, each supervising its own ``qpidd --ha-cluster=yes`` (no root needed: no
   virtual IP); the agents elect one, promote its broker with epoch 1, and the other two
   brokers become ready backups by themselves; once the agents committed the in-sync set,
   the ensemble's leader is SIGKILLed: the other two elect a leader and serve, a majority,
   and the primary serves on its members' grants meanwhile: nothing changes for the cluster;
2. shows ``qpid-ha --zk ... status --all`` (the agents' view) and ``qpid-ha status --all``
   (the primary's view);
3. runs ``qpid-ha drill``: a pika publisher with confirms and a pika consumer (unmodified
   clients) on the fail-over URL list of the three brokers;
4. SIGKILLs the primary broker under the drill; its agent resigns at once, another agent
   wins and promotes its ready backup with the next epoch, the clients find it on their URL
   list, and the killed broker is restarted as a backup;
5. prints the drill's check (sent, confirmed, received, lost, duplicated), the publish
   gap and the new primary's web console (its Fail-overs tab shows this fail-over; with
   ``DEMO_HOLD``, ``make demo HOLD=1``, the cluster stays up for it until ctrl-C), stops
   everything, and runs the Spark job (``python -m analytics``) over the demo's own logs:
   the fail-over by phase, as an HTML report whose path it prints.

With ``--clusters 2`` (or 3; ``make demo CLUSTERS=2``) more clusters start on the same three
nodes and ZooKeeper after the first, one after the other, each taking its primary to a node
running none (``ha_agent.spread``); ``qpid-ha --zk ... status --all`` then lists every
cluster, and the fail-over of step 4 moves only the first cluster's primary, to the node
running fewer primaries when its two backups' nodes differ.

Every process is stopped by PID, also on errors and ctrl-C. ``LocalCluster`` and the
``Clients`` (a publisher and consumer keeping every confirm time) also serve
``bench/failover_gap.py``.
"""

from __future__ import annotations

import base64
import contextlib
import csv
import itertools
import json
import logging
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pika
import pika.exceptions
from kazoo.client import KazooClient

from common.polling import PollTimeout, free_port, poll_until
from common.priority import coordinator_argv
from ha_agent.in_sync import read_in_sync
from ha_agent.membership import read_members

BIN = Path(sys.executable).parent
ZOOKEEPER_CLASSPATH = (
    "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar"
)
NODES = ("node1", "node2", "node3")
CLUSTER = "demo"
PRIMARY = ("active", "recovering")
DRILL_SECONDS = 6
DRILL_RATE = 300


def wait(what: str, predicate: Callable[[], object], timeout: float = 120.0) -> None:
    """Poll ``predicate`` every 50 ms until it holds; exit naming ``what`` after ``timeout``
    (seconds on a quiet machine; a loaded one started the brokers in 28 s: slow is not
    dead)."""
    try:
        poll_until(predicate, timeout, what, interval=0.05)
    except PollTimeout:
        raise SystemExit(f"demo: timed out waiting for {what}") from None


def zookeeper_mode(port: int) -> str | None:
    """The server's ``Mode`` (standalone, leader, follower) while it serves, else None."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.sendall(b"srvr")
            answer = sock.recv(4096).decode("utf-8", "replace")
    except OSError:
        return None
    for line in answer.splitlines():
        if line.startswith("Mode:"):
            return line.split(":", 1)[1].strip()
    return None


def zookeeper_serving(port: int) -> bool:
    return zookeeper_mode(port) is not None


def ha_state(mgmt_port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{mgmt_port}/api/status", timeout=1) as r:
            return str(json.load(r)["ha_state"])
    except (OSError, ValueError, KeyError):
        return "down"


def qpid_ha(*args: str) -> None:
    print(f"$ qpid-ha {' '.join(args)}")
    result = subprocess.run(
        [str(BIN / "qpid-ha"), *args], capture_output=True, text=True, timeout=30
    )
    print((result.stdout + result.stderr).rstrip())
    if result.returncode != 0:
        raise SystemExit(f"demo: qpid-ha {' '.join(args)} failed ({result.returncode})")


class Clients:
    """A confirming publisher and an acking consumer on the fail-over URL list."""

    def __init__(self, ports: list[int]) -> None:
        self.params = [
            pika.ConnectionParameters("127.0.0.1", p, connection_attempts=1, socket_timeout=2)
            for p in ports
        ]
        self.sent = 0
        self.confirmed: set[int] = set()
        self.received: list[int] = []
        self.confirm_times: list[float] = []
        self.stop_publishing = threading.Event()
        self.stop_consuming = threading.Event()
        self.errors: list[str] = []

    def _connect(self) -> Any:
        while True:
            try:
                connection = pika.BlockingConnection(self.params)
                channel = connection.channel()
                channel.queue_declare("demo", durable=True)
                return connection, channel
            except pika.exceptions.AMQPError:
                time.sleep(0.02)  # between rounds of the URL list

    def publish(self, count: int) -> None:
        connection, channel = self._connect()
        channel.confirm_delivery()
        while len(self.confirmed) < count and not self.stop_publishing.is_set():
            number = self.sent
            self.sent += 1
            try:
                channel.basic_publish(
                    "", "demo", str(number).encode(), pika.BasicProperties(delivery_mode=2)
                )
            except pika.exceptions.AMQPError:
                connection, channel = self._connect()
                channel.confirm_delivery()
                continue
            self.confirmed.add(number)
            self.confirm_times.append(time.monotonic())
        if connection.is_open:
            connection.close()

    def consume(self) -> None:
        while not self.stop_consuming.is_set():
            connection, channel = self._connect()
            try:
                for method, _props, body in channel.consume("demo", inactivity_timeout=0.2):
                    if method is not None:
                        self.received.append(int(body))
                        channel.basic_ack(method.delivery_tag)
                    elif self.stop_consuming.is_set():
                        break
                connection.close()
            except pika.exceptions.AMQPError:
                continue  # the primary died: find the new one on the URL list

    def publish_gap(self) -> float:
        times = self.confirm_times
        return max((b - a for a, b in itertools.pairwise(times)), default=0.0)


#: The ensemble's servers (myid 1 to 3), as deploy/zoo.cfg's.
ZOOKEEPER_SERVERS = (1, 2, 3)


class LocalCluster:
    """A ZooKeeper ensemble of three servers and three agents supervising their brokers,
    on loopback free ports."""

    def __init__(
        self,
        workdir: Path,
        session_timeout: float | None = None,
        *,
        cluster: str = CLUSTER,
        beside: LocalCluster | None = None,
    ) -> None:
        self.workdir = workdir
        #: the agents' --session-timeout (None: their built-in default, as deployed)
        self.session_timeout = session_timeout
        #: the agents' --cluster
        self.cluster = cluster
        #: the cluster whose ZooKeeper ensemble and nodes this one shares (None: its own)
        self.beside = beside
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.broker_pids: set[int] = set()
        #: each server's client port, and its quorum and election ports
        if beside is None:
            self.zk_ports = {i: free_port() for i in ZOOKEEPER_SERVERS}
            self.peer_ports = {i: (free_port(), free_port()) for i in ZOOKEEPER_SERVERS}
        else:
            self.zk_ports, self.peer_ports = beside.zk_ports, beside.peer_ports
        self.zk = ",".join(f"127.0.0.1:{self.zk_ports[i]}" for i in ZOOKEEPER_SERVERS)
        self.ports = {n: free_port() for n in NODES}
        self.mgmt = {n: free_port() for n in NODES}

    def zoo_cfg(self, server: int = 1) -> str:
        """ZooKeeper server ``server``'s configuration: the tick, session range and limits
        of ``deploy/zoo.cfg`` (docs/deploy.md, "One set of settings"), its ensemble of three
        on loopback ports."""
        peers = "".join(
            f"server.{i}=127.0.0.1:{q}:{e}\n" for i, (q, e) in sorted(self.peer_ports.items())
        )
        return (
            "tickTime=100\nminSessionTimeout=1000\nmaxSessionTimeout=60000\n"
            "initLimit=50\nsyncLimit=25\n"
            f"dataDir={self.workdir / f'zookeeper{server}'}\nclientPort={self.zk_ports[server]}\n"
            "clientPortAddress=127.0.0.1\nadmin.enableServer=false\n4lw.commands.whitelist=*\n"
            + peers
        )

    def broker_command(self, node: str) -> list[str]:
        """``node``'s qpidd: every timing at its built-in default (the deployed set)."""
        brokers_url = ",".join(f"127.0.0.1:{self.ports[n]}" for n in NODES)
        workdir = self.workdir
        return [
            str(BIN / "qpidd"), "--interface=127.0.0.1", f"--port={self.ports[node]}",
            "--mgmt-interface=127.0.0.1", f"--mgmt-port={self.mgmt[node]}",
            f"--node-name={node}", f"--data-dir={workdir / node}",
            f"--log-file={workdir / f'{node}.broker.log'}", "--ha-cluster=yes",
            f"--ha-brokers-url={brokers_url}", "--ha-replicate=all",
            "--ha-username=guest", "--ha-password=guest",
            f"--console-zk={self.zk}", f"--console-cluster={self.cluster}",  # the web console
            f"--console-agent-log={workdir / f'{node}.agent.log'}",
        ]  # fmt: skip

    def agent_command(self, node: str) -> list[str]:
        """``node``'s qpid-ha-agent supervising :meth:`broker_command`: every timing at its
        built-in default, unless this cluster was given a session timeout."""
        workdir = self.workdir
        session = (
            [] if self.session_timeout is None else [f"--session-timeout={self.session_timeout:g}"]
        )
        return [
            str(BIN / "qpid-ha-agent"), f"--zk={self.zk}", f"--cluster={self.cluster}",
            f"--node={node}", f"--broker=guest/guest@127.0.0.1:{self.mgmt[node]}",
            f"--broker-command={shlex.join(self.broker_command(node))}", "--cluster-size=3",
            *session, f"--log-file={workdir / f'{node}.agent.log'}",
            f"--broker-log={workdir / f'{node}.broker.out'}",
        ]  # fmt: skip

    def start(self) -> LocalCluster:
        workdir = self.workdir
        workdir.mkdir(parents=True, exist_ok=True)
        for server in ZOOKEEPER_SERVERS if self.beside is None else ():
            zk_dir = workdir / f"zookeeper{server}"
            zk_dir.mkdir()
            (zk_dir / "myid").write_text(f"{server}\n")
            (zk_dir / "zoo.cfg").write_text(self.zoo_cfg(server))
            with open(zk_dir / "zookeeper.log", "wb") as zk_log:
                self.processes[f"zookeeper{server}"] = subprocess.Popen(  # ahead of brokers
                    coordinator_argv(["java", "-Xmx128m", "-cp", ZOOKEEPER_CLASSPATH,
                     "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(zk_dir / "zoo.cfg")]),
                    stdout=zk_log, stderr=subprocess.STDOUT,
                )  # fmt: skip
        if self.beside is None:
            wait(
                "the ZooKeeper ensemble (a leader and two followers)",
                lambda: (
                    sorted(map(self.zookeeper_mode, ZOOKEEPER_SERVERS))
                    == ["follower", "follower", "leader"]
                ),
                timeout=60,
            )
        for node in NODES:
            with open(workdir / f"{node}.agent.err", "wb") as err:
                self.processes[node] = subprocess.Popen(  # its broker at the default one
                    coordinator_argv(self.agent_command(node)), stderr=err
                )
        return self

    def zookeeper_mode(self, server: int) -> str:
        return zookeeper_mode(self.zk_ports[server]) or "down"

    def kill_zookeeper_leader(self) -> int:
        """SIGKILL the ensemble's leader (a server lost); returns its id. The other two elect
        a leader and serve on, a majority; the primary serves on its members' grants while
        they do (docs/reliability.md, "Serving through a ZooKeeper outage")."""
        server = next(i for i in ZOOKEEPER_SERVERS if self.zookeeper_mode(i) == "leader")
        process = self.processes.pop(f"zookeeper{server}")
        process.kill()
        process.wait(timeout=15)
        return server

    def states(self) -> list[str]:
        return [ha_state(self.mgmt[n]) for n in NODES]

    def agents_settled(self, timeout: float = 30.0) -> None:
        """Wait until the agents' records in ZooKeeper say what the brokers do (each
        member's state as its broker's, both backups in the in-sync set): ``qpid-ha --zk``
        shows those records, which each agent publishes at its next check."""
        quiet = logging.getLogger("demo.zookeeper")  # its reconnects are not the demo's news
        quiet.addHandler(logging.NullHandler())
        quiet.propagate = False
        client = KazooClient(hosts=self.zk, timeout=4.0, logger=quiet)
        client.start(timeout=10)
        try:

            def settled() -> bool:
                members = read_members(client, self.cluster)
                states = {n: ha_state(self.mgmt[n]) for n in NODES}
                read = read_in_sync(client, self.cluster)
                in_set = 0 if read is None else len(read.record.members)
                same = all(n in members and members[n].ha_state == states[n] for n in NODES)
                return same and in_set == len(NODES) - 1

            wait("the agents' records to show the cluster", settled, timeout)
        finally:
            client.stop()
            client.close()

    def settled(self) -> bool:
        return sorted(self.states()) == ["active", "ready", "ready"]

    def primary(self) -> str | None:
        return next((n for n in NODES if ha_state(self.mgmt[n]) in PRIMARY), None)

    def broker_pid(self, node: str) -> int:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.mgmt[node]}/api/status") as r:
            pid = int(json.load(r)["pid"])
        self.broker_pids.add(pid)
        return pid

    def stop(self) -> None:
        """Every process by PID: agents (SIGTERM: they stop their brokers), leftover
        brokers (SIGKILL), ZooKeeper."""
        for node in NODES:
            with contextlib.suppress(OSError, ValueError, KeyError):
                self.broker_pid(node)
        agents = [p for name, p in self.processes.items() if not name.startswith("zookeeper")]
        for process in agents:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in agents:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for pid in self.broker_pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        servers = [p for name, p in self.processes.items() if name.startswith("zookeeper")]
        for process in servers:
            process.terminate()
        for process in servers:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def clusters_option(argv: list[str]) -> int:
    """``--clusters N`` (default 1): how many clusters the demo runs on its three nodes;
    a bad value is one line and exit 2."""
    import argparse

    parser = argparse.ArgumentParser(description="make demo: a local HA cluster and a fail-over")
    parser.add_argument(
        "--clusters",
        type=int,
        default=1,
        help="clusters on the same three nodes and ZooKeeper (default 1; 2 or 3 shows the"
        " agents spreading the primaries, docs/deploy.md)",
    )
    count: int = parser.parse_args(argv).clusters
    if not 1 <= count <= 3:
        parser.error(f"--clusters must be 1 to 3: {count}")
    return count


def start_beside(main: LocalCluster, count: int) -> list[LocalCluster]:
    """``count - 1`` more clusters on ``main``'s ZooKeeper and nodes, one after the other
    (each new cluster's agents see where the others' primaries run: ha_agent.spread)."""
    more = []
    for i in range(2, count + 1):
        name = f"{CLUSTER}-{i}"
        other = LocalCluster(main.workdir / name, cluster=name, beside=main)
        more.append(other)
        other.start()
        wait(f"cluster {name} to elect and promote a primary", other.settled)
        print(
            f"cluster {name}: the agents promoted {other.primary()}"
            " (of its equally advanced members, the one on the node running fewest primaries)"
        )
    return more


def main() -> int:
    count = clusters_option(sys.argv[1:])
    workdir = Path(tempfile.mkdtemp(prefix="qpidd-demo-"))
    print(f"logs in {workdir}")
    cluster = LocalCluster(workdir)
    more: list[LocalCluster] = []
    ok = False
    try:
        cluster.start()
        zk, ports, mgmt = cluster.zk, cluster.ports, cluster.mgmt
        print(f"a ZooKeeper ensemble of three servers serving on {zk}")
        print("started 3 agents, each supervising its broker; no primary yet")
        wait("the agents to elect and promote a primary", cluster.settled)
        primary = cluster.primary()
        assert primary is not None
        print(f"the agents elected {primary}: its broker is active, the others ready")
        cluster.agents_settled()  # the in-sync set committed: the primary may serve on it
        lost = cluster.kill_zookeeper_leader()
        print(f"SIGKILL ZooKeeper server {lost} (the leader): two of three serve, a majority")
        wait("a settled cluster", cluster.settled)
        cluster.agents_settled()
        if cluster.primary() != primary:  # a grant lapsed on a stalled machine: said, not hidden
            print(f"the primary changed while ZooKeeper elected: {primary} -> {cluster.primary()}")
            primary = cluster.primary()
            assert primary is not None
        qpid_ha("--zk", zk, "--cluster", CLUSTER, "status", "--all")
        qpid_ha("-b", f"guest/guest@127.0.0.1:{mgmt[primary]}", "status", "--all")
        if count > 1:
            more = start_beside(cluster, count)
            qpid_ha("--zk", zk, "status", "--all")  # every cluster, the primaries per node
        print(console_line(primary, mgmt, "now"))

        # The drill: a pika publisher with confirms and a consumer on the fail-over URL list.
        url = "amqp:guest/guest@" + ",".join(f"127.0.0.1:{ports[n]}" for n in reversed(NODES))
        drill_log = workdir / "drill.log"
        argv = [str(BIN / "qpid-ha"), "drill", f"--url={url}", f"--duration={DRILL_SECONDS}",
                f"--rate={DRILL_RATE}", "--queue=demo", f"--log-file={drill_log}",
                f"--cluster={CLUSTER}", "--scenario=demo-sigkill-primary-broker"]  # fmt: skip
        print(f"$ qpid-ha drill --url={url} --duration={DRILL_SECONDS} --rate={DRILL_RATE} ...")
        drill = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        try:
            wait("the drill's first confirms", lambda: queue_enqueued(mgmt[primary]) >= 300)
            pid = cluster.broker_pid(primary)
            print(f"SIGKILL {primary}'s broker (pid {pid}), the primary, under the drill")
            os.kill(pid, signal.SIGKILL)
            wait("a new primary", lambda: cluster.primary() not in (None, primary))
            new_primary = cluster.primary()
            print(f"fail-over: the agents promoted {new_primary}")
            out, _ = drill.communicate(timeout=DRILL_SECONDS + 90)
        finally:
            if drill.poll() is None:
                drill.kill()
                drill.wait()
        print(out.rstrip())
        gaps = [e for e in read_events(drill_log) if e.get("event") == "confirm_gap"]
        if gaps:
            gap = max(float(g["gap_ms"]) for g in gaps)
            print(f"publish gap (last confirm before to first after): {gap:.0f} ms")
        wait(f"{primary} to come back as a ready backup", cluster.settled)
        qpid_ha("--zk", zk, "--cluster", CLUSTER, "status", "--all")
        if more:
            qpid_ha("--zk", zk, "status", "--all")  # only the lost primary moved
        assert new_primary is not None  # settled: one active broker
        print(console_line(new_primary, mgmt, "after the fail-over"))
        ok = drill.returncode == 0
        hold(console_url(mgmt[new_primary]))
    finally:
        for other in more:
            other.stop()
        cluster.stop()
        print("stopped agents, brokers and the ZooKeeper servers")
    print(f"JSON logs of brokers, agents and the drill: {workdir}/*.log")
    if ok:
        ok = report(workdir)
    print("demo OK: automatic fail-over with nothing confirmed lost" if ok else "demo FAILED")
    return 0 if ok else 1


def console_url(mgmt_port: int) -> str:
    return f"http://127.0.0.1:{mgmt_port}/console/"


def console_line(primary: str, mgmt: dict[str, int], when: str) -> str:
    """Which broker is the primary and its web console's address (the primary's console
    shows the fail-overs it saw; a backup's says it is a backup)."""
    return (
        f"primary {when}: {primary}; its web console (user guest, password guest):"
        f" {console_url(mgmt[primary])}\n  (the cluster stops at the demo's end:"
        " make demo HOLD=1 keeps it up for the console until ctrl-C)"
    )


#: DEMO_HOLD's value for "until ctrl-C" (make demo HOLD=1 sets it).
FOREVER = "forever"


def hold_seconds(value: str | None) -> float | None:
    """``DEMO_HOLD``: seconds to keep the cluster up after the fail-over, or ``forever``
    (until ctrl-C; ``make demo HOLD=1``); None: not at all.

    :raises ValueError: neither seconds nor ``forever``.
    """
    if value is None or value.strip() in ("", "0"):
        return None
    if value.strip() == FOREVER:
        return float("inf")
    seconds = float(value)
    if seconds < 0:
        raise ValueError(value)
    return seconds or None


def hold(console: str) -> None:
    """With ``DEMO_HOLD`` (:func:`hold_seconds`), keep the cluster up so that its web
    console can be looked at: ``make demo HOLD=1`` (until ctrl-C) or ``DEMO_HOLD=600``."""
    try:
        seconds = hold_seconds(os.environ.get("DEMO_HOLD"))
    except ValueError:
        print(f"DEMO_HOLD must be seconds or {FOREVER}, not {os.environ['DEMO_HOLD']!r}")
        return
    if seconds is None:
        return
    until = "until ctrl-C" if seconds == float("inf") else f"{seconds:g} s (ctrl-C to go on)"
    # said inside the suppress: a ctrl-C right after the line is one the hold ends at (said
    # before it, a ctrl-C in between was a traceback: a make test run's SIGINT came there)
    with contextlib.suppress(KeyboardInterrupt):
        print(f"holding the cluster {until}: the primary's web console is {console}", flush=True)
        threading.Event().wait(None if seconds == float("inf") else seconds)


def read_events(path: Path) -> list[dict[str, Any]]:
    events = []
    for line in path.read_text().splitlines() if path.exists() else []:
        with contextlib.suppress(ValueError):
            events.append(json.loads(line))
    return events


def queue_enqueued(mgmt_port: int) -> int:
    request = urllib.request.Request(
        f"http://127.0.0.1:{mgmt_port}/api/queues/demo",
        headers={"Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()},
    )
    try:
        with urllib.request.urlopen(request, timeout=1) as answer:
            return int(json.load(answer).get("enqueued_total", 0))
    except (OSError, ValueError):
        return 0


def report(workdir: Path) -> bool:
    """The Spark job over the demo's own logs: every fail-over by phase, as a report."""
    out = workdir / "analytics"
    # 22 to 103 s seen on 2 cores under load (issue 31): most of it Spark's start
    print(f"$ python -m analytics {workdir} --out {out}   # Spark, local[*]: 20-100 s")
    result = subprocess.run(
        [sys.executable, "-m", "analytics", str(workdir), "--out", str(out), "--quiet"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    lines = result.stdout.rstrip().splitlines()
    print("\n".join(lines[-12:]))
    if result.returncode != 0:
        print(result.stderr.rstrip()[-2000:])
        return False
    phases = out / "tables" / "phases.csv"
    if phases.exists():
        rows = list(csv.DictReader(phases.open()))
        for epoch in sorted({r["epoch"] for r in rows}, key=int):
            parts = [f"{r['phase']} {float(r['ms']):.0f} ms" for r in rows if r["epoch"] == epoch]
            print(f"fail-over to epoch {epoch}: " + ", ".join(parts))
    print(f"fail-over report (open in a browser): {out / 'report.html'}")
    return True


if __name__ == "__main__":
    sys.exit(main())
