#!/usr/bin/env python3
"""Every core of a machine: aggregate throughput of 1 vs 2 HA clusters on one machine.

One broker's event loop runs on one core (issue 32): several clusters on the same nodes,
one broker per core, put the others to work (docs/deploy.md, "Several clusters on one set
of nodes"). For each K in --clusters (default 1,2) and each of --repeat rounds this starts,
on free loopback ports in a temporary directory, K clusters of a primary (promoted with
epoch 1) and one ready backup, and runs against each cluster, all at once, one client
process with the lean asyncio client of broker/amqp/client/: --window publishes in flight
with publisher confirms on one channel, one consumer acking each message on another
connection, for --seconds. Every confirmed message must be consumed (exit 1 otherwise).

Printed per run: the aggregate confirmed msgs/s over the K clusters, the CPU each role used
per message (the primaries', the backups', the clients', in microseconds of CPU per
confirmed message, from /proc), the machine's busy cores during the run, and ``other%``:
the CPU used meanwhile by processes that are neither these brokers, nor the clients, nor
this script (the cores may be shared: then the figures are indicative). Then per K the
medians, K clusters' aggregate against one's, and the aggregate the per-message CPU
predicts for a pair of N-core nodes running N clusters (a broker per core: each cluster's
throughput bound by its busier broker's core, 1 / max(primary, backup) CPU per message;
the clients on other machines):

    .venv/bin/python bench/multi_cluster.py                       # K = 1,2, 10 s, 3 rounds
    .venv/bin/python bench/multi_cluster.py --seconds 5 --repeat 1 --json

Every broker and client is stopped by PID at the end, also on ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ha_brokers import Broker, BrokerError, Brokers
from proc_stats import host_cpu, process_cpu

from broker.amqp.client import connect
from broker.amqp.client.wire import Delivery

QUEUE = "bench-multi"
#: the core counts the prediction is printed for
PREDICT_FOR = (2, 4, 8, 16, 32)


# -- one client process (run as ``multi_cluster.py --client PORT ...``) --------------------


async def _client(port: int, seconds: float, window: int, size: int) -> dict[str, float]:
    publisher = await connect("127.0.0.1", port, user="guest", password="guest", timeout=30)
    consumer = await connect("127.0.0.1", port, user="guest", password="guest", timeout=30)
    consumed = 0
    done = asyncio.Event()
    target = -1

    def on_delivery(delivery: Delivery) -> None:
        nonlocal consumed
        consumed += 1
        in_channel.ack(delivery.delivery_tag)
        if consumed == target:
            done.set()

    try:
        out_channel = await publisher.open_channel()
        await out_channel.declare_queue(QUEUE)
        await out_channel.confirm_select()
        in_channel = await consumer.open_channel()
        await in_channel.qos(1000)
        await in_channel.consume(QUEUE, on_delivery)
        body = b"x" * size
        confirmed = 0
        started = time.monotonic()
        deadline = started + seconds

        async def publish_loop() -> None:
            nonlocal confirmed
            while time.monotonic() < deadline:
                await out_channel.publish("", QUEUE, body)
                confirmed += 1

        await asyncio.gather(*(publish_loop() for _ in range(window)))
        took = time.monotonic() - started
        target = confirmed
        if consumed < target:
            await asyncio.wait_for(done.wait(), 60)
        return {"confirmed": confirmed, "consumed": consumed, "seconds": took}
    finally:
        await consumer.close()
        await publisher.close()


def client_main(port: int, seconds: float, window: int, size: int) -> None:
    result = asyncio.run(_client(port, seconds, window, size))
    usage = resource.getrusage(resource.RUSAGE_SELF)
    result["cpu"] = usage.ru_utime + usage.ru_stime
    print(json.dumps(result), flush=True)


# -- the benchmark ----------------------------------------------------------------------


@dataclass
class Run:
    clusters: int
    msgs_per_s: float  # confirmed, summed over the clusters
    primary_us: float  # CPU per confirmed message, all primaries together
    backup_us: float
    client_us: float
    busy_cores: float  # the machine's, during the run
    other_pct: float  # CPU of everything else, % of one core
    lost: int


def run_clusters(k: int, seconds: float, window: int, size: int) -> Run:
    with Brokers(prefix="qpidd-multi-") as brokers:
        clusters = [brokers.cluster(f"c{i}", backups=1) for i in range(k)]
        everyone: list[Broker] = [b for members in clusters for b in members]
        cpu_before = {b.name: process_cpu(b.pid) or 0.0 for b in everyone}
        busy_before, _ = host_cpu()
        self_before = _self_cpu()
        started = time.monotonic()
        clients = [
            subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    "--client",
                    str(members[0].port),
                    str(seconds),
                    str(window),
                    str(size),
                ],
                stdout=subprocess.PIPE,
                start_new_session=True,
            )
            for members in clusters
        ]
        try:
            outputs = [c.communicate(timeout=seconds + 120)[0] for c in clients]
        finally:
            for c in clients:
                if c.poll() is None:
                    os.kill(c.pid, signal.SIGKILL)
                    c.wait()
        wall = time.monotonic() - started
        busy_after, _ = host_cpu()
        cpu_after = {b.name: process_cpu(b.pid) or 0.0 for b in everyone}
        results = [json.loads(out) for out in outputs]
        if any(c.returncode != 0 for c in clients):
            raise BrokerError(f"a client failed: {[c.returncode for c in clients]}")
    used = {name: cpu_after[name] - cpu_before[name] for name in cpu_before}
    primaries = sum(used[m[0].name] for m in clusters)
    backups = sum(used[b.name] for m in clusters for b in m[1:])
    client_cpu = sum(r["cpu"] for r in results)
    confirmed = sum(r["confirmed"] for r in results)
    lost = sum(r["confirmed"] - r["consumed"] for r in results)
    busy = busy_after - busy_before
    other = busy - primaries - backups - client_cpu - (_self_cpu() - self_before)
    per = 1e6 / max(1, confirmed)
    return Run(
        clusters=k,
        msgs_per_s=sum(r["confirmed"] / r["seconds"] for r in results),
        primary_us=primaries * per,
        backup_us=backups * per,
        client_us=client_cpu * per,
        busy_cores=busy / wall,
        other_pct=100 * max(0.0, other) / wall,
        lost=lost,
    )


def _self_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def predicted(primary_us: float, backup_us: float, cores: int) -> float:
    """Aggregate msgs/s of ``cores`` clusters on a pair of ``cores``-core nodes (a broker
    per core, clients elsewhere): each cluster bound by its busier broker's core."""
    return cores * 1e6 / max(primary_us, backup_us)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--clusters", default="1,2", help="cluster counts (default 1,2)")
    parser.add_argument("--seconds", type=float, default=10.0, help="each run (default 10)")
    parser.add_argument("--window", type=int, default=16, help="publishes in flight (16)")
    parser.add_argument("--size", type=int, default=256, help="message bytes (default 256)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds (default 3)")
    parser.add_argument("--json", action="store_true", help="print JSON lines")
    args = parser.parse_args(argv)
    try:
        counts = [int(k) for k in args.clusters.split(",")]
    except ValueError:
        parser.error(f"--clusters: a list of counts, e.g. 1,2: {args.clusters!r}")
    if not counts or min(counts) < 1 or args.seconds <= 0 or args.window < 1 or args.repeat < 1:
        parser.error("--clusters, --seconds, --window and --repeat must be positive")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    runs: dict[int, list[Run]] = {k: [] for k in counts}
    failed = False
    for _round in range(args.repeat):
        for k in counts:
            run = run_clusters(k, args.seconds, args.window, args.size)
            runs[k].append(run)
            failed |= run.lost != 0
            if args.json:
                print(json.dumps(asdict(run)), flush=True)
            else:
                print(
                    f"K={k}: {run.msgs_per_s:8.0f} msgs/s  CPU us/msg primary {run.primary_us:6.1f}"
                    f" backup {run.backup_us:6.1f} client {run.client_us:6.1f}  busy"
                    f" {run.busy_cores:.2f} cores  other {run.other_pct:5.1f}%  lost {run.lost}",
                    flush=True,
                )
    base = statistics.median(r.msgs_per_s for r in runs[counts[0]])
    for k in counts:
        median = {
            field: statistics.median(getattr(r, field) for r in runs[k])
            for field in ("msgs_per_s", "primary_us", "backup_us", "client_us", "other_pct")
        }
        prediction = {
            n: predicted(median["primary_us"], median["backup_us"], n) for n in PREDICT_FOR
        }
        if args.json:
            print(json.dumps({"clusters": k, "median": median, "predicted": prediction}))
            continue
        print(
            f"median K={k}: {median['msgs_per_s']:.0f} msgs/s ({median['msgs_per_s'] / base:.2f}x"
            f" K={counts[0]}), CPU us/msg primary {median['primary_us']:.1f} backup"
            f" {median['backup_us']:.1f} client {median['client_us']:.1f}, other"
            f" {median['other_pct']:.0f}%"
        )
        print(
            "  predicted for a pair of N-core nodes, N clusters: "
            + ", ".join(f"N={n} {v:,.0f}" for n, v in prediction.items())
        )
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--client":
        client_main(int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    else:
        sys.exit(main())
