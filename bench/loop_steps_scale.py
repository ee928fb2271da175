#!/usr/bin/env python3
"""The scale scenario of issue 25 at full size: the event loop's longest steps, not a test.

Runs ``tests/ha/scale_scenario.py`` (a primary and a backup, ``--queues`` durable queues,
half bound to a topic exchange, a backlog on a few; catch-up, the management lists,
``/metrics`` and a console viewer, the primary SIGKILLed and the backup promoted, the old
primary recovered and caught up) and prints each phase's wall time and each broker's loop
view (``GET /api/status``'s ``loop``): the longest step of CPU, the long ones (100 ms or
more) with where they were, the longest garbage collection (and per generation), the
collections' p99 and the heap's freezes. Then, per phase and broker,
from the brokers' logs, the longest step of the 1-second windows of ``loop_lag`` the phase
overlaps (the brokers log one a second here, ``$QPIDD_TEST_LOOP_LAG_INTERVAL``) and the
steps of 100 ms or more (``loop_step_long``); from ``GET /api/status``'s
``loop.step_counts`` at the phase's start and end, its steps' p99 (the upper bound of its
bucket: 10, 25, 50, 100 ms...).

    .venv/bin/python bench/loop_steps_scale.py --queues 10000
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.ha.scale_scenario import ScaleRun, make_cluster, run  # noqa: E402

#: The brokers' ``loop_lag`` interval in this benchmark (seconds).
WINDOW = 1.0
#: Which broker serves in which phase (index in the cluster, its role then).
ROLES = {
    "declare": ((0, "primary"), (1, "backup"), (2, "second backup")),
    "catch-up": ((0, "primary"), (1, "backup"), (2, "second backup")),
    "management": ((0, "primary"), (1, "backup")),
    "promotion": ((1, "new primary"), (2, "expected backup")),
    "recovery and catch-up": ((1, "new primary"), (0, "restarted backup")),
    "management after": ((1, "new primary"), (0, "restarted backup")),
}


def _events(log: Path) -> list[tuple[float, dict[str, Any]]]:
    """(time, event) of each ``loop_lag`` and ``loop_step_long`` in a broker's log."""
    found = []
    for line in log.read_text(errors="replace").splitlines():
        if '"loop_lag"' not in line and '"loop_step_long"' not in line:
            continue
        try:
            event = json.loads(line)
            ts = datetime.fromisoformat(event["ts"]).timestamp()
        except (ValueError, KeyError):
            continue
        found.append((ts, event))
    return found


def p99(counts: list[list[Any]]) -> float | None:
    """The p99 of steps counted by bucket (``[upper bound ms or None, count]``), as the
    upper bound of its bucket (as ``/metrics`` gives it); None: nothing counted, or past
    the last bound."""
    total = sum(count for _bound, count in counts)
    seen = 0
    for bound, count in counts:
        seen += count
        if total and seen >= 0.99 * total:
            return None if bound is None else float(bound)
    return None


def phase_steps(result: ScaleRun, logs: list[Path]) -> list[dict[str, Any]]:
    """Per phase and serving broker: the longest step of the 1-s windows the phase
    overlaps (ms of CPU), the phase's p99 (the bucket bound, from ``loop.step_counts``), and
    its long steps."""
    events = [_events(log) for log in logs]
    rows = []
    for phase, (start, end) in result.spans.items():
        for i, role in ROLES.get(phase, ()):
            if i >= len(logs):
                continue
            counts = result.counts.get(phase, {}).get(i, [])
            windows = [
                e for ts, e in events[i] if e["event"] == "loop_lag" and start < ts <= end + WINDOW
            ]
            long_steps = [
                e for ts, e in events[i] if e["event"] == "loop_step_long" and start <= ts <= end
            ]
            rows.append(
                {
                    "phase": phase,
                    "broker": role,
                    "windows": len(windows),
                    "max_ms": max((float(e.get("step_max_ms", 0.0)) for e in windows), default=0.0),
                    "p99_ms": p99(counts),
                    "steps": sum(count for _bound, count in counts),
                    "long_steps": len(long_steps),
                    "long_max_ms": max((float(e["cpu_ms"]) for e in long_steps), default=0.0),
                    "where": [e.get("where") for e in long_steps],
                }
            )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queues", type=int, default=10_000)
    parser.add_argument("--backlog", type=int, default=5_000, help="messages on each of 10 queues")
    parser.add_argument(
        "--brokers", type=int, default=3, choices=(2, 3), help="3: a second backup, expected"
    )
    parser.add_argument(
        "--connections", type=int, default=500, help="idle connections to the primary"
    )
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the brokers' directories")
    args = parser.parse_args()
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    os.environ["QPIDD_TEST_LOOP_LAG_INTERVAL"] = str(WINDOW)
    root = Path(tempfile.mkdtemp(prefix="loop-steps-scale-"))
    cluster = make_cluster(root, args.brokers).start(timeout=120)  # slow at load 50
    try:
        result = run(
            cluster,
            args.queues,
            {f"q{i}": args.backlog for i in range(1, 11)},
            timeout=600,
            connections=args.connections,
            note=lambda line: print(line, flush=True),
        )
    finally:
        cluster.stop()
    rows = phase_steps(result, [broker.log_file for broker in cluster.brokers])
    load = os.getloadavg()
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(
            json.dumps(
                {
                    "queues": args.queues,
                    "phases": result.phases,
                    "loops": result.loops,
                    "steps": rows,
                    "load": load,
                }
            )
        )
        return 0
    for name, loop in result.loops.items():
        print(
            f"{name}: longest step {loop['step_max_ms']} ms CPU at {loop['step_max_where']};"
            f" {loop['long_steps_total']} of 100 ms or more; longest collection"
            f" {loop['gc_max_ms']} ms (by generation {loop.get('gc_max_ms_by_generation')}),"
            f" p99 {p99(loop.get('gc_counts', []))} ms (bucket bound) of"
            f" {loop['gc_pauses']}; {loop.get('gc_freezes')} freezes"
        )
    for line in result.long_steps():
        print("  " + line)
    print("phase | broker | steps | longest step ms | p99 ms (bucket bound) | steps >= 100 ms")
    for row in rows:
        print(
            f"{row['phase']} | {row['broker']} | {row['steps']} | {row['max_ms']} |"
            f" {row['p99_ms']} |"
            f" {row['long_steps']}" + (f" (max {row['long_max_ms']})" if row["long_steps"] else "")
        )
    print(f"load average: {load}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
