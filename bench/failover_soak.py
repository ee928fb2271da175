#!/usr/bin/env python3
"""No spurious fail-over under steady load (issue 10, item 7), not a test.

Runs the demo's local cluster (one ZooKeeper, three agents each supervising its broker, on
loopback) at ``--session-timeout S``, then ``qpid-ha drill`` for ``--duration`` seconds at
``--rate`` messages per second (publisher confirms, a consumer, the URL list) and injects
nothing. Every second it notes which broker is the primary; at the end it counts, from the
agents' JSON logs, what would be a needless fail-over: elections won after the first,
fences (``agent_fenced``, ``zookeeper_session_fence``), broker exits, session grants after
the first per agent (a new session: the old one expired). Writes ``soak.json`` in the work
directory and prints a one-line summary. Exit 0 when nothing failed over and the drill lost
nothing.

    .venv/bin/python bench/failover_soak.py --session-timeout 1 --duration 3600 --rate 20
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "deploy"))

from demo import BIN, NODES, LocalCluster, read_events, wait

#: agent events that mean a fail-over, or a step towards one, happened
FAILOVER_EVENTS = ("agent_fenced", "zookeeper_session_fence", "broker_process_exited")


def count_events(workdir: Path) -> dict[str, Any]:
    counts: dict[str, Any] = {}
    for node in NODES:
        events = read_events(workdir / f"{node}.agent.log")
        names = [e.get("event") for e in events]
        counts[node] = {
            "election_won": names.count("election_won"),
            "sessions_granted": names.count("zookeeper_session_granted"),
            **{name: names.count(name) for name in FAILOVER_EVENTS},
        }
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--session-timeout", type=float, default=1.0)
    parser.add_argument("--duration", type=float, default=3600.0, help="seconds of load")
    parser.add_argument("--rate", type=float, default=20.0, help="messages per second")
    parser.add_argument("--work-dir", type=Path, default=None)
    args = parser.parse_args()
    workdir = args.work_dir or Path(tempfile.mkdtemp(prefix="qpidd-soak-"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"logs in {workdir}", flush=True)
    cluster = LocalCluster(workdir, session_timeout=args.session_timeout)
    drill: subprocess.Popen[bytes] | None = None
    stopping = False

    def interrupted(_signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, interrupted)
    primaries: list[tuple[float, str | None]] = []
    began = time.monotonic()
    try:
        cluster.start()
        wait("a settled cluster", cluster.settled, 60)
        url = "amqp:guest/guest@" + ",".join(f"127.0.0.1:{cluster.ports[n]}" for n in NODES)
        drill = subprocess.Popen(
            [
                str(BIN / "qpid-ha"),
                "drill",
                f"--url={url}",
                f"--rate={args.rate:g}",
                f"--duration={args.duration:g}",
                f"--log-file={workdir / 'drill.log'}",
                "--gap-threshold=500ms",
            ],
            stdout=subprocess.DEVNULL,
            stderr=open(workdir / "drill.err", "wb"),  # noqa: SIM115 - closed with the process
        )
        began = time.monotonic()
        while drill.poll() is None and not stopping:
            primary = cluster.primary()
            if not primaries or primaries[-1][1] != primary:
                primaries.append((round(time.monotonic() - began, 1), primary))
                print(f"{primaries[-1][0]:8.1f} s: primary {primary}", flush=True)
            time.sleep(1.0)  # a sampling period, not a synchronisation
        if drill.poll() is None:
            drill.send_signal(signal.SIGINT)
            drill.wait(60)
    finally:
        if drill is not None and drill.poll() is None:
            drill.kill()
            drill.wait()
        cluster.stop()
    finished = [e for e in read_events(workdir / "drill.log") if e.get("event") == "drill_finished"]
    gaps = [e for e in read_events(workdir / "drill.log") if e.get("event") == "confirm_gap"]
    counts = count_events(workdir)
    won = sum(c["election_won"] for c in counts.values())
    fenced = sum(c[name] for c in counts.values() for name in FAILOVER_EVENTS)
    new_sessions = sum(max(0, c["sessions_granted"] - 1) for c in counts.values())
    result = {
        "session_timeout": args.session_timeout,
        "rate": args.rate,
        "duration_s": round(time.monotonic() - began, 1),
        "load_average_end": os.getloadavg(),
        "primaries": primaries,
        "failovers": max(0, won - 1),
        "fences_and_exits": fenced,
        "new_sessions": new_sessions,
        "agents": counts,
        "drill": finished[-1] if finished else None,
        "confirm_gaps_over_500ms": [round(float(g.get("gap_ms", 0))) for g in gaps],
    }
    (workdir / "soak.json").write_text(json.dumps(result, indent=2) + "\n")
    drill_summary = finished[-1] if finished else {}
    print(
        f"soak: {result['duration_s']} s at {args.rate:g} msg/s,"
        f" session {args.session_timeout:g} s:"
        f" fail-overs {result['failovers']}, fences/exits {fenced}, new sessions {new_sessions},"
        f" confirmed {drill_summary.get('confirmed')}, lost {drill_summary.get('lost')},"
        f" gaps > 500 ms {len(gaps)}"
    )
    ok = result["failovers"] == 0 and fenced == 0 and drill_summary.get("lost") == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
