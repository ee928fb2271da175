"""Broker processes for the HA benchmarks (bench/ha_compare.py, bench/catchup.py).

:class:`Brokers` starts ``qpidd`` processes on free loopback ports, each in a directory of
its own under one temporary directory, and stops every one of them by PID when its ``with``
block ends, however it ends (an error, ctrl-C, or SIGTERM turned into SystemExit by
:func:`throughput.term_to_exit`). The brokers run in sessions of their own, so a ctrl-C
at the terminal reaches only the benchmark, which then stops them in order.

An HA cluster member is the README's ``qpidd --ha-cluster=yes --ha-brokers-url=...
--ha-replicate=all --ha-username=guest --ha-password=guest``; :meth:`Broker.promote`
is what ``qpid-ha --cluster-manager promote --epoch N`` sends (POST /api/ha/promote), and
:meth:`Broker.ha` reads GET /api/ha (state, each backup's readiness).

Not a test helper: nothing here asserts; failures raise :class:`BrokerError`.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from common.polling import PollTimeout, free_port, poll_until, port_open

QPIDD = str(Path(sys.executable).with_name("qpidd"))
AUTH = "Basic " + base64.b64encode(b"guest:guest").decode()

#: Options every cluster member gets (besides ports, data dir and logging). The default
#: per-queue limit of 100 MiB would refuse a 1 GiB backlog: the benchmarks lift it.
HA_OPTIONS = (
    "--ha-cluster=yes",
    "--ha-replicate=all",
    "--ha-username=guest",
    "--ha-password=guest",
    "--link-maintenance-interval=0.1",
)


class BrokerError(Exception):
    pass


def wait_for(
    what: str, predicate: Callable[[], Any], timeout: float, interval: float = 0.05
) -> Any:
    """Poll ``predicate`` until truthy; :class:`BrokerError` naming ``what`` after ``timeout``."""
    try:
        return poll_until(predicate, timeout, what, interval=interval)
    except PollTimeout as exc:
        raise BrokerError(str(exc)) from None


def log_time(ts: str) -> float:
    """A log line's ``ts`` (ISO-8601 UTC with a trailing Z) as a Unix time."""
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


class Broker:
    """One qpidd process on loopback; ``stop()`` by PID."""

    def __init__(
        self,
        name: str,
        workdir: Path,
        args: Sequence[str],
        port: int = 0,
        env: dict[str, str] | None = None,
    ) -> None:
        self.name = name
        #: More environment for the process (e.g. PYTHONPATH: another build's tree).
        self.env = env
        self.workdir = workdir
        self.port = port or free_port()
        self.mgmt_port = free_port()
        self.args = list(args)
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0  # time.time() just before the process was spawned

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise BrokerError(f"{self.name} is not running")
        return self.proc.pid

    @property
    def log_file(self) -> Path:
        return self.workdir / "qpidd.log"

    def spawn(self) -> None:
        """Start the process and return at once (see :meth:`wait_listening`)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        cmd = [
            QPIDD,
            "--interface=127.0.0.1",
            f"--port={self.port}",
            "--mgmt-interface=127.0.0.1",
            f"--mgmt-port={self.mgmt_port}",
            f"--data-dir={self.workdir / 'data'}",
            f"--node-name={self.name}",
            f"--log-file={self.log_file}",
            "--log-format=json",
            "--log-level=info",
            "--default-queue-limit=0",
            *self.args,
        ]
        with open(self.workdir / "stderr", "ab") as stderr:
            self.started_at = time.time()
            self.proc = subprocess.Popen(
                cmd,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                start_new_session=True,
                env=None if self.env is None else {**os.environ, **self.env},
            )

    def wait_listening(self, timeout: float = 20.0) -> None:
        def up() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                err = (self.workdir / "stderr").read_text(errors="replace")[-2000:]
                raise BrokerError(f"{self.name} exited with {self.proc.returncode}: {err}")
            return port_open(self.port) and port_open(self.mgmt_port)

        wait_for(f"{self.name} to listen", up, timeout)

    def start(self, timeout: float = 20.0) -> Broker:
        self.spawn()
        self.wait_listening(timeout)
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        os.kill(proc.pid, sig)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=timeout)

    # -- management ----------------------------------------------------------------------
    def http(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.mgmt_port}{path}", data=data, method=method
        )
        request.add_header("Authorization", AUTH)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return json.load(response)
        except urllib.error.HTTPError as exc:
            raise BrokerError(f"{self.name} {method} {path}: {exc.code} {exc.read()!r}") from None

    def ha(self) -> dict[str, Any]:
        return dict(self.http("GET", "/api/ha"))

    def state(self) -> str:
        try:
            return str(self.ha().get("state"))
        except (OSError, BrokerError):
            return "unreachable"

    def promote(self, epoch: int) -> None:
        """What ``qpid-ha -b 127.0.0.1:M --cluster-manager promote --epoch N`` does."""
        self.http("POST", "/api/ha/promote", {"cluster_manager": True, "epoch": epoch})

    def wait_state(self, *states: str, timeout: float = 30.0) -> None:
        wait_for(f"{self.name} to be {'/'.join(states)}", lambda: self.state() in states, timeout)

    def ready_backups(self) -> int:
        """On a primary: how many backups /api/ha reports ready."""
        return sum(1 for b in self.ha().get("backups", []) if b.get("ready"))

    # -- process figures -----------------------------------------------------------------
    def peak_rss_bytes(self) -> int | None:
        """VmHWM: the most resident memory the process has had so far."""
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
        except (OSError, ValueError, BrokerError):
            pass
        return None

    def events(self, *names: str) -> list[dict[str, Any]]:
        """This broker's JSON log events (only those named, if any names are given)."""
        found = []
        try:
            text = self.log_file.read_text(errors="replace")
        except OSError:
            return []
        for line in text.splitlines():
            try:
                event = json.loads(line)
            except json.JSONDecodeError:  # the last line may be half written
                continue
            if not names or event.get("event") in names:
                found.append(event)
        return found


class Brokers:
    """Every broker of a benchmark: made in one temporary directory, all stopped at exit."""

    def __init__(self, prefix: str = "qpidd-bench-", keep: bool = False) -> None:
        self.root = Path(tempfile.mkdtemp(prefix=prefix))
        self.keep = keep
        self.all: list[Broker] = []
        self._count = 0

    def __enter__(self) -> Brokers:
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _exc: BaseException | None,
        _tb: TracebackType | None,
    ) -> None:
        self.stop_all()

    def stop_all(self) -> None:
        # Ignore a second ctrl-C while stopping: every broker must go.
        old = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            for broker in reversed(self.all):
                try:
                    broker.stop()
                except (OSError, subprocess.SubprocessError) as exc:
                    print(f"stopping {broker.name}: {exc}", file=sys.stderr)
            if not self.keep:
                shutil.rmtree(self.root, ignore_errors=True)
        finally:
            signal.signal(signal.SIGINT, old)

    def _new(
        self, name: str, args: Sequence[str], port: int = 0, env: dict[str, str] | None = None
    ) -> Broker:
        self._count += 1
        broker = Broker(name, self.root / f"{self._count:02d}-{name}", args, port, env)
        self.all.append(broker)
        return broker

    def replacement(self, broker: Broker, name: str) -> Broker:
        """A new broker (not started) with ``broker``'s port and options, in a fresh directory."""
        return self._new(name, broker.args, broker.port, broker.env)

    def standalone(
        self, name: str = "standalone", args: Sequence[str] = (), env: dict[str, str] | None = None
    ) -> Broker:
        return self._new(name, args, env=env).start()

    def cluster_members(self, name: str, size: int, args: Sequence[str] = ()) -> list[Broker]:
        """``size`` cluster members, not started, that list each other in ha-brokers-url
        (``args``: more qpidd options for each)."""
        ports = [free_port() for _ in range(size)]
        url = ",".join(f"127.0.0.1:{p}" for p in ports)
        return [
            self._new(f"{name}-{i}", [*HA_OPTIONS, f"--ha-brokers-url={url}", *args], port)
            for i, port in enumerate(ports)
        ]

    def cluster(
        self, name: str, backups: int, epoch: int = 1, args: Sequence[str] = ()
    ) -> list[Broker]:
        """A primary (the first) and ``backups`` ready backups."""
        members = self.cluster_members(name, backups + 1, args)
        for broker in members:
            broker.spawn()
        for broker in members:
            broker.wait_listening()
        for broker in members:
            broker.wait_state("joining")
        members[0].promote(epoch)
        members[0].wait_state("active", timeout=60)
        for broker in members[1:]:
            broker.wait_state("ready", timeout=120)
        primary = members[0]
        wait_for(
            f"{primary.name} to see {backups} ready backups",
            lambda: primary.ready_backups() >= backups,
            60,
        )
        return members
