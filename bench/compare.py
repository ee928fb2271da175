#!/usr/bin/env python3
"""Run bench/throughput.py against two brokers in one run, alternately, and compare.

For each P in --pairs, runs A, B, A, B ... (--repeat times each) so both brokers see the
same machine conditions, then prints the medians and the ratio B/A of end-to-end msgs/s and
of confirm latency. By default A is a throwaway RabbitMQ started with bench/rabbitmq.sh and
B is a qpidd started here on free loopback ports; give --url-a/--url-b to compare any two
running brokers instead (bench/hold_brokers.py starts one, e.g. an HA cluster of another
build); --pids-a/--pids-b name more processes whose CPU counts as that broker's (an HA
primary's backups), --persistent publishes persistent messages to durable queues. Each run's
row follows a line with the 1-minute load average when it started. --client picks the client
pair both brokers get: pika (the default, pika's SelectConnection) or lean
(bench/lean_clients.py's hand-built 0-9-1 frames on a blocking socket, a few times less client
CPU a message: on 2 shared cores pika's clients, not the broker, set the rate).

    .venv/bin/python bench/compare.py --pairs 1,4,16 --repeat 3
    .venv/bin/python bench/compare.py --pairs 1,4,16 --repeat 3 --client lean
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from throughput import (
    add_client_arg,
    add_common_args,
    check_args,
    messages_for,
    run_reported,
    term_to_exit,
)
from throughput_results import (
    HEAD,
    RunResult,
    as_json,
    interpreter,
    median_known,
    median_of,
    median_value,
    print_summary,
)

from common.polling import PollTimeout, free_port, poll_until, port_open

HERE = Path(__file__).resolve().parent
RABBITMQ_PORT = 5680


def _wait_port(port: int, timeout: float) -> None:
    try:
        poll_until(lambda: port_open(port), timeout, f"127.0.0.1:{port}", interval=0.05)
    except PollTimeout:
        raise SystemExit(f"nothing listens on 127.0.0.1:{port}") from None


@contextmanager
def qpidd() -> Iterator[str]:
    port = free_port()
    binary = Path(sys.executable).with_name("qpidd")
    proc = subprocess.Popen(
        [str(binary), "--interface=127.0.0.1", f"--port={port}", "--mgmt-port=0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_port(port, 15)
        yield f"amqp://guest:guest@127.0.0.1:{port}/%2F"
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=15)


@contextmanager
def rabbitmq() -> Iterator[str]:
    script = str(HERE / "rabbitmq.sh")
    subprocess.run([script, "start", str(RABBITMQ_PORT)], check=True)
    try:
        yield f"amqp://guest:guest@127.0.0.1:{RABBITMQ_PORT}/%2F"
    finally:
        subprocess.run([script, "stop", str(RABBITMQ_PORT)], check=False)


@contextmanager
def given(url: str) -> Iterator[str]:
    yield url


def parse_pids(text: str) -> list[int]:
    try:
        return [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma list of PIDs: {text!r}") from None


def _ratio(b: float, a: float) -> str:
    return f"{b / a:.2f}" if a > 0 else "n/a"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--url-a", help="broker A (default: a throwaway RabbitMQ)")
    ap.add_argument("--url-b", help="broker B (default: a qpidd started here)")
    ap.add_argument("--label-a", default="rabbitmq")
    ap.add_argument("--label-b", default="qpidd")
    ap.add_argument("--pids-a", type=parse_pids, default=[], help="more PIDs of broker A")
    ap.add_argument("--pids-b", type=parse_pids, default=[], help="more PIDs of broker B")
    ap.add_argument("--persistent", action="store_true", help="durable queues, persistent messages")
    add_common_args(ap)
    add_client_arg(ap)
    args = ap.parse_args(argv)
    check_args(ap, args)
    # SIGTERM unwinds like ctrl-C, so the brokers started here are stopped on the way out.
    signal.signal(signal.SIGTERM, term_to_exit)
    ok = True
    lines: list[str] = []
    medians: list[RunResult] = []
    with (
        given(args.url_a) if args.url_a else rabbitmq() as url_a,
        given(args.url_b) if args.url_b else qpidd() as url_b,
    ):
        print(f"# qpidd here runs on {interpreter()}", flush=True)
        print(HEAD, flush=True)
        for pairs in args.pairs:
            n = messages_for(args, pairs)
            results: dict[str, list[RunResult]] = {args.label_a: [], args.label_b: []}
            for k in range(args.repeat):
                for label, url, pids in (
                    (args.label_a, url_a, args.pids_a),
                    (args.label_b, url_b, args.pids_b),
                ):
                    print(f"# load1 {os.getloadavg()[0]:.2f}", flush=True)
                    r = run_reported(
                        args,
                        url,
                        pairs,
                        n,
                        k + 1,
                        label,
                        extra_pids=pids,
                        persistent=args.persistent,
                    )
                    ok &= r.ok
                    results[label].append(r)
            a, b = results[args.label_a], results[args.label_b]
            medians += [median_of(a), median_of(b)]
            if args.json:
                for med in medians[-2:]:
                    print(as_json(med, "median", args), flush=True)
            rate_a, rate_b = median_value(a, "msgs_per_s"), median_value(b, "msgs_per_s")
            p50_a, p50_b = median_value(a, "confirm_p50_ms"), median_value(b, "confirm_p50_ms")
            p99_a, p99_b = median_value(a, "confirm_p99_ms"), median_value(b, "confirm_p99_ms")
            lines.append(
                f"P={pairs:<3} {args.label_a} {rate_a:8.0f} msg/s p50 {p50_a:6.2f} p99 {p99_a:7.2f}"
                f" | {args.label_b} {rate_b:8.0f} msg/s p50 {p50_b:6.2f} p99 {p99_b:7.2f}"
                f" | throughput {args.label_b}/{args.label_a} = {_ratio(rate_b, rate_a)}"
                f" | broker us/msg {median_known(a, 'broker_us_per_msg')}"
                f" / {median_known(b, 'broker_us_per_msg')}"
                f" | of which --pids {median_known(a, 'extra_us_per_msg', 1)}"
                f" / {median_known(b, 'extra_us_per_msg', 1)}"
            )
    print_summary(
        f"\nmedians of {args.repeat} alternating runs, {args.size} B messages, client "
        f"{args.client}:",
        medians,
        lines,
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
