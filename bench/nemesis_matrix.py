"""The nemesis drill's full matrix: session timeouts x link heartbeats, every nemesis.

Runs ``qpid-ha drill --nemesis ... --cycles N --session-timeout S
--link-heartbeat-interval H --work-dir OUT/s<S>-h<H>`` once per cell (root: network
namespaces), reads each run's ``results.json`` and writes the table of every cell, one row
per setting and nemesis (after a pivot: nemeses down, settings across, lost / two-primary
seconds / outage ms), to ``OUT/matrix.md`` (after each cell, so a cut-short run keeps
what it measured) and stdout. A cell that fails keeps its logs under its work directory.

    sudo .venv/bin/python bench/nemesis_matrix.py --sessions 4,8 --heartbeats 1,5 --cycles 1

Exit 0 when every cycle of every cell was OK (0 lost, 0 s with two primaries).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BIN = Path(sys.executable).parent
ALL = "kill,kill-node,pause,partition,stale-backup,zk-loss"
HEADER = (
    "| session s | heartbeat s | nemesis | cycles | confirmed | lost | dup | two primaries s "
    "| outage ms median (max) | new primary | result |\n"
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
)


def rows(session: float, heartbeat: float, results: dict[str, Any]) -> list[str]:
    """One table row per nemesis of one cell's ``results.json``."""
    by_nemesis: dict[str, list[dict[str, Any]]] = {}
    for cycle in results["cycles"]:
        by_nemesis.setdefault(cycle["nemesis"], []).append(cycle)
    out = []
    for name, cycles in by_nemesis.items():
        outages = [c["outage_ms"] for c in cycles]
        failed = [c for c in cycles if not c["ok"]]
        moved = ", ".join(
            f"{c['old_primary']}->{c['new_primary'] or c['old_primary']}" for c in cycles
        )
        result = (
            "ok"
            if not failed
            else "FAILED: "
            + "; ".join(
                c["error"] or f"lost {c['lost']}, two primaries {c['two_primaries_s']} s"
                for c in failed
            )
        )
        out.append(
            f"| {session:g} | {heartbeat:g} | {name} | {len(cycles)} "
            f"| {sum(c['confirmed'] for c in cycles)} | {sum(c['lost'] for c in cycles)} "
            f"| {sum(c['duplicated'] for c in cycles)} "
            f"| {sum(c['two_primaries_s'] for c in cycles):.3f} "
            f"| {statistics.median(outages):.0f} ({max(outages):.0f}) | {moved} | {result} |"
        )
    return out


def pivot(cells: dict[tuple[float, float], dict[str, Any]]) -> list[str]:
    """Nemeses down, settings across: ``lost / two-primary s / outage ms (max of cycles)``."""
    settings = list(cells)
    names: list[str] = []
    for results in cells.values():
        for cycle in results["cycles"]:
            if cycle["nemesis"] not in names:
                names.append(cycle["nemesis"])
    head = " | ".join(f"{s:g} s / {h:g} s" for s, h in settings)
    lines = [f"| nemesis \\ session / heartbeat | {head} |", "| --- |" + " --- |" * len(settings)]
    for name in names:
        row = []
        for key in settings:
            cycles = [c for c in cells[key]["cycles"] if c["nemesis"] == name]
            if not cycles:
                row.append("not run")
                continue
            flag = "" if all(c["ok"] for c in cycles) else " FAILED"
            row.append(
                f"{sum(c['lost'] for c in cycles)} / "
                f"{sum(c['two_primaries_s'] for c in cycles):g} / "
                f"{max(c['outage_ms'] for c in cycles):.0f}{flag}"
            )
        lines.append(f"| {name} | " + " | ".join(row) + " |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", default="2,4,8,15", help="session timeouts, s")
    parser.add_argument("--heartbeats", default="1,5", help="link heartbeat intervals, s")
    parser.add_argument("--nemesis", default=ALL)
    parser.add_argument("--cycles", type=int, default=1)
    parser.add_argument("--rate", default="100")
    parser.add_argument("--out", default="var/nemesis-matrix")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lines = [HEADER]
    cells: dict[tuple[float, float], dict[str, Any]] = {}
    ok = True
    for session in [float(s) for s in args.sessions.split(",")]:
        for heartbeat in [float(h) for h in args.heartbeats.split(",")]:
            workdir = out / f"s{session:g}-h{heartbeat:g}"
            argv = [
                str(BIN / "qpid-ha"),
                "drill",
                f"--nemesis={args.nemesis}",
                f"--cycles={args.cycles}",
                f"--session-timeout={session}",
                f"--link-heartbeat-interval={heartbeat}",
                f"--rate={args.rate}",
                f"--work-dir={workdir}",
            ]
            began = time.monotonic()
            done = subprocess.run(argv, capture_output=True, text=True, check=False)
            took = time.monotonic() - began
            print(done.stdout.rstrip(), file=sys.stderr)
            results_file = workdir / "results.json"
            if not results_file.exists():
                ok = False
                error = (done.stderr.strip().splitlines() or ["no results"])[-1]
                lines.append(
                    f"| {session:g} | {heartbeat:g} | - | - | - | - | - | - | - | - "
                    f"| ERROR: {error} |"
                )
            else:
                results = json.loads(results_file.read_text())
                ok = ok and done.returncode == 0
                lines += rows(session, heartbeat, results)
                cells[(session, heartbeat)] = results
            print(
                f"cell session {session:g} s, heartbeat {heartbeat:g} s: exit "
                f"{done.returncode} in {took:.0f} s",
                file=sys.stderr,
            )
            text = "\n".join([*pivot(cells), "", *lines]) + "\n"
            (out / "matrix.md").write_text(text)
    print(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
