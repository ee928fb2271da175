#!/usr/bin/env python3
"""Where a nemesis drill's fail-over time goes, per cycle, from its logs (not a test).

Reads a ``qpid-ha drill --nemesis ...`` work directory (``drill.log``, ``n*/agent.log``,
``n*/qpidd.log``) and prints, for every cycle whose fault the drill recorded
(:data:`common.failover_phases.FAULT_RECORDS`: ``kill``, ``kill-node``, ``pause``,
``pause-node``, ``partition``, and ``stale-backup``'s node kill), the phases of
:data:`common.failover_phases.PHASES` in milliseconds, as the analytics job and the web
console define them (:func:`common.failover_phases.durations`), from the fault's record
(``failure``) to the new primary's broker active, then the drill's own outage for the
cycle (its longest time between two confirms). Then the median of each column per kind.
One clock: the drill and the nodes run on one host.

    .venv/bin/python bench/failover_phases.py /tmp/drill-workdir
"""

from __future__ import annotations

import json
import statistics
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common.failover_phases import FAULT_RECORDS, PHASES, RESIGN_EVENTS, durations

#: After the phases: the new primary's own grant to the old epoch waited out, from its
#: promotion's ``member_lease_promotion_wait`` to ``member_lease_serving`` (0: none; issue
#: 26: the whole of a broker kill's outage until the ended record), and when it served.
COLUMNS = (*(p.name for p in PHASES), "grant_wait", "serving", "drill_outage")


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


def first(items: list[dict[str, Any]], after: float, name: str, **match: Any) -> dict[str, Any]:
    for e in items:
        if e["t"] >= after and e["event"] == name and all(e.get(k) == v for k, v in match.items()):
            return e
    return {}


def phases(workdir: Path) -> list[tuple[str, dict[str, float | None]]]:
    drill = events(workdir / "drill.log")
    nodes = sorted(p for p in workdir.iterdir() if p.is_dir() and p.name.startswith("n"))
    agent = sorted((e for n in nodes for e in events(n / "agent.log")), key=lambda e: e["t"])
    broker = sorted((e for n in nodes for e in events(n / "qpidd.log")), key=lambda e: e["t"])
    rows = []
    cycle = ""
    for record in drill:
        if record["event"] == "nemesis_cycle_started":
            cycle = str(record["nemesis"])
        if record["event"] not in FAULT_RECORDS:
            continue
        t, old = record["t"], record["target"]
        promoted = next(
            (e for e in agent if e["t"] >= t and e["event"] == "agent_promoted"
             and e["node"] != old), {},
        )  # fmt: skip
        new, epoch = promoted.get("node"), promoted.get("new_epoch")
        won = [e["t"] for e in agent if e["event"] == "election_won" and e["node"] == new
               and t <= e["t"] <= promoted.get("t", t)]  # fmt: skip
        resigned = next((e["t"] for e in agent if e["t"] >= t and e["node"] == old
                         and e["event"] in RESIGN_EVENTS), None)  # fmt: skip
        recovering = first(broker, t, "ha_state_changed", node=new, new="recovering", epoch=epoch)
        active = first(broker, t, "ha_state_changed", node=new, new="active", epoch=epoch)
        instants = {
            "failure": t,
            "resigned": resigned if resigned is not None and won and resigned <= won[-1] else None,
            "won": won[-1] if won else None,
            "promoted": promoted.get("t"),
            "recovering": recovering.get("t"),
            "active": active.get("t"),
        }
        row = {k: None if v is None else v * 1000 for k, v in durations(instants).items()}
        waited = first(broker, t, "member_lease_promotion_wait", node=new, epoch=epoch)
        serving = first(broker, waited["t"], "member_lease_serving", node=new) if waited else {}
        row["grant_wait"] = waited.get("wait_ms", 0.0) if active else None
        if serving:
            row["serving"] = (serving["t"] - t) * 1000
        else:
            row["serving"] = None if not active else (active["t"] - t) * 1000
        checked = first(drill, t, "nemesis_cycle_checked")
        row["drill_outage"] = checked.get("outage_ms")
        rows.append((cycle or FAULT_RECORDS[record["event"]], row))
    return rows


def main() -> int:
    if len(sys.argv) != 2 or not Path(sys.argv[1], "drill.log").exists():
        print("usage: failover_phases.py DRILL_WORK_DIR (with drill.log)", file=sys.stderr)
        return 2
    rows = phases(Path(sys.argv[1]))
    print("| kind | " + " | ".join(f"{c} ms" for c in COLUMNS) + " |")
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
