#!/usr/bin/env python3
"""Storms of connections against one broker: its event loop's longest steps, not a test.

What the scale soak's clients do to a broker at a fail-over (issue 25, "no long stalls"):
thousands of connections come at once, to a backup that refuses them (530, "not the
primary") or to the new primary, and go at once when their broker dies. Three storms,
each ``--connections`` at once from a client process of its own (uvloop):

- ``refused``: to an HA backup with no primary (it refuses each at ``connection.open``),
  every client at once, ``--rounds`` times;
- ``opened``: to a stand-alone broker, every client at once (then held open);
- ``dropped``: the client process of ``opened`` SIGKILLed: every socket closed at once.

After each, the broker's ``GET /api/status`` ``loop``: the longest step of CPU, the long
ones (100 ms or more) with where they were, the longest collection; and the broker's CPU
for the storm (``/proc``), per connection.

    .venv/bin/python bench/connection_storm.py --connections 2000
"""

from __future__ import annotations

import argparse
import asyncio
import base64
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
from typing import Any

#: The broker's code (``$STORM_BROKER_ROOT``: another checkout's, for a before and after).
ROOT = Path(os.environ.get("STORM_BROKER_ROOT") or Path(__file__).resolve().parent.parent)
AUTH = "Basic " + base64.b64encode(b"guest:guest").decode()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(port: int, path: str) -> Any:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}")
    request.add_header("Authorization", AUTH)
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Broker:
    def __init__(self, work: Path, name: str, ha: bool, connections: int) -> None:
        self.port, self.mgmt_port = free_port(), free_port()
        self.log = work / f"{name}.log"
        args = [
            sys.executable,
            "-m",
            "broker.main",
            "--port",
            str(self.port),
            "--interface",
            "127.0.0.1",
            "--mgmt-port",
            str(self.mgmt_port),
            "--mgmt-interface",
            "127.0.0.1",
            "--node-name",
            name,
            "--log-file",
            str(self.log),
            "--max-connections",
            str(connections + 100),
        ]
        if ha:
            args += ["--ha-cluster", "yes", "--ha-brokers-url", f"amqp:tcp:127.0.0.1:{free_port()}"]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.process = subprocess.Popen(args, env=env, cwd=str(work))
        deadline = time.monotonic() + 120
        while True:
            try:
                get(self.mgmt_port, "/api/status")
                return
            except OSError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise RuntimeError(f"{name} did not start (see {self.log})") from None
                time.sleep(0.2)

    def loop(self) -> dict[str, Any]:
        return dict(get(self.mgmt_port, "/api/status")["loop"])

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


CLIENT = """
import asyncio, sys, uvloop
from broker.amqp.client import connect, ClientError
port, n, hold = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "hold"
async def one():
    try:
        return await connect("127.0.0.1", port, user="guest", password="guest", timeout=120)
    except ClientError:
        return None
async def main():
    clients = await asyncio.gather(*(one() for _ in range(n)))
    print(sum(c is not None for c in clients), flush=True)
    if hold:
        await asyncio.sleep(3600)
uvloop.run(main())
"""


def storm(port: int, n: int, hold: bool) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-c", CLIENT, str(port), str(n), "hold" if hold else "once"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )


def summary(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    seen = {(s["where"], s["cpu_ms"]) for s in before["long_steps"]}
    return {
        "step_max_ms": after["step_max_ms"],
        "step_max_where": after["step_max_where"],
        "long_steps": after["long_steps_total"] - before["long_steps_total"],
        "long_steps_where": [
            f"{s['cpu_ms']} ms (gc {s['gc_ms']}): {s['where']}"
            for s in after["long_steps"]
            if (s["where"], s["cpu_ms"]) not in seen
        ],
        "gc_max_ms": after["gc_max_ms"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    n = args.connections
    results: dict[str, Any] = {"connections": n, "load1_start": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory(prefix="storm-") as tmp:
        work = Path(tmp)
        backup = Broker(work, "backup", ha=True, connections=n)
        try:
            for r in range(args.rounds):
                before, cpu = backup.loop(), cpu_seconds(backup.process.pid)
                client = storm(backup.port, n, hold=False)
                client.communicate(timeout=600)
                time.sleep(1.0)
                used = cpu_seconds(backup.process.pid) - cpu
                results[f"refused {r + 1}"] = {
                    **summary(before, backup.loop()),
                    "cpu_ms_per_connection": round(used * 1000 / n, 3),
                }
        finally:
            backup.stop()
        broker = Broker(work, "standalone", ha=False, connections=n)
        try:
            before, cpu = broker.loop(), cpu_seconds(broker.process.pid)
            client = storm(broker.port, n, hold=True)
            assert client.stdout is not None
            opened = int(client.stdout.readline())
            time.sleep(1.0)
            used = cpu_seconds(broker.process.pid) - cpu
            results["opened"] = {
                **summary(before, broker.loop()),
                "opened": opened,
                "cpu_ms_per_connection": round(used * 1000 / n, 3),
            }
            before, cpu = broker.loop(), cpu_seconds(broker.process.pid)
            client.send_signal(signal.SIGKILL)
            client.wait()
            deadline = time.monotonic() + 60
            while get(broker.mgmt_port, "/api/status").get("connections", 0) and (
                time.monotonic() < deadline
            ):
                time.sleep(0.5)
            time.sleep(1.0)
            used = cpu_seconds(broker.process.pid) - cpu
            results["dropped"] = {
                **summary(before, broker.loop()),
                "cpu_ms_per_connection": round(used * 1000 / n, 3),
            }
        finally:
            broker.stop()
    results["load1_end"] = os.getloadavg()[0]
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    asyncio.set_event_loop_policy(None)
    main()
