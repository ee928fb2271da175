"""Real ZooKeeper servers for the agent's tests.

- A Docker engine answers (``docker.from_env(timeout=2).ping()``): a ``zookeeper:3.8``
  container through testcontainers.
- Otherwise: the Debian package ``zookeeper`` (``make unit`` installs it), started with
  ``java ... QuorumPeerMain zoo.cfg`` on loopback and free ports, in its own data directory.

``QPID_TEST_ZOOKEEPER=package`` (or ``container``) forces a backend.

Readiness is the four-letter word ``srvr`` showing ``Mode:`` (``ruok`` answers ``imok``
before the server serves). Every wait polls with a deadline; processes are stopped by PID.

:func:`expire_session` makes the server expire a client's session now (the trick of kazoo's
own tests and Curator's: a second client takes the session over and closes it), as a
partition longer than the session timeout does; :func:`session_timeout_ms` reads the
timeout the server granted a session (``cons``).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from kazoo.client import KazooClient

from common.polling import free_port, poll_until
from common.priority import coordinator_argv

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
#: netty-codec and netty-resolver are not in zookeeper.jar's manifest (Debian 3.8.0): the
#: Netty connection factory of a TLS port needs them (ClassNotFoundException:
#: io.netty.handler.codec.ByteToMessageDecoder without).
CLASSPATH = ":".join(
    [
        "/etc/zookeeper/conf",
        "/usr/share/java/zookeeper.jar",
        "/usr/share/java/slf4j-simple.jar",
        "/usr/share/java/netty-codec.jar",
        "/usr/share/java/netty-resolver.jar",
    ]
)
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
#: The test servers' JVM: HotSpot's client compiler (C1) alone and the serial collector. A
#: test ZooKeeper serves a few clients for seconds to minutes, where the server compiler's
#: and G1's start-up work never pays back. Measured, 5 starts each alternated at load 28:
#: 0.70 -> 0.52 CPU s to serving, 12.1 -> 8.7 s (medians). What it serves is the same.
JVM_FLAGS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
IMAGE = "zookeeper:3.8"
#: ZooKeeper checks session expiry once a tick: a session expires T to T + a tick after its
#: client went silent. 100 ms keeps a 1 s session's fail-over near 1 s (issue 10, item 7;
#: it was 500 ms: up to half a second more).
TICK_TIME_MS = 100
#: Sessions granted as asked from 1 to 60 s. ZooKeeper's defaults are 2 and 20 ticks (0.2 to
#: 2 s at this tick): a longer request was silently cut to the maximum (the agent now
#: refuses a grant that far from its request, ha_agent/session_grant.py).
MIN_SESSION_MS, MAX_SESSION_MS = 1000, 60000
#: An ensemble's limits, in ticks: 5 s to connect and sync to the leader, 2.5 s in sync.
INIT_LIMIT, SYNC_LIMIT = 5000 // TICK_TIME_MS, 2500 // TICK_TIME_MS


def four_letter_word(host: str, port: int, word: str, timeout: float = 1.0) -> str:
    """Send a four-letter command and return the answer ('' when nobody answers)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(word.encode("ascii"))
            sock.shutdown(socket.SHUT_WR)
            chunks = []
            while chunk := sock.recv(4096):
                chunks.append(chunk)
    except OSError:
        return ""
    return b"".join(chunks).decode("utf-8", "replace")


def expire_session(client: Any, hosts: str, timeout: float = 10.0) -> int:
    """Make ZooKeeper expire ``client``'s session at once; returns the expired session id.

    A second client joins the session (same id and password): the server moves the session
    to it and drops ``client``'s connection; closing the second client ends the session, its
    ephemeral znodes go. ``client`` then reconnects, hears the session expired (LOST) and
    starts a new one (CONNECTED), as after a partition longer than the session timeout.
    """
    session_id, password = client.client_id
    thief = KazooClient(hosts=hosts, client_id=(session_id, password))
    try:
        thief.start(timeout=timeout)
    finally:
        thief.stop()
        thief.close()
    return int(session_id)


def session_timeout_ms(host: str, port: int, session_id: int) -> int | None:
    """The session timeout (ms) the server at ``host:port`` granted ``session_id`` (from
    ``cons``: ``to=``), or None when no connection of that session is listed there."""
    sid = f"sid={session_id:#x}"
    for line in four_letter_word(host, port, "cons").splitlines():
        if sid in line:
            for part in line.split("(", 1)[-1].rstrip(")").split(","):
                if part.startswith("to="):
                    return int(part[3:])
    return None


def server_mode(host: str, port: int) -> str | None:
    """``standalone``, ``leader`` or ``follower`` when the server serves, else None."""
    for line in four_letter_word(host, port, "srvr").splitlines():
        if line.startswith("Mode:"):
            return line.split(":", 1)[1].strip()
    return None


class ZooKeeper(Protocol):
    """What tests use of a ZooKeeper server, whichever backend runs it."""

    @property
    def hosts(self) -> str: ...

    def pause(self) -> None: ...

    def resume(self) -> None: ...

    def stop(self) -> None: ...


def docker_available() -> bool:
    try:
        import docker

        docker.from_env(timeout=2).ping()
    except Exception:  # no module, no socket, no daemon: all mean "no engine"
        return False
    return True


def backend() -> str:
    """``container`` or ``package``: which kind of server this run uses."""
    forced = os.environ.get("QPID_TEST_ZOOKEEPER", "")
    if forced in ("container", "package"):
        return forced
    return "container" if docker_available() else "package"


# --- the Debian package ----------------------------------------------------------------


@dataclass
class ZooKeeperProcess:
    """One ZooKeeper server process (standalone, or one member of an ensemble)."""

    workdir: Path
    client_port: int = 0
    myid: int | None = None
    servers: list[str] = field(default_factory=list)  # "server.N=..." lines of an ensemble
    proc: subprocess.Popen[bytes] | None = None
    started_in: float = 0.0  # seconds from exec to serving
    # Elsewhere than loopback (a network namespace's host): the command's prefix
    # (``ip netns exec NS``), the address it serves on, and how to run the readiness probe
    # where that address is reachable (``lambda probe: call_in(NS, probe)``).
    command_prefix: list[str] = field(default_factory=list)
    client_address: str = "127.0.0.1"
    probe_in: Callable[[Callable[[], str | None]], str | None] | None = None
    # The sessions this server grants (ms): a test of the agent's check of the grant
    # narrows them.
    min_session_ms: int = MIN_SESSION_MS
    max_session_ms: int = MAX_SESSION_MS
    # TLS beside the plain port (ZooKeeper 3.5+ secureClientPort, Netty): the server's key
    # and certificate in one PEM file, and the CA (PEM) client certificates are checked
    # against (asked for, not required).
    tls_key_and_cert: Path | None = None
    tls_ca: Path | None = None
    secure_port: int = 0

    @property
    def secure_hosts(self) -> str:
        return f"{self.client_address}:{self.secure_port}"

    @property
    def hosts(self) -> str:
        return f"{self.client_address}:{self.client_port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def config(self) -> str:
        lines = [
            f"tickTime={TICK_TIME_MS}",
            f"minSessionTimeout={self.min_session_ms}",
            f"maxSessionTimeout={self.max_session_ms}",
            f"dataDir={self.workdir / 'data'}",
            f"clientPort={self.client_port}",
            f"clientPortAddress={self.client_address}",
            "admin.enableServer=false",
            "4lw.commands.whitelist=*",
        ]
        if self.tls_key_and_cert is not None and self.tls_ca is not None:
            lines += [
                f"secureClientPort={self.secure_port}",
                f"secureClientPortAddress={self.client_address}",
                "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
                f"ssl.keyStore.location={self.tls_key_and_cert}",
                "ssl.keyStore.type=PEM",
                f"ssl.trustStore.location={self.tls_ca}",
                "ssl.trustStore.type=PEM",
                "ssl.clientAuth=want",
            ]
        if self.servers:
            lines += [f"initLimit={INIT_LIMIT}", f"syncLimit={SYNC_LIMIT}", *self.servers]
        return "\n".join(lines) + "\n"

    def launch(self) -> ZooKeeperProcess:
        """Start the java process (does not wait)."""
        if not ZOOKEEPER_JAR.exists():
            raise RuntimeError(
                f"{ZOOKEEPER_JAR} is missing: install the Debian package zookeeper "
                "(make unit does it: apt-get install -y zookeeper)"
            )
        self.client_port = self.client_port or free_port()
        if self.tls_key_and_cert is not None:
            self.secure_port = self.secure_port or free_port()
        (self.workdir / "data").mkdir(parents=True, exist_ok=True)
        if self.myid is not None:
            (self.workdir / "data" / "myid").write_text(f"{self.myid}\n")
        cfg = self.workdir / "zoo.cfg"
        cfg.write_text(self.config())
        with open(self.workdir / "zookeeper.log", "ab") as log:
            java = (shutil.which("java") or "java") if self.command_prefix else "java"
            self.proc = subprocess.Popen(  # ahead of the brokers: common.priority
                [
                    *self.command_prefix,
                    *coordinator_argv([java, *JVM_FLAGS, "-cp", CLASSPATH, MAIN_CLASS, str(cfg)]),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        self.started_in = time.monotonic()
        return self

    def mode(self) -> str | None:
        if self.probe_in is not None:
            return self.probe_in(lambda: server_mode(self.client_address, self.client_port))
        return server_mode("127.0.0.1", self.client_port)

    def serving(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(
                f"ZooKeeper exited with {self.proc.returncode}; "
                f"log: {self.workdir / 'zookeeper.log'}\n{self.log_tail()}"
            )
        return self.mode() is not None

    def log_tail(self, lines: int = 20) -> str:
        path = self.workdir / "zookeeper.log"
        return (
            "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
            if path.exists()
            else ""
        )

    def wait_serving(self, timeout: float = 20.0) -> ZooKeeperProcess:
        launched = self.started_in
        try:
            poll_until(self.serving, timeout, f"ZooKeeper on port {self.client_port} serving")
        except AssertionError:
            self.stop()
            raise
        self.started_in = time.monotonic() - launched
        return self

    def start(self, timeout: float = 20.0) -> ZooKeeperProcess:
        return self.launch().wait_serving(timeout)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def pause(self) -> None:
        """SIGSTOP: the server hears nobody and answers nobody (a silent partition)."""
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL and reap."""
        if self.alive():
            os.kill(self.pid, signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(timeout=10)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM by PID (SIGCONT first, in case it is paused); SIGKILL if it lingers."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        os.kill(proc.pid, signal.SIGCONT)
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=timeout)


@dataclass
class ZooKeeperEnsemble:
    """Three ZooKeeper servers on loopback forming one ensemble (quorum of 2)."""

    workdir: Path
    size: int = 3
    servers: list[ZooKeeperProcess] = field(default_factory=list)
    started_in: float = 0.0

    @property
    def hosts(self) -> str:
        return ",".join(server.hosts for server in self.servers)

    def start(self, timeout: float = 30.0) -> ZooKeeperEnsemble:
        ids = range(1, self.size + 1)
        lines = [f"server.{i}=127.0.0.1:{free_port()}:{free_port()}" for i in ids]
        self.servers = [
            ZooKeeperProcess(self.workdir / f"zk{i}", myid=i, servers=lines) for i in ids
        ]
        began = time.monotonic()
        try:
            for server in self.servers:
                server.launch()
            poll_until(
                lambda: all(server.serving() for server in self.servers),
                timeout,
                "ZooKeeper ensemble serving",
                interval=0.05,
            )
        except BaseException:
            self.stop()
            raise
        self.started_in = time.monotonic() - began
        return self

    def modes(self) -> dict[int, str | None]:
        return {server.myid or 0: server.mode() for server in self.servers if server.alive()}

    def leader(self) -> ZooKeeperProcess:
        def find() -> ZooKeeperProcess | None:
            for server in self.servers:
                if server.alive() and server.mode() == "leader":
                    return server
            return None

        return poll_until(find, 10.0, "a ZooKeeper leader")

    def kill(self, server: ZooKeeperProcess) -> None:
        server.kill()

    def pause(self) -> None:
        for server in self.servers:
            server.pause()

    def resume(self) -> None:
        for server in self.servers:
            server.resume()

    def stop(self) -> None:
        for server in self.servers:
            server.stop()


# --- testcontainers ----------------------------------------------------------------------


class ZooKeeperContainer:
    """ZooKeeper in a container (used when a Docker engine answers)."""

    def __init__(self) -> None:
        from testcontainers.core.container import DockerContainer

        self.container = (
            DockerContainer(IMAGE)
            .with_env("ZOO_TICK_TIME", str(TICK_TIME_MS))
            .with_env(
                "ZOO_CFG_EXTRA",
                f"minSessionTimeout={MIN_SESSION_MS} maxSessionTimeout={MAX_SESSION_MS}",
            )
            .with_env("ZOO_4LW_COMMANDS_WHITELIST", "*")
            .with_env("ZOO_ADMINSERVER_ENABLED", "false")
            .with_exposed_ports(2181)
        )
        self.host = ""
        self.port = 0
        self.started_in = 0.0

    @property
    def hosts(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 60.0) -> ZooKeeperContainer:
        began = time.monotonic()
        self.container.start()
        try:
            self.host = self.container.get_container_host_ip()
            self.port = int(self.container.get_exposed_port(2181))
            poll_until(
                lambda: server_mode(self.host, self.port) is not None,
                timeout,
                "ZooKeeper container serving",
            )
        except BaseException:
            self.stop()
            raise
        self.started_in = time.monotonic() - began
        return self

    def pause(self) -> None:
        self.container.get_wrapped_container().pause()

    def resume(self) -> None:
        self.container.get_wrapped_container().unpause()

    def stop(self) -> None:
        self.container.stop()


def start_zookeeper(workdir: Path) -> ZooKeeperProcess | ZooKeeperContainer:
    """A standalone server of this run's backend, serving."""
    if backend() == "container":
        return ZooKeeperContainer().start()
    return ZooKeeperProcess(workdir).start()


def start_ensemble(workdir: Path) -> ZooKeeperEnsemble:
    """A 3-server ensemble of the Debian package on loopback, serving."""
    return ZooKeeperEnsemble(workdir).start()
