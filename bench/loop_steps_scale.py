#!/usr/bin/env python3
"""The scale scenario of issue 25 at full size: the event loop's longest steps, not a test.

Runs ``tests/ha/scale_scenario.py`` (a primary and a backup, ``--queues`` durable queues,
half bound to a topic exchange, a backlog on a few; catch-up, the management lists,
``/metrics`` and a console viewer, the primary SIGKILLed and the backup promoted, the old
primary recovered and caught up) and prints each phase's wall time and each broker's loop
view (``GET /api/status``'s ``loop``): the longest step of CPU, the long ones (100 ms or
more) with where they were, the longest garbage collection.

    .venv/bin/python bench/loop_steps_scale.py --queues 10000
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.ha.scale_scenario import make_cluster, run  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queues", type=int, default=10_000)
    parser.add_argument("--backlog", type=int, default=5_000, help="messages on each of 10 queues")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    cluster = make_cluster(Path(tempfile.mkdtemp(prefix="loop-steps-scale-"))).start()
    try:
        result = run(
            cluster,
            args.queues,
            {f"q{i}": args.backlog for i in range(1, 11)},
            timeout=600,
            note=lambda line: print(line, flush=True),
        )
    finally:
        cluster.stop()
    if args.json:
        print(json.dumps({"queues": args.queues, "phases": result.phases, "loops": result.loops}))
        return 0
    for name, loop in result.loops.items():
        print(
            f"{name}: longest step {loop['step_max_ms']} ms CPU at {loop['step_max_where']};"
            f" {loop['long_steps_total']} of 100 ms or more; longest collection"
            f" {loop['gc_max_ms']} ms"
        )
    for line in result.long_steps():
        print("  " + line)
    print(f"load average: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
