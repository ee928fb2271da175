#!/usr/bin/env python3
"""HA against HA: qpidd primary + 2 backups against RabbitMQ 3.10.8's mirrored and quorum
queues on 3 nodes (issue 32, item 5: ">= 3x mirrored and quorum at P = 1 and 4").

Three targets, all on this machine, started once and kept for the whole benchmark:

- ``qpidd``: a primary and two backups, started as bench/ha_compare.py starts its
  ``primary+2`` (``--ha-cluster=yes --ha-replicate=all``, each with its own store, fsync);
- ``mirrored``: a RabbitMQ cluster of 3 nodes (``bench/rabbitmq.sh cluster-start``), classic
  queues mirrored to all nodes by a policy ``{"ha-mode": "all", "ha-sync-mode": "automatic"}``
  set with rabbitmqctl on the queues named ``havs-mirrored-*``;
- ``quorum``: the same cluster, quorum queues (``x-queue-type: quorum``, 3 members).

The clients dial qpidd's primary and RabbitMQ's node 1; a queue declared there has its
mirrored master or quorum leader there (checked once at the start on a probe queue of
each kind, with its two mirrors synchronised or its three members online).

The same client for all (bench/throughput.py's ``run_once``, ``--client pika`` by default
or ``lean``: bench/lean_clients.py's hand-built 0-9-1 pair): P producer and P consumer
processes, one queue per pair, 1 KiB messages, publisher confirms with at most --window
unconfirmed, prefetch --prefetch with multiple acks, every message checked received exactly
once. **Durable queues and persistent messages (delivery_mode 2) on all three**: mirrored and
quorum queues are durable, a quorum queue persists every message whatever its delivery mode,
and a transient message would let qpidd confirm without its disk. What a confirm means:

- qpidd: the primary's fsync covering the message is done and every backup of the in-sync
  set has acknowledged the batch holding it, applied and on its own disk (fsync): on disk on
  all three brokers (docs/ha-design.md, "What each answer waits for");
- mirrored: all the queue's mirrors have accepted the message and, persistent on a durable
  queue, it is persisted to disk (RabbitMQ's "Consumer Acknowledgements and Publisher
  Confirms": accepted by all mirrors, persisted by the master);
- quorum: a majority of the members (the leader and one of two followers) have the message
  in their Raft log, fsync'ed: on disk on two of the three.

Before every qpidd run the primary must report both backups ready (a confirm then waits for
both); before every RabbitMQ run its three nodes must be running. For each P in --pairs and
each of --repeat rounds every target runs once, the order rotated every round. Printed:
every run (throughput.py's row after a line with the 1-minute load average), then per P the
medians: msgs/s, confirm p50/p99, the brokers' CPU per message with all three nodes counted
on each side (and the two non-leader nodes' share), ``other%`` (the CPU other processes used
meanwhile, in % of one core: compare only runs where it is low), and the ratios
qpidd/mirrored and qpidd/quorum of throughput (target >= 3) and of CPU per message. Exits 1
if any run lost, duplicated, nacked or left a message or failed, or a target could not be
started. Every qpidd is stopped by PID and RabbitMQ's nodes by their PIDs (rabbitmq.sh
cluster-stop) at the end, also on ctrl-C or SIGTERM.

    .venv/bin/python bench/ha_vs_rabbitmq.py                      # P = 1,4, 3 rounds, pika
    .venv/bin/python bench/ha_vs_rabbitmq.py --client lean --total-messages 80000
    .venv/bin/python bench/ha_vs_rabbitmq.py --targets qpidd --pairs 1 --repeat 1
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import pika  # noqa: E402
from ha_brokers import BrokerError, Brokers  # noqa: E402
from ha_compare import Deployment  # noqa: E402
from throughput import (  # noqa: E402
    add_client_arg,
    add_common_args,
    check_args,
    messages_for,
    parse_pairs,
    run_reported,
    term_to_exit,
)
from throughput_results import (  # noqa: E402
    RunResult,
    as_json,
    interpreter,
    median_of,
    other_pct,
)

RABBITMQ_SH = HERE / "rabbitmq.sh"
#: Nodes on 5761-5763 (their distribution ports 25761-25763, their epmd on 35761).
RABBITMQ_PORT = 5761
TARGETS = ("qpidd", "mirrored", "quorum")
RABBITMQ_TARGETS = ("mirrored", "quorum")
#: Issue 32, item 5: qpidd HA at least this many times mirrored's and quorum's throughput.
TARGET_RATIO = 3.0
MIRROR_POLICY = {"ha-mode": "all", "ha-sync-mode": "automatic"}
#: Each target's queue names start with this (the mirroring policy matches only its own).
PREFIX = {"qpidd": "havs-qpidd", "mirrored": "havs-mirrored", "quorum": "havs-quorum"}
QUEUE_ARGUMENTS: dict[str, dict[str, Any] | None] = {
    "qpidd": None,
    "mirrored": None,
    "quorum": {"x-queue-type": "quorum"},
}


class TargetError(Exception):
    """A target could not be started or checked: one line for the report."""


def parse_targets(text: str) -> list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in names if t not in TARGETS]
    if bad or not names or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(
            f"not a comma list of distinct targets among {', '.join(TARGETS)}: {text!r}"
        )
    return names


@dataclass
class Target:
    """One target: where its clients dial, and the PIDs whose CPU is its brokers'."""

    name: str
    url: str
    pid: int  # the node the clients dial (qpidd's primary, RabbitMQ's node 1)
    others: list[int]  # the two other nodes
    #: Raises TargetError if the target is not fit to run (and waits until it is).
    ready: Callable[[], None]


# -- RabbitMQ ----------------------------------------------------------------------------------
def rabbitmq(*args: str, timeout: float = 600) -> str:
    """bench/rabbitmq.sh with ``args``; its stdout, or TargetError with its stderr's tail."""
    try:
        done = subprocess.run(
            [str(RABBITMQ_SH), *args], capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        raise TargetError(f"rabbitmq.sh {' '.join(args)}: no answer in {timeout:g} s") from None
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip()[-400:]
        raise TargetError(f"rabbitmq.sh {' '.join(args)}: {tail}")
    return done.stdout.strip()


def alive(pid: int) -> bool:
    """Running, and not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


@contextmanager
def rabbitmq_cluster(port: int) -> Iterator[list[int]]:
    """Three RabbitMQ nodes on ``port``..``port+2``, joined, with the mirroring policy; yields
    their PIDs (node 1 first). Stopped by PID (rabbitmq.sh cluster-stop) however it ends,
    also when the start itself is interrupted."""
    try:
        print(f"starting a RabbitMQ cluster of 3 on {port}-{port + 2} ...", flush=True)
        rabbitmq("cluster-start", str(port), timeout=900)
        pids = [int(rabbitmq("node-pid", str(port), str(i))) for i in (1, 2, 3)]
        policy = json.dumps(MIRROR_POLICY)
        pattern = f"^{PREFIX['mirrored']}-"
        rabbitmq("cluster-ctl", str(port), "1", "set_policy", "--apply-to", "queues",
                 "havs-mirrored", pattern, policy)  # fmt: skip
        yield pids
    finally:
        old = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second ctrl-C: stop them anyway
        try:
            rabbitmq("cluster-stop", str(port), timeout=120)
        except TargetError as exc:
            print(f"stopping the RabbitMQ cluster: {exc}", file=sys.stderr)
        finally:
            signal.signal(signal.SIGINT, old)


def check_placement(port: int, url: str) -> list[str]:
    """Declare a probe queue of each kind through node 1 and check where it landed: the
    mirrored one's master on node 1 with two synchronised mirrors, the quorum one's leader on
    node 1 with three members online. Returns one line per queue; TargetError if wrong."""
    node1 = f"bench{port}-1@localhost"
    probes = {"mirrored": f"{PREFIX['mirrored']}-probe", "quorum": f"{PREFIX['quorum']}-probe"}
    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        ch = conn.channel()
        for kind, name in probes.items():
            ch.queue_declare(name, durable=True, arguments=QUEUE_ARGUMENTS[kind])
        found = json.loads(
            rabbitmq("cluster-ctl", str(port), "1", "list_queues", "-q", "--formatter", "json",
                     "name", "policy", "synchronised_slave_pids", "members", "online")
        )  # fmt: skip
        homes = rabbitmq(
            "cluster-ctl", str(port), "1", "eval",
            "[{rabbit_misc:rs(amqqueue:get_name(Q)), case amqqueue:get_pid(Q) of "
            "{_, N} -> N; P -> node(P) end} || Q <- rabbit_amqqueue:list()].",
        )  # fmt: skip
        for name in probes.values():
            ch.queue_delete(name)
    finally:
        if conn.is_open:
            conn.close()
    by_name = {q["name"]: q for q in found}
    lines = []
    for kind, name in probes.items():
        q = by_name.get(name)
        home = next((ln for ln in homes.splitlines() if f"'{name}'" in ln), "")
        on_node1 = f"'{node1}'" in home
        if q is None:
            raise TargetError(f"the {kind} probe queue {name} is not listed")
        if kind == "mirrored":
            synced = len(q.get("synchronised_slave_pids") or [])
            ok = on_node1 and q.get("policy") == "havs-mirrored" and synced == 2
            lines.append(f"mirrored: master on node 1 {on_node1}, policy {q.get('policy')!r}, "
                         f"{synced} synchronised mirrors")  # fmt: skip
        else:
            online = len(q.get("online") or [])
            ok = on_node1 and online == 3
            lines.append(f"quorum: leader on node 1 {on_node1}, {online} members online")
        if not ok:
            raise TargetError(f"the {kind} probe queue is not as this benchmark needs: {lines[-1]}")
    return lines


def rabbitmq_ready(pids: Sequence[int]) -> Callable[[], None]:
    def ready() -> None:
        gone = [i + 1 for i, pid in enumerate(pids) if not alive(pid)]
        if gone:
            raise TargetError(f"RabbitMQ node(s) {gone} died")

    return ready


def qpidd_ready(dep: Deployment, timeout: float) -> Callable[[], None]:
    def ready() -> None:
        if not dep.alive():
            raise TargetError(f"a broker of {dep.label} died")
        try:
            dep.wait_ready(timeout)
        except BrokerError as exc:
            raise TargetError(str(exc)) from None

    return ready


# -- the figures -------------------------------------------------------------------------------
@dataclass
class Runs:
    """Every run of one target at one P, with the 1-minute load average when each started."""

    results: list[RunResult] = field(default_factory=list)
    loads: list[float] = field(default_factory=list)

    def median(self, attr: str) -> float | None:
        known = [v for v in (getattr(r, attr) for r in self.results) if v is not None]
        return float(statistics.median(known)) if known else None

    def other(self) -> float | None:
        known = [v for v in (other_pct(r) for r in self.results) if v is not None]
        return statistics.median(known) if known else None


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b and b > 0 else None


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


SUMMARY_HEAD = (
    f"{'P':>3} {'target':<9} {'msgs/s':>8} {'p50 ms':>7} {'p99 ms':>8} {'brk us/m':>8} "
    f"{'2 others':>8} {'other%':>6} {'load1':>9} {'runs':>4} status"
)
# brk us/m: the CPU of all three nodes per message received; 2 others: the part of it spent by
# the two nodes the clients do not dial (qpidd's backups, RabbitMQ's nodes 2 and 3).


def summary(pairs: int, runs: dict[str, Runs]) -> tuple[list[str], list[str], dict[str, Any]]:
    """Per P: the table's rows, the ratio and verdict lines, and the figures for --json."""
    rows = []
    for name, got in runs.items():
        status = "ok" if all(r.ok for r in got.results) else "FAIL"
        loads = f"{min(got.loads):.1f}-{max(got.loads):.1f}" if got.loads else "-"
        rows.append(
            f"{pairs:>3} {name:<9} {_fmt(got.median('msgs_per_s'), '8.0f')} "
            f"{_fmt(got.median('confirm_p50_ms'), '7.1f')} "
            f"{_fmt(got.median('confirm_p99_ms'), '8.1f')} "
            f"{_fmt(got.median('broker_us_per_msg'), '8.1f')} "
            f"{_fmt(got.median('extra_us_per_msg'), '8.1f')} {_fmt(got.other(), '6.0f')} "
            f"{loads:>9} {len(got.results):>4} {status}"
        )
    figures: dict[str, Any] = {}
    lines = []
    if "qpidd" in runs:
        ours = runs["qpidd"]
        for theirs in RABBITMQ_TARGETS:
            if theirs not in runs:
                continue
            rate = ratio(ours.median("msgs_per_s"), runs[theirs].median("msgs_per_s"))
            cpu = ratio(ours.median("broker_us_per_msg"), runs[theirs].median("broker_us_per_msg"))
            figures[f"qpidd/{theirs}"] = rate
            figures[f"cpu qpidd/{theirs}"] = cpu
            verdict = "-" if rate is None else "met" if rate >= TARGET_RATIO else "NOT met"
            lines.append(
                f"P={pairs}: qpidd/{theirs} = {_fmt(rate, '.2f')} msgs/s "
                f"(target >= {TARGET_RATIO:g}: {verdict}), broker CPU per message "
                f"{_fmt(cpu, '.2f')}x"
            )
    return rows, lines, figures


# -- the run -----------------------------------------------------------------------------------
def start_targets(stack: ExitStack, args: argparse.Namespace) -> list[Target]:
    targets: list[Target] = []
    if "qpidd" in args.targets:
        brokers = stack.enter_context(Brokers(prefix="qpidd-ha-vs-rabbitmq-", keep=args.keep))
        print(f"starting qpidd primary + 2 backups in {brokers.root} ...", flush=True)
        try:
            members = brokers.cluster("ha", backups=2)
        except BrokerError as exc:
            raise TargetError(f"qpidd: {exc}") from None
        dep = Deployment("qpidd", members[0], members[1:])
        others = [b.pid for b in members[1:]]
        ready = qpidd_ready(dep, args.ready_timeout)
        targets.append(Target("qpidd", members[0].url, members[0].pid, others, ready))
    if any(t in RABBITMQ_TARGETS for t in args.targets):
        port = args.rabbitmq_port
        pids = stack.enter_context(rabbitmq_cluster(port))
        url = f"amqp://guest:guest@127.0.0.1:{port}/%2F"
        print(f"rabbitmq {rabbitmq('cluster-ctl', str(port), '1', 'version')}: "
              f"node PIDs {pids}", flush=True)  # fmt: skip
        for line in check_placement(port, url):
            print(f"  {line}", flush=True)
        for name in RABBITMQ_TARGETS:
            if name in args.targets:
                targets.append(Target(name, url, pids[0], pids[1:], rabbitmq_ready(pids)))
    return sorted(targets, key=lambda t: args.targets.index(t.name))


def measure(args: argparse.Namespace, targets: list[Target]) -> tuple[bool, list[str]]:
    """Every run; (all ok, the closing report's lines)."""
    ok = True
    rows: list[str] = []
    verdicts: list[str] = []
    for pairs in args.pairs:
        n = messages_for(args, pairs)
        runs = {t.name: Runs() for t in targets}
        for k in range(args.repeat):
            shift = k % len(targets)
            for target in targets[shift:] + targets[:shift]:
                target.ready()
                load = os.getloadavg()[0]
                print(f"# load1 {load:.2f}", flush=True)
                r = run_reported(
                    args,
                    target.url,
                    pairs,
                    n,
                    k + 1,
                    target.name,
                    broker_pid=target.pid,
                    extra_pids=target.others,
                    persistent=True,
                    queue_arguments=QUEUE_ARGUMENTS[target.name],
                    queue_prefix=PREFIX[target.name],
                )
                ok &= r.ok
                runs[target.name].results.append(r)
                runs[target.name].loads.append(load)
        lines, ratios, figures = summary(pairs, runs)
        rows += lines
        verdicts += ratios
        if args.json:
            for got in runs.values():
                d = json.loads(as_json(median_of(got.results), "median", args))
                d.update(client=args.client, load1=got.loads, other_pct=got.other())
                print(json.dumps(d, sort_keys=True), flush=True)
            print(json.dumps({"pairs": pairs, "client": args.client, **figures}), flush=True)
    return ok, [SUMMARY_HEAD, *rows, "", *verdicts]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "--targets",
        type=parse_targets,
        default=list(TARGETS),
        help=f"comma list of {', '.join(TARGETS)} (default: all, in that order)",
    )
    ap.add_argument("--rabbitmq-port", type=int, default=RABBITMQ_PORT,
                    help="RabbitMQ's node 1 (nodes 2 and 3 on the next two ports)")  # fmt: skip
    ap.add_argument("--ready-timeout", type=float, default=120.0, help="seconds for backups")
    ap.add_argument("--keep", action="store_true", help="keep qpidd's directories")
    add_common_args(ap)
    add_client_arg(ap)
    ap.set_defaults(pairs=parse_pairs("1,4"), repeat=3, timeout=300.0)
    args = ap.parse_args(argv)
    check_args(ap, args)
    signal.signal(signal.SIGTERM, term_to_exit)  # unwinds like ctrl-C: every broker stopped

    began = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    try:
        with ExitStack() as stack:
            targets = start_targets(stack, args)
            ok, report = measure(args, targets)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except TargetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(
        f"\nmedians of {args.repeat} rotating rounds ({began}), client {args.client}, "
        f"{args.size} B persistent messages to durable queues, window {args.window}, "
        f"prefetch {args.prefetch}; qpidd on {interpreter()}:"
    )
    for line in report:
        print(line)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
