"""`make demo`: a three-broker HA cluster on loopback, a fail-over, nothing confirmed lost.

1. starts three ``qpidd --ha-cluster=yes`` brokers on free loopback ports; all join;
2. promotes one with ``qpid-ha --cluster-manager promote`` (the ZooKeeper agent of a later
   issue does this by itself) and waits for the other two to be ready backups;
3. publishes messages with publisher confirms through pika, an unmodified client, using the
   fail-over URL list of all three brokers;
4. kills the primary with SIGKILL, promotes a ready backup, and consumes every message from
   the new primary, then prints sent, confirmed, received, lost and duplicated counts;
5. shows ``qpid-ha status --all`` before and after, and stops everything with SIGTERM.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pika

MESSAGES = 2000
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait(what: str, predicate: object, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise SystemExit(f"demo: timed out waiting for {what}")


def ha_state(mgmt_port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{mgmt_port}/api/status", timeout=2) as r:
            return str(json.load(r)["ha_state"])
    except OSError:
        return "unreachable"


def qpid_ha(mgmt_port: int, *args: str) -> str:
    cmd = [str(BIN / "qpid-ha"), "-b", f"guest/guest@127.0.0.1:{mgmt_port}", *args]
    print(f"$ qpid-ha -b 127.0.0.1:{mgmt_port} {' '.join(args)}")
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    output = (result.stdout + result.stderr).rstrip()
    print(output)
    if result.returncode != 0:
        raise SystemExit(f"demo: qpid-ha {' '.join(args)} failed ({result.returncode})")
    return output


def main() -> int:
    workdir = Path(tempfile.mkdtemp(prefix="qpidd-demo-"))
    ports = [free_port() for _ in range(3)]
    mgmt = [free_port() for _ in range(3)]
    brokers_url = ",".join(f"127.0.0.1:{p}" for p in ports)
    procs: list[subprocess.Popen[bytes] | None] = []
    print(f"starting 3 brokers, ha-brokers-url={brokers_url}, logs in {workdir}")
    for i in range(3):
        cmd = [
            str(BIN / "qpidd"),
            "--interface=127.0.0.1",
            f"--port={ports[i]}",
            "--mgmt-interface=127.0.0.1",
            f"--mgmt-port={mgmt[i]}",
            f"--node-name=node{i + 1}",
            f"--data-dir={workdir / f'node{i + 1}'}",
            f"--log-file={workdir / f'node{i + 1}.log'}",
            "--ha-cluster=yes",
            f"--ha-brokers-url={brokers_url}",
            "--ha-replicate=all",
            "--ha-username=guest",
            "--ha-password=guest",
            "--link-maintenance-interval=0.1",
            "--link-heartbeat-interval=2",
        ]
        procs.append(subprocess.Popen(cmd))
    try:
        for i in range(3):
            wait(f"node{i + 1} to start", lambda i=i: ha_state(mgmt[i]) == "joining")
        print("all three brokers are joining: no primary yet")

        qpid_ha(mgmt[0], "--cluster-manager", "promote", "--epoch", "1")
        for i in (1, 2):
            wait(f"node{i + 1} to be ready", lambda i=i: ha_state(mgmt[i]) == "ready")
        qpid_ha(mgmt[0], "status", "--all")

        params = [pika.ConnectionParameters("127.0.0.1", p) for p in reversed(ports)]
        connection = pika.BlockingConnection(params)  # skips the backups, reaches node1
        channel = connection.channel()
        channel.queue_declare("demo", durable=True)
        channel.confirm_delivery()
        confirmed: set[int] = set()
        started = time.perf_counter()
        for i in range(MESSAGES):
            channel.basic_publish(
                "",
                "demo",
                f"message {i}".encode(),
                pika.BasicProperties(message_id=str(i), delivery_mode=2),
            )
            confirmed.add(i)
        elapsed = time.perf_counter() - started
        connection.close()
        print(f"published {MESSAGES} messages, {len(confirmed)} confirmed in {elapsed:.2f} s")

        print(f"SIGKILL node1 (pid {procs[0].pid}, the primary)")  # type: ignore[union-attr]
        os.kill(procs[0].pid, signal.SIGKILL)  # type: ignore[union-attr]
        procs[0].wait()  # type: ignore[union-attr]
        procs[0] = None
        qpid_ha(mgmt[1], "--cluster-manager", "promote", "--epoch", "2")
        wait("node2 to be active", lambda: ha_state(mgmt[1]) == "active")
        wait("node3 to follow node2", lambda: ha_state(mgmt[2]) == "ready")
        qpid_ha(mgmt[1], "status", "--all")

        connection = pika.BlockingConnection(params)  # the URL list finds node2 now
        channel = connection.channel()
        received: list[int] = []
        while True:
            method, props, _body = channel.basic_get("demo", auto_ack=True)
            if method is None:
                break
            received.append(int(props.message_id))
        connection.close()
        lost = confirmed - set(received)
        duplicated = len(received) - len(set(received))
        print(
            f"sent {MESSAGES}, confirmed {len(confirmed)}, received {len(received)},"
            f" lost {len(lost)}, duplicated {duplicated}"
        )
        ok = not lost
    finally:
        codes = []
        for proc in procs:
            if proc is not None:
                proc.send_signal(signal.SIGTERM)
                codes.append(proc.wait(timeout=15))
        print(f"brokers stopped with exit codes {codes}")
    print(f"broker logs (JSON lines): {workdir}/node*.log")
    print("demo OK: fail-over with nothing confirmed lost" if ok else "demo FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
