#!/usr/bin/env python3
"""HA cost: end-to-end confirmed throughput of stand-alone vs primary + 1 and + 2 backups.

Starts, on free loopback ports and in a temporary directory, three deployments side by side
and keeps them running for the whole benchmark:

- ``standalone``: one qpidd with default options;
- ``primary+1``: an HA cluster (``--ha-cluster=yes --ha-replicate=all``) of a primary
  (promoted with epoch 1) and one backup;
- ``primary+2``: the same with two backups.

For each P in --pairs and each of --repeat rounds it runs bench/throughput.py's
``run_once`` (P producer and P consumer processes, publisher confirms, exactly-once check)
against each deployment in turn, rotating the order every round, so that all three see the
same machine conditions. Before every run against a cluster it waits until the primary's
GET /api/ha reports every backup ready: a confirm then waits for every backup (invariant 1).

Printed: every run (throughput.py's row: msgs/s, confirm p50/p99, missing, duplicated, broker
CPU us per message with the backups' CPU counted in, and ``other%``, the CPU used meanwhile
by processes that are neither these brokers nor the benchmark, in % of one core), then per P
the medians with each configuration's throughput in % of stand-alone (ratio of medians), and
whether the target holds: two backups cost at most 40 % (primary+2 >= 60 % of stand-alone).
Exits 1 if any run lost, duplicated, nacked or left a message, or failed. Every broker is
stopped by PID at the end, also on ctrl-C or SIGTERM.

    .venv/bin/python bench/ha_compare.py                        # P = 1,4,16,64, 3 rounds
    .venv/bin/python bench/ha_compare.py --pairs 4 --repeat 5 --json
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ha_brokers import Broker, BrokerError, Brokers, wait_for
from throughput import (
    add_common_args,
    check_args,
    messages_for,
    parse_pairs,
    run_reported,
    term_to_exit,
)
from throughput_results import (
    HEAD,
    RunResult,
    as_json,
    median_known,
    median_of,
    median_value,
    other_pct,
    print_summary,
)

#: Two backups may cost at most 40 % of stand-alone throughput.
TARGET_FRACTION = 0.60
CONFIGS = ("standalone", "primary+1", "primary+2")


@dataclass
class Deployment:
    label: str
    primary: Broker
    backups: list[Broker]

    def wait_ready(self, timeout: float) -> None:
        """Every backup ready as the primary sees it (and the primary still active)."""
        if not self.backups:
            return
        want = len(self.backups)

        def ready() -> bool:
            status = self.primary.ha()
            if status.get("state") != "active":
                raise BrokerError(f"{self.primary.name} is {status.get('state')}, not active")
            return sum(1 for b in status.get("backups", []) if b.get("ready")) >= want

        wait_for(f"{self.label}: {want} ready backup(s)", ready, timeout, 0.05)

    def alive(self) -> bool:
        return all(b.alive() for b in (self.primary, *self.backups))


def start(brokers: Brokers) -> list[Deployment]:
    standalone = brokers.standalone()
    one = brokers.cluster("ha1", backups=1)
    two = brokers.cluster("ha2", backups=2)
    return [
        Deployment("standalone", standalone, []),
        Deployment("primary+1", one[0], one[1:]),
        Deployment("primary+2", two[0], two[1:]),
    ]


def _other(runs: Sequence[RunResult]) -> str:
    known = [v for v in (other_pct(r) for r in runs) if v is not None]
    return f"{statistics.median(known):.0f}" if known else "-"


SUMMARY_HEAD = (
    f"{'P':>3} {'config':<10} {'msgs/s':>9} {'of s-a':>7} {'p50 ms':>8} {'p99 ms':>8} "
    f"{'brk us/m':>8} {'other%':>6} {'runs':>4} status"
)


def summary_rows(
    pairs: int, results: dict[str, list[RunResult]]
) -> tuple[list[str], dict[str, dict[str, float]]]:
    base = median_value(results["standalone"], "msgs_per_s")
    lines = []
    figures: dict[str, dict[str, float]] = {}
    for label in CONFIGS:
        runs = results[label]
        rate = median_value(runs, "msgs_per_s")
        share = rate / base if base > 0 else float("nan")
        ok = all(r.ok for r in runs)
        lines.append(
            f"{pairs:>3} {label:<10} {rate:>9.0f} {share * 100:>6.0f}% "
            f"{median_value(runs, 'confirm_p50_ms'):>8.2f} "
            f"{median_value(runs, 'confirm_p99_ms'):>8.2f} "
            f"{median_known(runs, 'broker_us_per_msg', 1):>8} {_other(runs):>6} {len(runs):>4} "
            f"{'ok' if ok else 'FAIL'}"
        )
        figures[label] = {"msgs_per_s": rate, "of_standalone": share}
    return lines, figures


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    add_common_args(ap)
    ap.set_defaults(pairs=parse_pairs("1,4,16,64"), repeat=3, timeout=300.0, queue_prefix="ha")
    ap.add_argument("--ready-timeout", type=float, default=120.0, help="seconds for backups")
    ap.add_argument("--keep", action="store_true", help="keep the brokers' directories")
    args = ap.parse_args(argv)
    check_args(ap, args)
    signal.signal(signal.SIGTERM, term_to_exit)  # unwinds like ctrl-C: brokers stopped

    ok = True
    summary: list[str] = []
    verdicts: list[str] = []
    medians: list[RunResult] = []
    try:
        with Brokers(prefix="qpidd-ha-compare-", keep=args.keep) as brokers:
            print(f"starting brokers in {brokers.root} ...", flush=True)
            deployments = start(brokers)
            print(HEAD, flush=True)
            for pairs in args.pairs:
                n = messages_for(args, pairs)
                results: dict[str, list[RunResult]] = {label: [] for label in CONFIGS}
                for k in range(args.repeat):
                    order = deployments[k % 3 :] + deployments[: k % 3]
                    for dep in order:
                        if not dep.alive():
                            raise BrokerError(f"a broker of {dep.label} died; see {brokers.root}")
                        dep.wait_ready(args.ready_timeout)
                        r = run_reported(
                            args,
                            dep.primary.url,
                            pairs,
                            n,
                            k + 1,
                            dep.label,
                            broker_pid=dep.primary.pid,
                            extra_pids=[b.pid for b in dep.backups],
                        )
                        ok &= r.ok
                        results[dep.label].append(r)
                lines, figures = summary_rows(pairs, results)
                summary += lines
                for label in CONFIGS:
                    med = median_of(results[label])
                    medians.append(med)
                    if args.json:
                        d = json.loads(as_json(med, "median", args))
                        d.update(figures[label])
                        print(json.dumps(d, sort_keys=True), flush=True)
                share = figures["primary+2"]["of_standalone"]
                met = "met" if share >= TARGET_FRACTION else "NOT met"
                verdicts.append(
                    f"P={pairs}: primary+2 = {share * 100:.0f}% of stand-alone "
                    f"(costs {100 - share * 100:.0f}%): target {met}"
                )
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print_summary(
        f"\nmedians of {args.repeat} alternating rounds, {args.size} B messages, "
        f"window {args.window}, prefetch {args.prefetch} ({time.strftime('%Y-%m-%d')}):",
        medians,
        [SUMMARY_HEAD, *summary],
        verdicts,
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
