#!/usr/bin/env python3
"""End-to-end throughput and publisher-confirm latency of an AMQP 0-9-1 broker.

For each P in --pairs: P queues, P consumer processes and P producer processes. Producer i
publishes --messages messages of --size bytes to queue i through the default exchange with
publisher confirms, keeping at most --window unconfirmed; consumer i consumes queue i with
basic.qos prefetch --prefetch and manual acks (multiple=True every prefetch/4 messages and on
a 50 ms timer). Every body starts with (producer id, sequence number); consumers verify that
every message arrives exactly once.

Reported per P: end-to-end msgs/s (messages received / time from the first publish to the
last receipt), publisher-confirm latency p50/p99 in ms (publish call to the confirm that
covers it, every message covered by a multiple ack counted), missing and duplicate counts.
Exits 1 if any message was missing, duplicated, nacked or left behind, or a run failed.
Also reported: the broker's CPU microseconds per message (for a broker on this machine, found
by its listening port) and `other%`, the CPU that unrelated processes used meanwhile in % of
one core: on shared cores, runs with a high other% are slowed by someone else's work.

Both sides use pika's SelectConnection (callbacks, no threads): the same client is run
against RabbitMQ and qpidd. ``--client lean`` runs bench/lean_clients.py's 0-9-1 pair
instead (hand-built frames on one blocking socket a process, the same queues, window,
prefetch, multiple acks and exactly-once check, a few times less client CPU a message).
Examples:

    .venv/bin/python bench/throughput.py --url amqp://guest:guest@127.0.0.1:5672/%2F
    .venv/bin/python bench/throughput.py --pairs 1,4,16 --repeat 3 --json
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Sequence
from typing import Any

from throughput_clients import HEADER
from throughput_results import HEAD, RunResult, as_json, median_of, print_summary, row
from throughput_run import CLIENTS, run_once

# The command line, and the pieces of it that bench/compare.py and bench/ha_compare.py share:
# the run options (add_common_args, check_args, messages_for), run_reported and term_to_exit.
# The clients are in throughput_clients.py, one run in throughput_run.py, the figures and
# their printing in throughput_results.py, the /proc readings in proc_stats.py.

DEFAULT_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"
# With --messages unset, each run moves this many messages in total (split evenly among the
# P producers), which takes ~5-10 s per run on the reference machine (2 shared cores).
DEFAULT_TOTAL_MESSAGES = 160_000
MIN_MESSAGES_PER_PRODUCER = 1_000


def parse_pairs(text: str) -> list[int]:
    try:
        pairs = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma list of integers: {text!r}") from None
    if not pairs or any(p < 1 for p in pairs):
        raise argparse.ArgumentTypeError(f"pairs must be positive integers: {text!r}")
    return pairs


def messages_for(args: argparse.Namespace, pairs: int) -> int:
    if args.messages is not None:
        return int(args.messages)
    return max(MIN_MESSAGES_PER_PRODUCER, int(args.total_messages) // pairs)


def add_common_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--pairs", type=parse_pairs, default=[1, 4, 16], help="e.g. 1,4,16")
    ap.add_argument(
        "--messages",
        type=int,
        default=None,
        help="messages per producer (default: --total-messages / P, at least "
        f"{MIN_MESSAGES_PER_PRODUCER})",
    )
    ap.add_argument(
        "--total-messages",
        type=int,
        default=DEFAULT_TOTAL_MESSAGES,
        help="messages per run when --messages is not given (default %(default)s)",
    )
    ap.add_argument("--size", type=int, default=1024, help=f"body bytes (min {HEADER.size})")
    ap.add_argument("--window", type=int, default=256, help="max unconfirmed per producer")
    ap.add_argument("--prefetch", type=int, default=256, help="basic.qos prefetch per consumer")
    ap.add_argument("--queue-prefix", default="bench")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per run")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each P (medians reported)")
    ap.add_argument("--json", action="store_true", help="also print JSON lines")


def add_client_arg(ap: argparse.ArgumentParser) -> None:
    """``--client pika|lean``: which client pair every run uses (run_once's ``client``)."""
    ap.add_argument(
        "--client",
        choices=CLIENTS,
        default="pika",
        help="pika: pika's SelectConnection (the default); lean: bench/lean_clients.py's "
        "0-9-1 pair, hand-built frames on a blocking socket (less client CPU a message)",
    )


def check_args(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.size < HEADER.size:
        ap.error(f"--size must be at least {HEADER.size}")
    if args.window < 1 or args.prefetch < 0 or args.repeat < 1 or args.timeout <= 0:
        ap.error("--window, --repeat and --timeout must be positive, --prefetch >= 0")
    if args.messages is not None and args.messages < 1:
        ap.error("--messages must be positive")


def term_to_exit(_signum: int, _frame: Any) -> None:
    raise SystemExit(143)


def run_reported(
    args: argparse.Namespace,
    url: str,
    pairs: int,
    messages: int,
    run: int,
    label: str,
    broker_pid: int | None = None,
    extra_pids: Sequence[int] = (),
    persistent: bool = False,
    queue_arguments: dict[str, Any] | None = None,
    queue_prefix: str | None = None,
) -> RunResult:
    """Run number ``run`` of :func:`run_once` with the command line's figures (its --client,
    pika where it has none), then print its row, its errors (on stderr) and, with --json, its
    JSON line. ``persistent``: durable queues and delivery_mode 2; ``queue_arguments``: the
    queues' declare arguments; ``queue_prefix``: instead of --queue-prefix."""
    r = run_once(
        url,
        pairs,
        messages,
        args.size,
        args.window,
        args.prefetch,
        queue_prefix or args.queue_prefix,
        args.timeout,
        label=label,
        broker_pid=broker_pid,
        extra_pids=extra_pids,
        durable=persistent,
        persistent=persistent,
        queue_arguments=queue_arguments,
        client=getattr(args, "client", "pika"),
    )
    print(row(r, str(run)), flush=True)
    for e in r.errors:
        print(f"    error: {e}", file=sys.stderr, flush=True)
    if args.json:
        print(as_json(r, str(run), args), flush=True)
    return r


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--url", default=DEFAULT_URL, help="AMQP URL (default %(default)s)")
    ap.add_argument("--label", default="", help="name printed in the target column")
    add_common_args(ap)
    add_client_arg(ap)
    args = ap.parse_args(argv)
    check_args(ap, args)
    signal.signal(signal.SIGTERM, term_to_exit)

    print(HEAD, flush=True)
    all_ok = True
    summary: list[RunResult] = []
    try:
        for pairs in args.pairs:
            n = messages_for(args, pairs)
            runs = []
            for k in range(args.repeat):
                r = run_reported(args, args.url, pairs, n, k + 1, args.label)
                runs.append(r)
                all_ok &= r.ok
            if args.repeat > 1:
                med = median_of(runs)
                summary.append(med)
                print(row(med, "med"), flush=True)
                if args.json:
                    print(as_json(med, "median", args), flush=True)
            else:
                summary.append(runs[0])
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    if len(summary) > 1 or args.repeat > 1:
        print_summary("", summary, run="med" if args.repeat > 1 else "1")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
