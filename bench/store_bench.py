#!/usr/bin/env python3
"""Persistent confirmed throughput: qpidd's message store against RabbitMQ's (issue 11).

For each P in --pairs and each of --repeat rounds, bench/throughput_run.py's ``run_once``
runs against every target in turn, the order rotated every round, so that all of them see
the same machine conditions: P producer and P consumer processes (pika 1.4.4, the same
client for every broker), one durable queue per pair, 1 KiB persistent messages
(delivery_mode 2) with publisher confirms and at most --window unconfirmed per producer,
prefetch --prefetch with manual acks, every message checked received exactly once. A
confirm of a persistent message on a durable queue is the broker's promise that the
message is on disk. The targets:

- ``qpidd-fsync``: qpidd --data-dir D --store-sync fsync (the default): confirmed once the
  group write covering the message is fdatasync'ed;
- ``qpidd-write``: --store-sync write: confirmed once the OS has the bytes;
- ``rabbitmq-classic``: RabbitMQ 3.10.8 (bench/rabbitmq.sh, default configuration),
  durable classic queues;
- ``rabbitmq-quorum``: the same node, quorum queues (``x-queue-type: quorum``, one node);
- ``base-fsync`` (with ``--baseline DIR``): qpidd-fsync run from another build's source tree
  (``PYTHONPATH=DIR``, e.g. a ``git worktree`` of main), for an A/B of two builds in the
  same run, alternating with the others.

Printed: one row per run (with the 1-minute load average when it started), then per P the
medians and the ratios qpidd-fsync / rabbitmq-classic, qpidd-fsync / rabbitmq-quorum and
qpidd-write / qpidd-fsync. Exits 1 if any run lost, duplicated or nacked a message. If
RabbitMQ cannot be started, says why and measures qpidd alone. Every broker is stopped by
PID and its data removed at the end, also on ctrl-C.

    .venv/bin/python bench/store_bench.py --pairs 1,4,16,64 --repeat 3      # make bench-store
    .venv/bin/python bench/store_bench.py --targets qpidd-fsync,qpidd-write --pairs 1
    git worktree add --detach /tmp/wt-main main   # then (the C walker: build_ext --inplace)
    .venv/bin/python bench/store_bench.py --baseline /tmp/wt-main --targets qpidd-fsync --pairs 1
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.append(str(HERE.parent))  # after PYTHONPATH: a worktree given there wins

from ha_brokers import Brokers  # noqa: E402
from throughput import add_common_args, check_args, messages_for, term_to_exit  # noqa: E402
from throughput_results import HEAD, RunResult, as_json, interpreter, other_pct, row  # noqa: E402
from throughput_run import run_once  # noqa: E402

RABBITMQ_PORT = 5680
TARGETS = ("qpidd-fsync", "qpidd-write", "rabbitmq-classic", "rabbitmq-quorum")
#: (numerator, denominator) of the ratios reported, when both were measured.
RATIOS = (
    ("qpidd-fsync", "rabbitmq-classic"),
    ("qpidd-fsync", "rabbitmq-quorum"),
    ("qpidd-write", "qpidd-fsync"),
    ("qpidd-fsync", "base-fsync"),
    ("base-fsync", "rabbitmq-classic"),
    ("base-fsync", "rabbitmq-quorum"),
)


@dataclass(frozen=True)
class Target:
    name: str
    url: str
    queue_arguments: dict[str, Any] | None = None


@dataclass
class Runs:
    """Every run of one target at one P, with the load average when each started."""

    results: list[RunResult] = field(default_factory=list)
    loads: list[float] = field(default_factory=list)

    def median(self, attr: str) -> float:
        return float(statistics.median(getattr(r, attr) for r in self.results))

    def median_other(self) -> float | None:
        known = [v for v in (other_pct(r) for r in self.results) if v is not None]
        return statistics.median(known) if known else None


@contextmanager
def rabbitmq(port: int) -> Iterator[str | None]:
    """A throwaway RabbitMQ (bench/rabbitmq.sh); yields its URL, or None (and says why on
    stderr) when it cannot be started."""
    script = str(HERE / "rabbitmq.sh")
    started = subprocess.run(
        [script, "start", str(port)], capture_output=True, text=True, check=False
    )
    if started.returncode != 0:
        why = (started.stderr or started.stdout).strip().splitlines()[-5:]
        print("RabbitMQ could not be started, measuring qpidd alone:", file=sys.stderr)
        for line in why:
            print(f"    {line}", file=sys.stderr)
        subprocess.run([script, "stop", str(port)], capture_output=True, check=False)
        yield None
        return
    print(started.stderr.strip(), file=sys.stderr)
    try:
        yield f"amqp://guest:guest@127.0.0.1:{port}/%2F"
    finally:
        subprocess.run([script, "stop", str(port)], check=False)


def parse_targets(text: str) -> list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in names if t not in TARGETS]
    if bad or not names:
        raise argparse.ArgumentTypeError(
            f"unknown target {', '.join(bad) or '(none)'}; choose from {', '.join(TARGETS)}"
        )
    return names


def _ratio(runs: dict[str, Runs], a: str, b: str) -> str | None:
    if a not in runs or b not in runs:
        return None
    ra, rb = runs[a].median("msgs_per_s"), runs[b].median("msgs_per_s")
    return f"{a}/{b} = {ra / rb:.2f}" if rb > 0 else f"{a}/{b} = n/a"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "--targets",
        type=parse_targets,
        default=list(TARGETS),
        help=f"comma list of {', '.join(TARGETS)} (default: all)",
    )
    ap.add_argument("--rabbitmq-port", type=int, default=RABBITMQ_PORT)
    ap.add_argument("--keep", action="store_true", help="keep qpidd's directories (debugging)")
    ap.add_argument(
        "--baseline",
        type=Path,
        help="another build's source tree: adds target base-fsync (qpidd-fsync from there)",
    )
    add_common_args(ap)
    ap.set_defaults(pairs=[1, 4, 16, 64], repeat=3, queue_prefix="store-bench")
    args = ap.parse_args(argv)
    check_args(ap, args)
    signal.signal(signal.SIGTERM, term_to_exit)
    ok = True
    summary: list[str] = []
    with ExitStack() as stack:
        targets: list[Target] = []
        brokers = stack.enter_context(Brokers(prefix="qpidd-store-bench-", keep=args.keep))
        for name in args.targets:
            if name.startswith("qpidd-"):
                sync = name.removeprefix("qpidd-")
                broker = brokers.standalone(name, [f"--store-sync={sync}"])
                targets.append(Target(name, broker.url))
        if args.baseline is not None:
            base = brokers.standalone(
                "base-fsync",
                ["--store-sync=fsync"],
                env={"PYTHONPATH": str(args.baseline.resolve())},
            )
            targets.append(Target("base-fsync", base.url))
        if any(t.startswith("rabbitmq-") for t in args.targets):
            url = stack.enter_context(rabbitmq(args.rabbitmq_port))
            if url is not None:
                if "rabbitmq-classic" in args.targets:
                    targets.append(Target("rabbitmq-classic", url))
                if "rabbitmq-quorum" in args.targets:
                    targets.append(Target("rabbitmq-quorum", url, {"x-queue-type": "quorum"}))
        print(f"# qpidd runs on {interpreter()}", flush=True)
        print(f"load\t{HEAD}", flush=True)
        for pairs in args.pairs:
            n = messages_for(args, pairs)
            runs: dict[str, Runs] = {t.name: Runs() for t in targets}
            for k in range(args.repeat):
                shift = k % len(targets)
                for target in targets[shift:] + targets[:shift]:
                    load = os.getloadavg()[0]
                    r = run_once(
                        target.url,
                        pairs,
                        n,
                        args.size,
                        args.window,
                        args.prefetch,
                        args.queue_prefix,
                        args.timeout,
                        label=target.name,
                        durable=True,
                        persistent=True,
                        queue_arguments=target.queue_arguments,
                    )
                    ok &= r.ok
                    runs[target.name].results.append(r)
                    runs[target.name].loads.append(load)
                    print(f"{load:4.1f}\t{row(r, str(k + 1))}", flush=True)
                    for e in r.errors:
                        print(f"    error: {e}", file=sys.stderr, flush=True)
                    if args.json:
                        d = json.loads(as_json(r, str(k + 1), args))
                        print(json.dumps({**d, "load1": load}, sort_keys=True), flush=True)
            for name, got in runs.items():
                other = got.median_other()
                summary.append(
                    f"P={pairs:<3} {name:<17} {got.median('msgs_per_s'):8.0f} msg/s"
                    f"  confirm p50 {got.median('confirm_p50_ms'):7.1f} ms"
                    f" p99 {got.median('confirm_p99_ms'):7.1f} ms"
                    f"  broker us/msg {_median_known(got.results)}"
                    f"  load1 {min(got.loads):.1f}-{max(got.loads):.1f}"
                    f"  other% {'-' if other is None else f'{other:.0f}'}"
                )
            ratios = [x for x in (_ratio(runs, a, b) for a, b in RATIOS) if x]
            if ratios:
                summary.append(f"P={pairs:<3} " + "; ".join(ratios))
            summary.append("")
    print(f"\nmedians of {args.repeat} rotating rounds, {args.size} B persistent messages:")
    for line in summary:
        print(line)
    return 0 if ok else 1


def _median_known(results: Sequence[RunResult]) -> str:
    known = [r.broker_us_per_msg for r in results if r.broker_us_per_msg is not None]
    return f"{statistics.median(known):.0f}" if known else "-"


if __name__ == "__main__":
    sys.exit(main())
