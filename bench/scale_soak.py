#!/usr/bin/env python3
"""The scale scenario with agents and faults, loaded (issue 25, "Done when"), not a test.

The demo's local cluster (three ZooKeeper servers, three agents each supervising its
broker, loopback), every timing at its built-in default (issue 26, "One set of settings":
the agent's ``--session-timeout``, ``--broker-timeout``, ``--check-interval`` and
``--watchdog-timeout``, the broker's member lease; ``--session-timeout`` gives the agents
another value, as the 2 s of the first measurements); the settings are in the JSON;
``--queues`` durable queues declared on the primary (half bound to a topic exchange, as
``tests/ha/scale_scenario.py``), then ``qpid-ha drill`` (publisher confirms, a consumer,
the URL list) for ``--duration`` seconds while, at a third of it, the primary broker is
SIGKILLed (its agent restarts it as a backup), and at two thirds a backup broker is
SIGTERMed (restarted by its agent). Every second it notes the primary and the load
average. At the end, from the logs: fences and exits by the agents (``agent_fenced``,
``zookeeper_session_fence``, ``broker_killed``, ``broker_process_exited``), one entry per
broker instance that ended (its pid: an agent's fence logs ``agent_fenced``, then the kill,
then the supervisor's ``broker_process_exited``, all of one instance), with when it ended
and why (a fence within 30 s after a fault, of the broker the fault hit, is the fault's;
any other is a healthy broker fenced), the time without a primary, the drill's confirmed and lost
messages, and each broker's loop steps of 100 ms or more (``loop_step_long``) and the
longest step and collection of its ``loop_lag`` windows. Writes ``scale-soak.json``.

    .venv/bin/python bench/scale_soak.py --queues 10000 --duration 900 --rate 20
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "deploy"))

from demo import BIN, NODES, LocalCluster, read_events, wait  # noqa: E402

from broker.amqp.client.errors import ClientError  # noqa: E402
from broker.options import parse_options  # noqa: E402
from ha_agent.settings import AgentSettings  # noqa: E402
from tests.ha.scale_scenario import _declare  # noqa: E402

#: agent events that fence or end a broker instance (each names its pid, but the session
#: fence's, whose kill follows as ``broker_killed``)
FENCES = ("agent_fenced", "zookeeper_session_fence", "broker_killed", "broker_process_exited")
#: the broker's timings the JSON records (each at its built-in default)
BROKER_TIMINGS = (
    "ha_member_lease",
    "ha_clock_drift",
    "ha_backup_timeout",
    "link_heartbeat_interval",
    "link_maintenance_interval",
)
#: a fence this long after a fault, of the broker the fault hit, is the fault's
FAULT_WINDOW = 30.0


def _ts(event: dict[str, Any]) -> float:
    try:
        return datetime.fromisoformat(str(event["ts"])).timestamp()
    except (KeyError, ValueError):
        return 0.0


def _node_of(event: dict[str, Any], agent_node: str) -> str:
    return str(event.get("broker_node") or event.get("target") or agent_node)


def ended_instances(
    agent: str, events: list[dict[str, Any]], faults: list[tuple[float, str, str]]
) -> list[dict[str, Any]]:
    """One entry per broker instance ``agent``'s log shows ending: an agent's fence logs
    ``agent_fenced`` (pid), then ``broker_killed`` (pid) and the supervisor's
    ``broker_process_exited`` (pid, code -9): one fence, counted once (it was counted three
    times, and a fault's exit once). The entry keeps the first event and its reason, the
    events seen, and the exit code. A ``zookeeper_session_fence`` names no pid: the kill that
    follows it does (none when the broker served on its members' grants: nothing ended). A
    broker that fenced itself (its lease ran out) shows as an exit with code 3 alone."""
    by_pid: dict[object, dict[str, Any]] = {}
    for event in events:
        name = event.get("event")
        if name not in FENCES:
            continue
        at = _ts(event)
        pid = event.get("pid")
        key: object = pid if pid is not None else (name, at)
        entry = by_pid.get(key)
        if entry is None:
            target = _node_of(event, agent)
            entry = by_pid[key] = {
                "agent": agent, "event": name, "at": at, "node": target, "pid": event.get("pid"),
                "after_a_fault": any(
                    0 <= at - when <= FAULT_WINDOW and hit == target for when, _w, hit in faults
                ),
                "reason": event.get("reason"), "events": [], "code": None,
            }  # fmt: skip
        entry["events"].append(name)
        if name == "broker_process_exited":
            entry["code"] = event.get("code")
    # a session fence's kill is an entry of its own (``broker_killed``, "fenced: ZooKeeper
    # ..."); one that killed nothing ended nothing (the broker served on its grants)
    ended = [e for e in by_pid.values() if e["event"] != "zookeeper_session_fence"]
    return ended


def restarted_to_join(ended: dict[str, Any]) -> bool:
    """The agent restarted its backup to join (issue 25, item 3): no fence."""
    return str(ended.get("reason") or "").startswith("restart to join")


def healthy_fenced(ended: dict[str, Any]) -> bool:
    """An instance that ended neither by a fault nor by a restart to join."""
    return not ended["after_a_fault"] and not restarted_to_join(ended)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queues", type=int, default=10_000)
    parser.add_argument("--duration", type=float, default=900.0, help="seconds of load")
    parser.add_argument("--rate", type=float, default=20.0, help="messages per second")
    parser.add_argument(
        "--session-timeout",
        type=float,
        default=None,
        help="the agents' --session-timeout (default: the agent's built-in default)",
    )
    parser.add_argument("--work-dir", type=Path, default=None)
    args = parser.parse_args()
    workdir = args.work_dir or Path(tempfile.mkdtemp(prefix="qpidd-scale-soak-"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"logs in {workdir}", flush=True)
    cluster = LocalCluster(workdir, session_timeout=args.session_timeout)
    drill: subprocess.Popen[bytes] | None = None
    samples: list[tuple[float, str | None, float]] = []  # (wall time, primary, load1)
    faults: list[tuple[float, str, str]] = []  # (wall time, what, node)
    declared_s = 0.0
    declare_failures: list[tuple[float, str, str]] = []
    try:
        cluster.start()
        wait("a settled cluster", cluster.settled, 180)
        began = time.monotonic()
        while True:  # declares are idempotent: again on whichever primary serves, if one fails
            wait("a primary", cluster.primary, 300)
            primary = cluster.primary()
            assert primary is not None
            try:
                asyncio.run(_declare(cluster.ports[primary], args.queues, {}))
                break
            except (OSError, ConnectionError, ClientError) as exc:
                declare_failures.append((time.time(), primary, str(exc)))
                print(f"declare on {primary} failed: {exc}; again", flush=True)
        declared_s = time.monotonic() - began
        print(f"declared {args.queues} queues on {primary} in {declared_s:.1f} s", flush=True)
        wait("the backups' copies", cluster.settled, 600)
        url = "amqp:guest/guest@" + ",".join(f"127.0.0.1:{cluster.ports[n]}" for n in NODES)
        drill = subprocess.Popen(
            [
                str(BIN / "qpid-ha"), "drill", f"--url={url}", f"--rate={args.rate:g}",
                f"--duration={args.duration:g}", f"--log-file={workdir / 'drill.log'}",
                "--gap-threshold=500ms",
            ],
            stdout=subprocess.DEVNULL,
            stderr=open(workdir / "drill.err", "wb"),  # noqa: SIM115 - closed with the process
        )  # fmt: skip
        began = time.monotonic()
        plan = [(args.duration / 3, "SIGKILL primary"), (2 * args.duration / 3, "SIGTERM backup")]
        while drill.poll() is None:
            now = time.monotonic() - began
            current = cluster.primary()
            samples.append((time.time(), current, os.getloadavg()[0]))
            if plan and now >= plan[0][0] and current is not None:
                _at, what = plan.pop(0)
                if what.endswith("primary"):
                    node = current
                else:
                    hit = {n for _w, _what, n in faults}  # a backup the faults spared
                    node = next((n for n in NODES if n != current and n not in hit), None) or next(
                        n for n in NODES if n != current
                    )
                pid = cluster.broker_pid(node)
                os.kill(pid, signal.SIGKILL if what.startswith("SIGKILL") else signal.SIGTERM)
                faults.append((time.time(), what, node))
                print(f"{now:7.1f} s: {what} ({node}, pid {pid})", flush=True)
            time.sleep(1.0)  # a sampling period, not a synchronisation
    finally:
        if drill is not None and drill.poll() is None:
            drill.send_signal(signal.SIGINT)
            try:
                drill.wait(60)
            except subprocess.TimeoutExpired:
                drill.kill()
                drill.wait()
        cluster.stop()
    result = summarise(workdir, samples, faults, args, declared_s)
    result["declare_failures"] = declare_failures
    (workdir / "scale-soak.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "fences"}, indent=1))
    return 0


def settings(session_timeout: float | None) -> dict[str, Any]:
    """The timings the run used: the agents' (their built-in defaults, but a given session
    timeout) and the brokers' (built-in defaults: ``LocalCluster`` gives none)."""
    agent = AgentSettings("zk", "c", "n", "b")
    broker = parse_options([])
    given = session_timeout is not None
    return {
        "agent": {
            "session_timeout": session_timeout if given else agent.session_timeout,
            "session_timeout_given": given,
            "check_interval": agent.check_interval,
            "broker_timeout": agent.broker_timeout,
            "watchdog_timeout": agent.watchdog_timeout,
        },
        "broker": {name: getattr(broker, name) for name in BROKER_TIMINGS},
    }


def summarise(
    workdir: Path,
    samples: list[tuple[float, str | None, float]],
    faults: list[tuple[float, str, str]],
    args: argparse.Namespace,
    declared_s: float,
) -> dict[str, Any]:
    fences = []
    for node in NODES:
        fences += ended_instances(node, read_events(workdir / f"{node}.agent.log"), faults)
    without = longest = 0.0
    run = 0.0
    for (t0, p0, _l0), (t1, _p1, _l1) in itertools.pairwise(samples):
        if p0 is None:
            without += t1 - t0
            run += t1 - t0
            longest = max(longest, run)
        else:
            run = 0.0
    loads = sorted(load for _t, _p, load in samples)
    steps: dict[str, Any] = {}
    for node in NODES:
        events = read_events(workdir / f"{node}.broker.log")
        long_steps = [e for e in events if e.get("event") == "loop_step_long"]
        lags = [e for e in events if e.get("event") == "loop_lag"]
        steps[node] = {
            "long_steps": len(long_steps),
            "long_steps_ms": [e.get("cpu_ms") for e in long_steps],
            "long_steps_where": [e.get("where") for e in long_steps][:10],
            "step_max_ms": max((float(e.get("step_max_ms", 0)) for e in lags), default=0.0),
            "gc_max_ms": max((float(e.get("gc_max_ms", 0)) for e in lags), default=0.0),
            "gc_frozen": sum(1 for e in events if e.get("event") == "gc_frozen"),
        }
    drill_events = read_events(workdir / "drill.log")
    finished = [e for e in drill_events if e.get("event") == "drill_finished"]
    gaps = [
        round(float(e.get("gap_ms") or 0)) for e in drill_events if e.get("event") == "confirm_gap"
    ]
    return {
        "queues": args.queues,
        "declare_s": round(declared_s, 1),
        "duration_s": round(samples[-1][0] - samples[0][0], 1) if samples else 0.0,
        "session_timeout": args.session_timeout,
        "settings": settings(args.session_timeout),
        "load1": {"min": loads[0], "median": loads[len(loads) // 2], "max": loads[-1]}
        if loads
        else None,
        "faults": faults,
        "healthy_fenced": sum(1 for f in fences if healthy_fenced(f)),
        "restarted_to_join": sum(1 for f in fences if restarted_to_join(f)),
        "fences": fences,
        "without_primary_s": round(without, 1),
        "longest_without_primary_s": round(longest, 1),
        "primaries": sorted({p for _t, p, _l in samples if p}),
        "drill": finished[-1] if finished else None,
        "confirm_gaps_over_500ms": gaps,
        "loop": steps,
    }


if __name__ == "__main__":
    sys.exit(main())
