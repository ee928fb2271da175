#!/usr/bin/env python3
"""The scale scenario with agents and faults, loaded (issue 25, "Done when"), not a test.

A cluster of three agents each supervising its broker, on a ZooKeeper ensemble of three,
every timing at its built-in default (issue 26, "One set of settings": the agent's
``--session-timeout``, ``--broker-timeout``, ``--check-interval`` and ``--watchdog-timeout``,
the broker's member lease; ``--session-timeout`` gives the agents another value, as the 2 s
of the first measurements); the settings are in the JSON. The cluster is the demo's
(``deploy/demo.py``, on loopback) or, with ``--netns``, ``qpid-ha drill --nemesis``'s, each
node and ZooKeeper server in a network namespace of its own (root; ``bench/soak_clusters.py``).
``--queues`` durable queues declared on the primary (half bound to a topic exchange, as
``tests/ha/scale_scenario.py``), then issue 25 item 6's clients, each an option so that a
shorter run is possible (``bench/scale_load.py``): ``--backlog`` confirmed messages on each
of ``--backlog-queues`` queues (nobody consumes them: the final primary must hold them
all), ``--connections`` connections on the fail-over list, ``--consumers`` of them with a
consumer, ``--console``: a viewer polling the primary's ``/api/status`` and first page of
queues each second; and ``qpid-ha drill`` (publisher confirms, a consumer, the URL list)
for ``--duration`` seconds. ``--faults`` (default ``kill,restart-backup``), spread evenly
over the run: ``kill`` (SIGKILL of the primary broker, its agent restarts it),
``kill-node`` (the primary's agent and broker SIGKILLed together; the agent started again
once another primary serves), ``partition`` (``--netns`` only: the primary's node cut off
from the other nodes and ZooKeeper by nft in its namespace, clients still reaching it; healed
once another primary serves), ``restart-backup`` (a backup broker SIGTERMed, restarted by
its agent). Every second it notes the primary (as the brokers say it off their event
loops, ``GET /liveness``: :class:`soak_clusters.LivenessReader`; a primary cut off by a
partition counts until it fences itself, so the drill's confirm gaps are the measure of
service; a sample in which no broker said so and one did not answer within 1 s is
``unknown``, not none) and the load average.

At the end, from the logs: fences and exits by the agents (``agent_fenced``,
``zookeeper_session_fence``, ``broker_killed``, ``broker_process_exited``), one entry per
broker instance that ended (its pid: an agent's fence logs ``agent_fenced``, then the kill,
then the supervisor's ``broker_process_exited``, all of one instance), with when it ended
and why (a fence within 30 s after a fault or its heal, of the broker the fault hit, is the
fault's; any other is a healthy broker fenced); each stretch without a primary (one per
primary fault is its fail-over; any other is time without a primary beyond the
fail-overs; its unknown samples count but where the drill's confirms went on, reported
apart as unknown but served: :func:`without_primary`); the drill's confirmed and lost
messages, the backlog held at the end; each broker's loop steps of 100 ms or more
(``loop_step_long``) and the longest step and collection of its ``loop_lag`` windows; the
console's answer times and the connections' losses and reopening. Writes
``scale-soak.json``.

    .venv/bin/python bench/scale_soak.py --queues 10000 --duration 1800 --rate 20
    .venv/bin/python bench/scale_soak.py --netns --queues 10000 --duration 1800 --rate 20 \
        --connections 2000 --consumers 1000 --backlog 50000 --console \
        --faults kill,kill-node,partition,restart-backup
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "deploy"))
sys.path.insert(0, str(ROOT / "bench"))

from demo import BIN, read_events, wait  # noqa: E402
from scale_load import Connections, ConsoleViewer, publish_backlog  # noqa: E402
from soak_clusters import UNKNOWN, LoopbackCluster, NamespaceCluster, SoakCluster  # noqa: E402

from broker.amqp.client.errors import ClientError  # noqa: E402
from broker.amqp.client.handshake import CLIENT_PRODUCT  # noqa: E402
from broker.options import parse_options  # noqa: E402
from ha_agent.settings import AgentSettings  # noqa: E402
from qpid_ha_cli.nemesis.topology import call_in  # noqa: E402
from tests.ha.scale_scenario import _declare  # noqa: E402

T = TypeVar("T")

#: agent events that fence or end a broker instance (each names its pid, but the session
#: fence's, whose kill follows as ``broker_killed``)
FENCES = ("agent_fenced", "zookeeper_session_fence", "broker_killed", "broker_process_exited")
#: the broker's timings the JSON records (each at its built-in default)
BROKER_TIMINGS = (
    "ha_member_lease",
    "ha_member_lease_max",
    "ha_clock_drift",
    "ha_backup_timeout",
    "link_heartbeat_interval",
    "link_maintenance_interval",
)
#: a fence this long after a fault, of the broker the fault hit, is the fault's
FAULT_WINDOW = 30.0
#: the faults that take the primary away: its clients' connections move to the next
PRIMARY_FAULTS = ("kill", "kill-node", "partition")


def _ts(event: dict[str, Any]) -> float:
    try:
        return datetime.fromisoformat(str(event["ts"])).timestamp()
    except (KeyError, ValueError):
        return 0.0


def clients_opened(events: list[dict[str, Any]]) -> list[float]:
    """When a broker opened each connection of the scale clients (``connection_opened``
    with the project's client library's product; the drill's clients are pika, the backups'
    links say so), from its log's events."""
    return [
        _ts(e)
        for e in events
        if e.get("event") == "connection_opened"
        and str(e.get("client", "")).startswith(CLIENT_PRODUCT)
    ]


def clients_reopened(
    opened: list[float], faults: list[tuple[float, str, str]], clients: int
) -> list[float | None]:
    """After each fault that takes the primary away, the seconds until ``clients``
    connections of the scale clients had been opened again (``opened``: the times of every
    broker's ``connection_opened`` of theirs), counted before the next such fault; None: not
    so many before it. The brokers' view: the clients' own watcher
    (``scale_load.Connections``) missed them in soak48."""
    times = sorted(opened)
    starts = sorted(at for at, name, _node in faults if name in PRIMARY_FAULTS)
    found: list[float | None] = []
    for i, at in enumerate(starts):
        until = starts[i + 1] if i + 1 < len(starts) else float("inf")
        window = [t for t in times if at < t <= until]
        found.append(round(window[clients - 1] - at, 1) if 0 < clients <= len(window) else None)
    return found


def _node_of(event: dict[str, Any], agent_node: str) -> str:
    return str(event.get("broker_node") or event.get("target") or agent_node)


def ended_instances(
    agent: str,
    events: list[dict[str, Any]],
    faults: list[tuple[float, str, str]],
    run_end: float | None = None,
) -> list[dict[str, Any]]:
    """One entry per broker instance ``agent``'s log shows ending: an agent's fence logs
    ``agent_fenced`` (pid), then ``broker_killed`` (pid) and the supervisor's
    ``broker_process_exited`` (pid, code -9): one fence, counted once (it was counted three
    times, and a fault's exit once). The entry keeps the first event and its reason, the
    events seen, and the exit code. A ``zookeeper_session_fence`` names no pid: the kill that
    follows it does (none when the broker served on its members' grants: nothing ended). A
    broker that fenced itself (its lease ran out) shows as an exit with code 3 alone. An
    instance that ended after ``run_end`` (the last sample: the harness then stops the agents,
    and an agent stopped during a promotion fences it, as it should) is ``after_the_run``."""
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
                "after_the_run": run_end is not None and at > run_end,
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
    """An instance that ended during the run neither by a fault nor by a restart to join."""
    return (
        not ended["after_a_fault"]
        and not ended.get("after_the_run", False)
        and not restarted_to_join(ended)
    )


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


#: the faults ``--faults`` may name, each at its time (spread evenly over the run)
FAULTS = {
    "kill": "SIGKILL of the primary broker (its agent restarts it as a backup)",
    "kill-node": "the primary's node lost: its agent and broker SIGKILLed together; the agent"
    " is started again once another primary serves (or after 120 s)",
    "partition": "the primary's node cut off from the other nodes and ZooKeeper (nft in its"
    " namespace; --netns), clients still reaching it; healed once another primary serves"
    " (or after 120 s)",
    "restart-backup": "a backup broker SIGTERMed (its agent restarts it)",
}
#: faults that take the primary away (a fail-over follows)
PRIMARY_FAULTS = ("kill", "kill-node", "partition")
#: the longest a kill-node or partition stays before it is healed anyway
HEAL_AFTER = 120.0


def fault_names(text: str) -> list[str]:
    """``kill,partition`` as names (an empty text: none). :raises ValueError: unknown."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in FAULTS]
    if unknown:
        raise ValueError(f"unknown faults {unknown}: expected some of {', '.join(FAULTS)}")
    return names


def fault_plan(names: list[str], duration: float) -> list[tuple[float, str]]:
    """Each fault's second of the run: evenly spread, the first at ``duration / (n + 1)``."""
    return [(duration * (k + 1) / (len(names) + 1), name) for k, name in enumerate(names)]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
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
    parser.add_argument(
        "--connections", type=int, default=0, help="client connections beside the drill's"
    )
    parser.add_argument(
        "--consumers", type=int, default=0, help="consumers, one on each of that many of them"
    )
    parser.add_argument(
        "--backlog", type=int, default=0, help="messages on each backlog queue (none by default)"
    )
    parser.add_argument("--backlog-queues", type=int, default=10)
    parser.add_argument(
        "--console", action="store_true", help="a console viewer polling the primary each second"
    )
    parser.add_argument(
        "--faults",
        default="kill,restart-backup",
        help=f"in order, spread evenly over the run: {', '.join(FAULTS)}",
    )
    parser.add_argument(
        "--netns",
        action="store_true",
        help="the nemesis drill's cluster in network namespaces (root; a partition needs it)",
    )
    parser.add_argument("--work-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    try:
        args.fault_names = fault_names(args.faults)
    except ValueError as exc:
        parser.error(str(exc))
    if "partition" in args.fault_names and not args.netns:
        parser.error("a partition needs --netns (on loopback no rule cuts one node off)")
    if args.consumers > args.connections:
        parser.error("--consumers is at most --connections (one consumer a connection)")
    return args


def backlog_queues(args: argparse.Namespace) -> dict[str, int]:
    """The backlog: ``--backlog`` messages on each of q1.. (nobody consumes them)."""
    if not args.backlog:
        return {}
    return {f"q{i}": args.backlog for i in range(1, args.backlog_queues + 1)}


def consumer_queue(args: argparse.Namespace) -> Any:
    """Connection ``i``'s queue: q100, q101... (past the backlog's), wrapping round."""
    first = max(100, args.backlog_queues + 1)
    span = max(1, args.queues - first)
    return lambda i: f"q{first + i % span}"


def make_cluster(args: argparse.Namespace, workdir: Path) -> SoakCluster:
    broker_args = (f"--max-connections={max(500, 2 * args.connections + 100)}",)
    if args.netns:
        timings = settings(args.session_timeout)
        return NamespaceCluster(
            workdir,
            timings["agent"]["session_timeout"],
            timings["broker"]["link_heartbeat_interval"],
            broker_args,
        )
    return LoopbackCluster(workdir, args.session_timeout, broker_args)


def in_client_namespace(cluster: SoakCluster, work: Callable[[], T]) -> T:
    if cluster.client_namespace is None:
        return work()
    return call_in(cluster.client_namespace, work)


def main() -> int:
    args = parse_args()
    workdir = args.work_dir or Path(tempfile.mkdtemp(prefix="qpidd-scale-soak-"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"logs in {workdir}", flush=True)
    cluster = make_cluster(args, workdir)
    drill: subprocess.Popen[bytes] | None = None
    connections: Connections | None = None
    viewer: ConsoleViewer | None = None
    samples: list[tuple[float, str | None, float]] = []  # (wall time, primary, load1)
    faults: list[tuple[float, str, str]] = []  # (wall time, what, node)
    extra: dict[str, Any] = {"declare_failures": []}
    declared_s = 0.0
    try:
        cluster.start()
        wait("a settled cluster", cluster.settled, 180)
        began = time.monotonic()
        while True:  # declares are idempotent: again on whichever primary serves, if one fails
            wait("a primary", cluster.primary, 300)
            primary = cluster.primary()
            assert primary is not None
            host, port = cluster.address(primary)
            try:
                declare = _declare(port, args.queues, {}, host)
                in_client_namespace(cluster, partial(asyncio.run, declare))
                break
            except (OSError, ConnectionError, ClientError) as exc:
                extra["declare_failures"].append((time.time(), primary, str(exc)))
                print(f"declare on {primary} failed: {exc}; again", flush=True)
        declared_s = time.monotonic() - began
        print(f"declared {args.queues} queues on {primary} in {declared_s:.1f} s", flush=True)
        backlog = backlog_queues(args)
        if backlog:
            began = time.monotonic()
            try:
                publish = publish_backlog(host, port, backlog)
                extra["backlog_confirmed"] = in_client_namespace(
                    cluster, partial(asyncio.run, publish)
                )
            except (OSError, ConnectionError, ClientError) as exc:
                extra["backlog_failure"] = str(exc)
            extra["backlog_s"] = round(time.monotonic() - began, 1)
            print(f"backlog {extra.get('backlog_confirmed')} in {extra['backlog_s']} s", flush=True)
        wait("the backups' copies", cluster.settled, 900)
        addresses = [cluster.address(n) for n in cluster.nodes]
        if args.connections:
            began = time.monotonic()
            connections = Connections(
                addresses,
                args.connections,
                args.consumers,
                consumer_queue(args),
                cluster.client_namespace,
            ).start(timeout=600)
            extra["connections_open_s"] = round(time.monotonic() - began, 1)
            print(f"{args.connections} connections open in {extra['connections_open_s']} s")
        if args.console:
            viewer = ConsoleViewer(cluster.primary, cluster.get).start()
        url = "amqp:guest/guest@" + ",".join(f"{h}:{p}" for h, p in addresses)
        drill = subprocess.Popen(
            cluster.client_argv([
                str(BIN / "qpid-ha"), "drill", f"--url={url}", f"--rate={args.rate:g}",
                f"--duration={args.duration:g}", f"--log-file={workdir / 'drill.log'}",
                "--gap-threshold=500ms",
            ]),
            stdout=subprocess.DEVNULL,
            stderr=open(workdir / "drill.err", "wb"),  # noqa: SIM115 - closed with the process
        )  # fmt: skip
        run_faults(cluster, drill, fault_plan(args.fault_names, args.duration), samples, faults)
    finally:
        if drill is not None and drill.poll() is None:
            drill.send_signal(signal.SIGINT)
            try:
                drill.wait(60)
            except subprocess.TimeoutExpired:
                drill.kill()
                drill.wait()
        if viewer is not None:
            extra["console"] = viewer.stop()
        if connections is not None:
            extra["connections"] = asdict(connections.stop())
        with contextlib.suppress(Exception):
            extra["backlog_held"] = backlog_held(cluster, backlog_queues(args))
        cluster.stop()
    result = summarise(workdir, cluster, samples, faults, args, declared_s)
    result.update(extra)
    (workdir / "scale-soak.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k not in ("fences", "samples")}, indent=1))
    return 0


def run_faults(
    cluster: SoakCluster,
    drill: subprocess.Popen[bytes],
    plan: list[tuple[float, str]],
    samples: list[tuple[float, str | None, float]],
    faults: list[tuple[float, str, str]],
) -> None:
    """Until the drill ends: every second the primary and the load average; each fault of
    ``plan`` at its time (once a primary serves), and its heal when it has one."""
    began = time.monotonic()
    heals: list[tuple[float, str, str]] = []  # (monotonic deadline, fault, node)
    while drill.poll() is None:
        now = time.monotonic() - began
        said = cluster.sample()
        samples.append((time.time(), said, os.getloadavg()[0]))
        current = None if said == UNKNOWN else said
        for heal in list(heals):
            deadline, what, node = heal
            if (current is not None and current != node) or time.monotonic() >= deadline:
                heals.remove(heal)
                if what == "kill-node":
                    cluster.restart_agent(node)
                else:
                    cluster.heal(node)
                faults.append((time.time(), f"heal {what}", node))
                print(f"{now:7.1f} s: heal {what} ({node})", flush=True)
        if plan and now >= plan[0][0] and current is not None and not heals:
            what = plan[0][1]
            node = current if what in PRIMARY_FAULTS else spared_backup(cluster, current, faults)
            pid = cluster.broker_pid(node)
            if pid is None:  # not answering this second: the next
                time.sleep(1.0)
                continue
            plan.pop(0)
            if what == "kill":
                cluster.signal_broker(node, signal.SIGKILL, pid)
            elif what == "restart-backup":
                cluster.signal_broker(node, signal.SIGTERM, pid)
            elif what == "kill-node":
                cluster.kill_node(node)
            elif what == "partition":
                cluster.partition(node)
            if what in ("kill-node", "partition"):
                heals.append((time.monotonic() + HEAL_AFTER, what, node))
            faults.append((time.time(), what, node))
            print(f"{now:7.1f} s: {what} ({node}, pid {pid})", flush=True)
        time.sleep(1.0)  # a sampling period, not a synchronisation
    for _deadline, what, node in heals:  # the run ended before the heal
        cluster.restart_agent(node) if what == "kill-node" else cluster.heal(node)
        faults.append((time.time(), f"heal {what}", node))


def spared_backup(cluster: SoakCluster, primary: str, faults: list[tuple[float, str, str]]) -> str:
    """A backup no fault hit yet, else any backup."""
    hit = {n for _w, _what, n in faults}
    backups = [n for n in cluster.nodes if n != primary]
    return next((n for n in backups if n not in hit), backups[0])


def backlog_held(cluster: SoakCluster, backlog: dict[str, int]) -> dict[str, int]:
    """How many messages the primary holds on each backlog queue at the end."""
    primary = cluster.primary()
    if primary is None or not backlog:
        return {}
    return {
        queue: int(json.loads(cluster.get(primary, f"/api/queues/{queue}", 30)).get("messages", -1))
        for queue in backlog
    }


def failovers(
    samples: list[tuple[float, str | None, float]], faults: list[tuple[float, str, str]]
) -> list[dict[str, Any]]:
    """Each fault that took the primary away, and the seconds until another primary served
    (the first sample with a primary other than the node hit); None: none did."""
    found = []
    for at, what, node in faults:
        if what not in PRIMARY_FAULTS:
            continue
        after = next((t for t, p, _l in samples if t >= at and _served_by(p) and p != node), None)
        found.append(
            {"fault": what, "node": node, "s": None if after is None else round(after - at, 1)}
        )
    return found


def _served_by(said: str | None) -> bool:
    """A sample that names a primary (not None, not :data:`UNKNOWN`)."""
    return said is not None and said != UNKNOWN


def confirm_gaps(
    drill_events: list[dict[str, Any]],
) -> tuple[list[tuple[float, float]], tuple[float, float] | None]:
    """The drill's confirms as its log says them: each ``confirm_gap`` as (the confirm
    before it, the confirm ending it) (from ``gap_ms`` or ``stall_ms``, the longer), and the
    span from the first to the last confirm the log names (None: it names none). Between
    two gaps the publisher (20 a second) had each confirm within the gap threshold."""
    gaps: list[tuple[float, float]] = []
    named: list[float] = []
    for event in drill_events:
        if event.get("event") != "confirm_gap":
            continue
        end = _ts({"ts": event.get("first_confirm_ts")})
        if not end:
            continue
        length = max(float(event.get("gap_ms") or 0), float(event.get("stall_ms") or 0)) / 1000
        gaps.append((end - length, end))
        named += [end, end - length] if event.get("last_confirm_ts") else [end]
    return gaps, ((min(named), max(named)) if named else None)


def served_s(
    start: float, end: float, gaps: list[tuple[float, float]], span: tuple[float, float] | None
) -> float:
    """How much of ``start``..``end`` the drill's confirms went on: within ``span`` and in
    no gap (:func:`confirm_gaps`). Pure."""
    if span is None:
        return 0.0
    low, high = max(start, span[0]), min(end, span[1])
    served = max(0.0, high - low)
    at = low
    for gap_start, gap_end in sorted(gaps):  # the part of each gap past the last one's
        cut_start, cut_end = max(gap_start, at), min(gap_end, high)
        if cut_end > cut_start:
            served -= cut_end - cut_start
            at = cut_end
    return max(0.0, served)


def without_primary(
    samples: list[tuple[float, str | None, float]],
    faults: list[tuple[float, str, str]],
    gaps: list[tuple[float, float]] | None = None,
    span: tuple[float, float] | None = None,
) -> list[dict[str, Any]]:
    """Each stretch of samples naming no primary: its start, length (``s``), how much of it
    had a node unanswered (``unknown_s``: :data:`UNKNOWN` samples, each until the next
    sample), how much of that the drill's confirms went on (``served_s``: a primary served,
    :func:`served_s`), the rest without a primary (``without_s``: samples that said none,
    and unknown ones the confirms did not cover: a frozen or starved primary confirms
    nothing), and whether it is a fail-over: the first stretch with time without a primary
    after a fault that took the primary away, begun within :data:`FAULT_WINDOW` of it (one
    fail-over per fault; a later stretch is not one). Pure."""
    stretches: list[dict[str, Any]] = []
    stretch: dict[str, Any] | None = None
    for (t0, p0, _l0), (t1, p1, _l1) in itertools.pairwise(samples):
        if _served_by(p0):
            continue
        if stretch is None:
            stretch = {"at": t0, "s": 0.0, "unknown_s": 0.0, "served_s": 0.0}
        stretch["s"] += t1 - t0
        if p0 == UNKNOWN:
            stretch["unknown_s"] += t1 - t0
            stretch["served_s"] += served_s(t0, t1, gaps or [], span)
        if _served_by(p1):
            stretches.append(stretch)
            stretch = None
    if stretch is not None:
        stretches.append(stretch)
    for each in stretches:
        each["without_s"] = round(each["s"] - each["served_s"], 1)
        for key in ("s", "unknown_s", "served_s"):
            each[key] = round(each[key], 1)
        each["failover"] = False
    for at, what, _node in faults:  # each such fault's first stretch, if soon enough
        first = next((s for s in stretches if s["at"] >= at and s["without_s"] > 0), None)
        if what in PRIMARY_FAULTS and first is not None and first["at"] - at <= FAULT_WINDOW:
            first["failover"] = True
    return stretches


def summarise(
    workdir: Path,
    cluster: SoakCluster,
    samples: list[tuple[float, str | None, float]],
    faults: list[tuple[float, str, str]],
    args: argparse.Namespace,
    declared_s: float,
) -> dict[str, Any]:
    fences = []
    run_end = samples[-1][0] if samples else None
    for node in cluster.nodes:
        fences += ended_instances(node, read_events(cluster.agent_log(node)), faults, run_end)
    drill_events = read_events(workdir / "drill.log")
    stretches = without_primary(samples, faults, *confirm_gaps(drill_events))
    loads = sorted(load for _t, _p, load in samples)
    steps: dict[str, Any] = {}
    opened: list[float] = []
    for node in cluster.nodes:
        events = read_events(cluster.broker_log(node))
        opened += clients_opened(events)
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
        "scenario": {
            "cluster": "network namespaces" if args.netns else "loopback",
            "connections": args.connections,
            "consumers": args.consumers,
            "backlog": backlog_queues(args),
            "console": args.console,
            "faults": args.fault_names,
            "rate": args.rate,
        },
        "load1": {"min": loads[0], "median": loads[len(loads) // 2], "max": loads[-1]}
        if loads
        else None,
        "load1_under_10_s": sum(1 for _t, _p, load in samples if load < 10),
        "faults": faults,
        "failovers": failovers(samples, faults),
        "healthy_fenced": sum(1 for f in fences if healthy_fenced(f)),
        "restarted_to_join": sum(1 for f in fences if restarted_to_join(f)),
        "fences": fences,
        "without_primary_s": round(sum(s["without_s"] for s in stretches), 1),
        "longest_without_primary_s": max((s["without_s"] for s in stretches), default=0.0),
        "without_primary_outside_failovers_s": round(
            sum(s["without_s"] for s in stretches if not s["failover"]), 1
        ),
        "unknown_s": round(sum(s["unknown_s"] for s in stretches), 1),
        "unknown_but_served_s": round(sum(s["served_s"] for s in stretches), 1),
        "without_primary": stretches,
        "primaries": sorted({p for _t, p, _l in samples if p and _served_by(p)}),
        "drill": finished[-1] if finished else None,
        "confirm_gaps_over_500ms": gaps,
        "loop": steps,
        "clients_reopened_s": clients_reopened(opened, faults, args.connections)
        if args.connections
        else [],
        "samples": [[round(t, 1), p, round(load, 2)] for t, p, load in samples],
    }


if __name__ == "__main__":
    sys.exit(main())
