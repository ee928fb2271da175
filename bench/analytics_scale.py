"""Benchmark (not a test): the fail-over analytics job on 10M synthetic log lines.

Generates ``--events`` lines (``analytics.generate``: ``--clusters`` clusters of three nodes,
``--failovers`` fail-overs each, the rest connection/protocol noise spread over every
node), then runs the job as ``qpid-ha-analytics`` does, in a fresh Python process with
``local[*]``, and reports the generation time, the job's wall time (Spark start included)
and events per second, the CPU seconds of the job's processes (Python and the JVM, from
/proc, sampled every 0.2 s) and the load average before and after: on a shared machine the
CPU time says what the job cost when the wall time says mostly how busy the machine was.
``--logs DIR`` runs the job again on logs a ``--keep`` run left. Figures go in
``docs/analytics.md`` and ``docs/benchmarks.md``.

Usage: ``.venv/bin/python bench/analytics_scale.py [--events 10000000] [--dir DIR] [--keep]
[--logs DIR]``
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from proc_stats import process_cpu


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def run_measured(command: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the process and its descendants) of ``command``; the
    CPU time is the sum of each process's last sample (every 0.2 s), so the last 0.2 s of
    a process that exits may be missed."""
    started = time.monotonic()
    proc = subprocess.Popen(command)
    last: dict[int, float] = {}
    while proc.poll() is None:
        tree, todo = _children(), [proc.pid]
        while todo:
            pid = todo.pop()
            cpu = process_cpu(pid)
            if cpu is not None:
                last[pid] = max(cpu, last.get(pid, 0.0))
            todo += tree.get(pid, [])
        time.sleep(0.2)
    took = time.monotonic() - started
    if proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, command)
    return took, sum(last.values())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--events", type=int, default=10_000_000)
    p.add_argument("--clusters", type=int, default=100)
    p.add_argument("--failovers", type=int, default=20, help="per cluster")
    p.add_argument("--dir", type=Path, help="work directory (default: a new temporary one)")
    p.add_argument("--keep", action="store_true", help="keep the logs and the report")
    p.add_argument("--logs", type=Path, help="logs of an earlier --keep run: no generation")
    args = p.parse_args()
    work = args.dir or Path(tempfile.mkdtemp(prefix="analytics-scale-"))
    logs, out = args.logs or work / "logs", work / "report"
    structured_per_cluster = 19 + 14 * args.failovers  # the generator's lines, about
    noise = max(0, args.events - args.clusters * structured_per_cluster)
    generated = 0.0
    if args.logs is None:
        started = time.monotonic()
        subprocess.run(
            [sys.executable, "-m", "analytics.generate", str(logs), f"--clusters={args.clusters}",
             f"--failovers={args.failovers}", f"--noise={noise}"],
            check=True,
        )  # fmt: skip
        generated = time.monotonic() - started
    params = json.loads((logs / "params.json").read_text())
    size = sum(f.stat().st_size for f in logs.rglob("*") if f.is_file())
    load_before = os.getloadavg()[0]
    took, cpu = run_measured([sys.executable, "-m", "analytics", str(logs), f"--out={out}"])
    failovers = sum(
        1 for line in (out / "tables" / "failovers.csv").read_text().splitlines()[1:]
        if ",failover," in line
    )  # fmt: skip
    print(
        f"{params['events']} lines ({size / 1e9:.2f} GB, {params['files']} structured files, "
        f"{params['failovers']} fail-overs generated) in {generated:.1f}s; "
        f"job: {took:.1f}s wall ({params['events'] / took:,.0f} lines/s), {cpu:.1f}s CPU "
        f"(job and JVM), load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} "
        f"after; {failovers} fail-overs found"
    )
    if args.keep:
        print(f"kept {work}")
    else:
        shutil.rmtree(work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
