"""Real HA clusters of qpidd processes on loopback for end-to-end tests."""

from __future__ import annotations

import base64
import json
import shutil
import signal
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from common.polling import free_port, poll_until
from tests.broker_process import BrokerProcess

AUTH = "Basic " + base64.b64encode(b"guest:guest").decode()


def http(method: str, port: int, path: str, body: dict[str, Any] | None = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method)
    request.add_header("Authorization", AUTH)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.load(response)
    except urllib.error.HTTPError as exc:
        return {"http_status": exc.code, **json.load(exc)}


#: Starts of a cluster tried before a port taken meanwhile fails the test.
START_ATTEMPTS = 3


def _moved_arg(arg: str, moved: dict[str, str]) -> str:
    """``arg`` with each ``host:port`` of a comma-separated value replaced as ``moved`` says."""
    name, equals, value = arg.partition("=")
    if not equals:
        return arg
    return name + equals + ",".join(moved.get(part, part) for part in value.split(","))


class Cluster:
    """N brokers with ha-cluster=yes; start(), promote(i), kill(i), stop()."""

    def __init__(self, root: Path, size: int, *extra: str) -> None:
        self.ports = [free_port() for _ in range(size)]
        url = ",".join(f"127.0.0.1:{p}" for p in self.ports)
        self.brokers = [
            BrokerProcess(
                root / f"b{i}",
                port=port,
                args=[
                    "--ha-cluster=yes",
                    f"--ha-brokers-url={url}",
                    "--ha-replicate=all",
                    "--ha-username=guest",
                    "--ha-password=guest",
                    "--link-maintenance-interval=0.1",
                    "--link-heartbeat-interval=2",
                    "--ha-backup-timeout=5",
                    f"--data-dir={root / f'b{i}' / 'data'}",
                    f"--node-name=b{i}",
                    *extra,
                ],
            )
            for i, port in enumerate(self.ports)
        ]

    def start(self, timeout: float = 30.0) -> Cluster:
        """Start every broker; if one fails to start, stop those already started (callers
        stop the cluster in a ``finally`` that a failed start never reaches).

        A port from ``free_port`` can be taken by another process (another xdist worker's
        test) before qpidd binds it: then the whole cluster starts again on new ports, from
        empty directories (nothing has happened in it yet)."""
        for attempt in range(START_ATTEMPTS):
            try:
                for broker in self.brokers:
                    broker.start(timeout=timeout)
                return self
            except RuntimeError as exc:
                self.stop()
                if "address already in use" not in str(exc) or attempt == START_ATTEMPTS - 1:
                    raise
                self._move_to_new_ports()
            except BaseException:
                self.stop()
                raise
        raise AssertionError("unreachable")

    def _move_to_new_ports(self) -> None:
        """New AMQP and management ports for every broker, in every argument naming them
        (``--ha-brokers-url`` and any a test changed), and empty working directories."""
        moved = {f"127.0.0.1:{p}": f"127.0.0.1:{free_port()}" for p in self.ports}
        for broker in self.brokers:
            broker.port = int(moved[f"127.0.0.1:{broker.port}"].rpartition(":")[2])
            broker.mgmt_port = 0  # chosen again at start
            broker.proc = None
            broker.args = [_moved_arg(arg, moved) for arg in broker.args]
            shutil.rmtree(broker.workdir, ignore_errors=True)
        self.ports = [broker.port for broker in self.brokers]

    def stop(self) -> None:
        for broker in self.brokers:
            broker.stop()

    def ha(self, i: int) -> dict[str, Any]:
        return dict(http("GET", self.brokers[i].mgmt_port, "/api/ha"))

    def state(self, i: int) -> str:
        try:
            return str(self.ha(i).get("state"))
        except OSError:
            return "unreachable"

    def wait_state(self, i: int, *states: str, timeout: float = 15.0) -> None:
        poll_until(lambda: self.state(i) in states, timeout)

    def promote(
        self, i: int, epoch: int | None = None, in_sync: list[str] | None = None
    ) -> dict[str, Any]:
        """Promote broker ``i`` as a cluster manager does; ``in_sync``: the committed
        in-sync set (broker ids) it expects."""
        body: dict[str, Any] = {"cluster_manager": True}
        if epoch is not None:
            body["epoch"] = epoch
        if in_sync is not None:
            body["in_sync"] = in_sync
        return dict(http("POST", self.brokers[i].mgmt_port, "/api/ha/promote", body))

    def commit_in_sync(self, i: int, *, wait_pending: int = 1) -> dict[str, Any]:
        """The cluster manager's part when a backup is gone (no agents here): once primary
        ``i`` has ``wait_pending`` backups waiting for removal, commit its in-sync set
        without them (as ``qpid-ha in-sync --commit`` does); the primary's answer."""
        port = self.brokers[i].mgmt_port

        def pending() -> dict[str, Any] | None:
            in_sync = http("GET", port, "/api/ha")["in_sync"]
            return in_sync if len(in_sync["pending_removal"]) >= wait_pending else None

        in_sync = poll_until(pending, 15)
        body = {"cluster_manager": True, "epoch": self.ha(i)["epoch"], "members": in_sync["wanted"]}
        return dict(http("POST", port, "/api/ha/in-sync", body))

    def kill(self, i: int) -> None:
        self.brokers[i].stop(signal.SIGKILL)

    def queue_messages(self, i: int, queue: str) -> int:
        data = http("GET", self.brokers[i].mgmt_port, f"/api/queues/{queue}")
        return int(data.get("messages", -1))
