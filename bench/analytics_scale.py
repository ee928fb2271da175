"""Benchmark (not a test): the fail-over analytics job on 10M synthetic log lines.

Generates ``--events`` lines (``analytics.generate``: ``--clusters`` clusters of three nodes,
``--failovers`` fail-overs each, the rest connection/protocol noise spread over every
node), then runs the job as ``qpid-ha-analytics`` does, in a fresh Python process with
``local[*]``, and reports the generation time, the job's wall time (Spark start included)
and events per second. Figures go in ``docs/analytics.md``.

Usage: ``.venv/bin/python bench/analytics_scale.py [--events 10000000] [--dir DIR] [--keep]``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--events", type=int, default=10_000_000)
    p.add_argument("--clusters", type=int, default=100)
    p.add_argument("--failovers", type=int, default=20, help="per cluster")
    p.add_argument("--dir", type=Path, help="work directory (default: a new temporary one)")
    p.add_argument("--keep", action="store_true", help="keep the logs and the report")
    args = p.parse_args()
    work = args.dir or Path(tempfile.mkdtemp(prefix="analytics-scale-"))
    logs, out = work / "logs", work / "report"
    structured_per_cluster = 19 + 14 * args.failovers  # the generator's lines, about
    noise = max(0, args.events - args.clusters * structured_per_cluster)
    started = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "analytics.generate", str(logs), f"--clusters={args.clusters}",
         f"--failovers={args.failovers}", f"--noise={noise}"],
        check=True,
    )  # fmt: skip
    generated = time.monotonic() - started
    params = json.loads((logs / "params.json").read_text())
    size = sum(f.stat().st_size for f in logs.rglob("*") if f.is_file())
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "analytics", str(logs), f"--out={out}"], check=True)
    took = time.monotonic() - started
    failovers = sum(
        1 for line in (out / "tables" / "failovers.csv").read_text().splitlines()[1:]
        if ",failover," in line
    )  # fmt: skip
    print(
        f"{params['events']} lines ({size / 1e9:.2f} GB, {params['files']} structured files, "
        f"{params['failovers']} fail-overs generated) in {generated:.1f}s; "
        f"job: {took:.1f}s wall ({params['events'] / took:,.0f} lines/s), load average "
        f"{os.getloadavg()[0]:.1f}; {failovers} fail-overs found"
    )
    if args.keep:
        print(f"kept {work}")
    else:
        shutil.rmtree(work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
