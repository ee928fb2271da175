#!/usr/bin/env python3
"""Channel rows at scale (issue 25): what the management API, the console's page of a
connection's channels and the sampler cost a primary whose two backups' links hold a
channel per queue (20,000 channels at 10,000 queues). A benchmark, not a test.

A primary and two backups (``tests/ha/cluster.py``), ``--queues`` durable queues, both
backups ready; one client connection with three channels. Then, on the primary, phases
of ``--window`` seconds (at least one 10 s window of the loop's steps):

- **idle**: nobody asks for channels;
- **changes**: ``GET /api/changes`` every 5 s (the delta feed: channels and consumers built
  every tick while it is read);
- **page**: a console viewer's stream (``GET /api/console/live``) paging the client
  connection's channels as the Connections tab does (``channels.name=^NAME \\(``).

Each phase: the primary's CPU (% of one core, all threads, ``/proc``) and the longest loop
step of the last 10 s window (``/metrics``, CPU time). Then requests, five of each, timed
(wall, median and longest):
``GET /api/channels?page=1&page_size=100``, ``GET /api/connections/{a link}/channels``,
``GET /api/changes``. The load average is printed with each figure.

    .venv/bin/python bench/channel_rows_scale.py --queues 10000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pika

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from proc_stats import process_cpu  # noqa: E402
from scale_vs_rabbitmq import declare  # noqa: E402

from common.polling import poll_until  # noqa: E402
from tests.ha.cluster import AUTH, Cluster, http  # noqa: E402

#: The lists the console pages besides the queues (lists.js).
PAGED = ("exchanges", "bindings", "connections")


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def get(port: int, path: str, timeout: float = 120) -> tuple[float, int]:
    """Seconds a GET took and the bytes of its answer (an error's status, negative)."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}")
    request.add_header("Authorization", AUTH)
    began = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            size = len(answer.read())
    except urllib.error.HTTPError as exc:
        size = -exc.code
    return time.monotonic() - began, size


def longest_step(port: int) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=60).read()
    for line in text.decode().splitlines():
        if line.startswith('qpidd_loop_step_seconds{quantile="1"}'):
            return float(line.split()[-1])
    return 0.0


class Stream(threading.Thread):
    """A console viewer's live stream, read until :attr:`stop`; bytes read."""

    def __init__(self, port: int, query: str) -> None:
        super().__init__(daemon=True)
        self.port, self.query = port, query
        self.read = 0
        self.stop = threading.Event()

    def run(self) -> None:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/api/console/live?{self.query}"
        )
        request.add_header("Authorization", AUTH)
        with urllib.request.urlopen(request, timeout=60) as answer:
            while not self.stop.is_set():
                line = answer.readline()
                if not line:
                    return
                self.read += len(line)


def phase(name: str, pid: int, port: int, window: float, during: Any = None) -> dict[str, Any]:
    began, cpu = time.monotonic(), process_cpu(pid) or 0.0
    next_call = began
    while time.monotonic() - began < window:
        if during is not None and time.monotonic() >= next_call:
            during()
            next_call += 5.0
        time.sleep(0.2)
    used = (process_cpu(pid) or 0.0) - cpu
    row = {
        "phase": name,
        "cpu_pct": round(100 * used / (time.monotonic() - began), 1),
        "longest_step_ms": round(1000 * longest_step(port), 1),
        "load": load(),
    }
    print(json.dumps(row), flush=True)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queues", type=int, default=10_000)
    parser.add_argument("--window", type=float, default=20.0)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="channel-rows-"))
    cluster = Cluster(root, 3, "--ha-backup-timeout=60").start(timeout=120)
    try:
        cluster.promote(0, epoch=1)
        for i in (1, 2):
            cluster.wait_state(i, "ready", timeout=120)
        asyncio.run(declare(cluster.ports[0], args.queues))
        mgmt, pid = cluster.brokers[0].mgmt_port, cluster.brokers[0].proc.pid  # type: ignore[union-attr]

        def channels() -> int:
            return sum(c["channels"] for c in http("GET", mgmt, "/api/connections"))

        poll_until(lambda: channels() >= 2 * args.queues, 600, "a channel per queue per backup")
        client = pika.BlockingConnection(
            pika.URLParameters(f"amqp://guest:guest@127.0.0.1:{cluster.ports[0]}/%2F")
        )
        for _ in range(3):
            client.channel()
        connections = http("GET", mgmt, "/api/connections")
        mine = next(c for c in connections if not c.get("ha_backup"))
        link = next(c for c in connections if c.get("ha_backup"))
        print(
            json.dumps({"queues": args.queues, "channels": channels(), "load": load()}), flush=True
        )
        rows = [phase("idle", pid, mgmt, args.window)]
        rows.append(phase("changes", pid, mgmt, args.window, lambda: get(mgmt, "/api/changes")))
        time.sleep(11)  # the changes' follow lapses
        name = urllib.parse.quote(f"^{re.escape(mine['name'])} \\(")
        lists = "&".join(f"{n}.page=1&{n}.page_size=50" for n in PAGED)  # as lists.js asks
        stream = Stream(
            mgmt,
            f"page=1&page_size=50&{lists}&channels.page=1&channels.page_size=100"
            f"&channels.name={name}&channels.use_regex=true",
        )
        stream.start()
        rows.append(phase("page", pid, mgmt, args.window))
        stream.stop.set()
        rows.append({"phase": "page", "stream_bytes_per_s": round(stream.read / args.window)})
        for path in (
            "/api/channels?page=1&page_size=100",
            f"/api/connections/{link['id']}/channels",
            "/api/changes",
        ):
            runs = [get(mgmt, path) for _ in range(5)]
            took = sorted(t for t, _ in runs)
            row = {
                "request": path,
                "median_s": round(took[2], 3),
                "max_s": round(took[-1], 3),
                "bytes": runs[-1][1],
                "load": load(),
            }
            print(json.dumps(row), flush=True)
            rows.append(row)
        client.close()
        loop = http("GET", mgmt, "/api/status").get("loop") or {}
        for step in loop.get("long_steps", []):  # where the long ones were (100 ms or more)
            print(json.dumps({"long_step": step}), flush=True)
        print(json.dumps({"rows": rows}))
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
