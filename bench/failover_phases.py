#!/usr/bin/env python3
"""Where a nemesis drill's fail-over time goes, per cycle, from its logs (not a test).

Reads a ``qpid-ha drill --nemesis kill,kill-node ...`` work directory (``drill.log``,
``n*/agent.log``, ``n*/qpidd.log``) and prints, for every ``kill`` and ``kill-node`` cycle,
milliseconds from the SIGKILL to: the new primary's agent winning the election
(``election_won``), its broker promoted (``ha_promote_requested``), active (the remaining
in-sync backup is back), the publisher reconnected, and the first confirm after the kill
(the outage the drill reports). Then the median of each column per nemesis.

    .venv/bin/python bench/failover_phases.py /tmp/drill-workdir
"""

from __future__ import annotations

import json
import statistics
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

KILLS = {"broker_sigkilled": "kill", "node_sigkilled": "kill-node"}
COLUMNS = ("won", "promoted", "active", "reconnected", "confirm")


def events(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        event["t"] = datetime.fromisoformat(event["ts"].replace("Z", "+00:00")).timestamp()
        out.append(event)
    return out


def first_after(items: list[dict[str, Any]], t: float, name: str, **match: Any) -> float | None:
    for e in items:
        if e["t"] >= t and e["event"] == name and all(e.get(k) == v for k, v in match.items()):
            return float(e["t"])
    return None


def phases(workdir: Path) -> list[tuple[str, dict[str, float | None]]]:
    drill = events(workdir / "drill.log")
    nodes = sorted(p for p in workdir.iterdir() if p.is_dir() and p.name.startswith("n"))
    agent = sorted((e for n in nodes for e in events(n / "agent.log")), key=lambda e: e["t"])
    broker = sorted((e for n in nodes for e in events(n / "qpidd.log")), key=lambda e: e["t"])
    rows = []
    for kill in (e for e in drill if e["event"] in KILLS):
        t = kill["t"]
        gap = next(
            (e for e in drill if e["event"] == "confirm_gap" and e["t"] >= t),
            None,
        )
        active = first_after(broker, t, "ha_state_changed", new="active")
        row = {
            "won": first_after(agent, t, "election_won"),
            "promoted": first_after(broker, t, "ha_promote_requested"),
            "active": active,
            "reconnected": first_after(drill, t, "client_reconnected", role="publisher"),
            "confirm": None if gap is None else float(gap["t"]),
        }
        rows.append(
            (
                KILLS[kill["event"]],
                {k: None if v is None else (v - t) * 1000 for k, v in row.items()},
            )
        )
    return rows


def main() -> int:
    if len(sys.argv) != 2 or not Path(sys.argv[1], "drill.log").exists():
        print("usage: failover_phases.py DRILL_WORK_DIR (with drill.log)", file=sys.stderr)
        return 2
    rows = phases(Path(sys.argv[1]))
    print("| nemesis | " + " | ".join(f"{c} ms" for c in COLUMNS) + " |")
    print("| --- |" + " ---: |" * len(COLUMNS))
    for name, row in rows:
        cells = " | ".join("-" if row[c] is None else f"{row[c]:.0f}" for c in COLUMNS)
        print(f"| {name} | {cells} |")
    for name in sorted({n for n, _ in rows}):
        medians: list[str] = []
        for c in COLUMNS:
            values = [v for n, r in rows if n == name and (v := r[c]) is not None]
            medians.append(f"{statistics.median(values):.0f}" if values else "-")
        print(f"| **{name} median** | " + " | ".join(medians) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
