#!/usr/bin/env python3
"""What one ``GET /api/ha`` costs a broker at scale, with its rows and as the agent's
summary (``?queues=summary``): not a test.

A primary and a backup (``tests/ha/cluster.py``) with ``--queues`` durable queues (half
bound to a topic exchange) and the backup caught up; then, on each broker, ``--polls``
reads of ``/api/ha`` one after another, then as many of ``/api/ha?queues=summary``: the
broker's CPU per read (``/proc/PID/stat`` utime + stime, every thread, less the same
time's idle CPU measured just before) and the answer's size. The agent reads its broker's
status twice a second (``--check-interval`` 0.5 s).

    .venv/bin/python bench/ha_status_cost.py --queues 10000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from common.polling import poll_until  # noqa: E402
from tests.ha.cluster import AUTH, Cluster, http  # noqa: E402
from tests.ha.scale_scenario import _declare  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def read(port: int, path: str) -> int:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}")
    request.add_header("Authorization", AUTH)
    with urllib.request.urlopen(request, timeout=60) as answer:
        return len(answer.read())


def cost(pid: int, port: int, path: str, polls: int) -> dict[str, Any]:
    """CPU ms per read of ``path`` (less the broker's idle CPU over the same time)."""
    idle_start, idle_cpu = time.monotonic(), cpu_s(pid)
    time.sleep(3.0)
    idle_rate = (cpu_s(pid) - idle_cpu) / (time.monotonic() - idle_start)
    started, before = time.monotonic(), cpu_s(pid)
    size = 0
    for _ in range(polls):
        size = read(port, path)
    wall = time.monotonic() - started
    used = cpu_s(pid) - before - idle_rate * wall
    return {
        "path": path,
        "cpu_ms_per_read": round(1000 * used / polls, 1),
        "bytes": size,
        "idle_cpu_pct": round(100 * idle_rate, 1),
        "load": " ".join(f"{x:.1f}" for x in os.getloadavg()),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queues", type=int, default=10_000)
    parser.add_argument("--polls", type=int, default=20)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="ha-status-cost-"))
    cluster = Cluster(root, 2, "--ha-backup-timeout=30").start(timeout=120)
    rows = []
    try:
        cluster.promote(0, epoch=1)
        cluster.wait_state(1, "ready", timeout=120)
        asyncio.run(_declare(cluster.ports[0], args.queues, {}))
        poll_until(
            lambda: (
                http("GET", cluster.brokers[1].mgmt_port, "/api/status")["queues"] >= args.queues
            ),
            600,
            "the backup to hold every queue",
        )
        cluster.wait_state(1, "ready", timeout=120)
        for i, role in ((0, "primary"), (1, "backup")):
            broker = cluster.brokers[i]
            assert broker.proc is not None
            for path in ("/api/ha", "/api/ha?queues=summary"):
                row = {"broker": role, **cost(broker.proc.pid, broker.mgmt_port, path, args.polls)}
                print(json.dumps(row), flush=True)
                rows.append(row)
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps({"queues": args.queues, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
