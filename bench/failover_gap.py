#!/usr/bin/env python3
"""The publish gap over repeated kills of the primary broker (issue 4), not a test.

Runs the demo's local cluster (ZooKeeper, three agents each supervising its broker, on
loopback), a pika publisher with confirms and a consumer on the fail-over URL list, then
--kills times: wait until the cluster is settled (one active primary, two ready backups),
SIGKILL the primary broker, and measure the publish gap: from the last confirm before the
kill to the first confirm after it. Prints every gap, then p50/p90/p99/max, and the
sent/confirmed/received/lost/duplicated check. Targets: p50 <= 150 ms, p99 <= 500 ms.

    .venv/bin/python bench/failover_gap.py --kills 20
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "deploy"))

from demo import NODES, Clients, LocalCluster, wait


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def confirms_over(clients: Clients, count: int) -> Callable[[], bool]:
    return lambda: len(clients.confirm_times) > count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20, help="primary broker kills")
    parser.add_argument("--json", action="store_true", help="print the result as JSON too")
    args = parser.parse_args()
    if args.kills < 1:
        parser.error(f"--kills must be at least 1: {args.kills}")
    cluster = LocalCluster(Path(tempfile.mkdtemp(prefix="qpidd-gap-")))
    gaps: list[float] = []
    try:
        cluster.start()
        wait("the first primary", cluster.settled, 60)
        clients = Clients([cluster.ports[n] for n in reversed(NODES)])
        consumer = threading.Thread(target=clients.consume, daemon=True)
        consumer.start()
        publisher = threading.Thread(target=clients.publish, args=(10**9,), daemon=True)
        publisher.start()
        for kill in range(args.kills):
            wait("a settled cluster", cluster.settled, 60)
            wait("confirms", confirms_over(clients, 200 * (kill + 1)), 60)
            primary = cluster.primary()
            assert primary is not None
            pid = cluster.broker_pid(primary)
            before = len(clients.confirm_times)
            os.kill(pid, signal.SIGKILL)
            wait("a confirm after the kill", confirms_over(clients, before), 60)
            # the last confirm before the kill may have landed just after `before` was read
            times = clients.confirm_times
            gap = max(b - a for a, b in zip(times[before - 1 :], times[before:], strict=False))
            gaps.append(gap)
            print(f"kill {kill + 1}: {primary} pid {pid}, publish gap {gap * 1000:.0f} ms")
        clients.stop_publishing.set()
        publisher.join(30)
        wait("the consumer to drain", lambda: clients.confirmed <= set(clients.received), 60)
        clients.stop_consuming.set()
        consumer.join(10)
    finally:
        cluster.stop()
    lost = clients.confirmed - set(clients.received)
    duplicated = len(clients.received) - len(set(clients.received))
    ms = [g * 1000 for g in gaps]
    result = {
        "kills": len(ms),
        "p50_ms": round(statistics.median(ms), 1),
        "p90_ms": round(percentile(ms, 0.9), 1),
        "p99_ms": round(percentile(ms, 0.99), 1),
        "max_ms": round(max(ms), 1),
        "sent": clients.sent,
        "confirmed": len(clients.confirmed),
        "received": len(set(clients.received)),
        "lost": len(lost),
        "duplicated": duplicated,
    }
    print(
        f"publish gap over {result['kills']} kills: p50 {result['p50_ms']} ms, "
        f"p90 {result['p90_ms']} ms, p99 {result['p99_ms']} ms, max {result['max_ms']} ms; "
        f"sent {result['sent']}, confirmed {result['confirmed']}, received "
        f"{result['received']}, lost {result['lost']}, duplicated {result['duplicated']}"
    )
    if args.json:
        print(json.dumps(result))
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
