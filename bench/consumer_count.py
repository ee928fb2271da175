#!/usr/bin/env python3
"""One queue, many consumers (issue 32 items 1 and 5): throughput and broker CPU per message
with --consumers C1,C2,... consumers on the same queue.

Starts a qpidd (the ``broker`` on PYTHONPATH) per run, declares one queue and subscribes C
consumers to it: C channels, one consumer each (basic.qos ``--prefetch``, manual acks,
each message acknowledged), spread over ``--connections`` pika connections in as many
processes. Then one producer (pika, no confirms) publishes ``--messages`` bodies of
``--size`` bytes to the queue; the run ends when the consumers have received them all.

Reported per C: msgs/s (last receipt - first publish), the broker's CPU microseconds per
message over that time, and ``load``: the machine's 1-minute load average at the end (on
shared cores, CPU per message is the figure to compare). Target (issue 32): 1,000 consumers
within 10 % of 16. Each C is run ``--repeat`` times, alternating, medians printed.

    .venv/bin/python bench/consumer_count.py --consumers 16,1000 --repeat 3
    .venv/bin/python bench/consumer_count.py --consumers 16 --repeat 1 --profile /tmp/prof
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pika

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from proc_stats import process_cpu  # noqa: E402

from common.polling import free_port, poll_until, port_open  # noqa: E402

QUEUE = "consumer-count"


def _consume(url: str, channels: int, prefetch: int, ready: Any, received: Any, stop: Any) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(url))

    def on_message(ch: Any, method: Any, _props: Any, _body: bytes) -> None:
        ch.basic_ack(method.delivery_tag)
        with received.get_lock():
            received.value += 1

    for _ in range(channels):
        channel = connection.channel()
        channel.basic_qos(prefetch_count=prefetch)
        channel.basic_consume(QUEUE, on_message)
    with ready.get_lock():
        ready.value += channels
    while not stop.is_set():
        connection.process_data_events(time_limit=0.05)
    connection.close()


def run(
    consumers: int,
    connections: int,
    messages: int,
    size: int,
    prefetch: int,
    profile: str | None = None,
) -> dict[str, float]:
    port = free_port()
    args = [
        "--interface=127.0.0.1",
        f"--port={port}",
        "--mgmt-port=0",
        "--log-level=warning",
        "--default-queue-limit=0",
        "--max-memory=0",
    ]
    if profile:  # the broker under cProfile, written when SIGTERM stops it
        command = [
            sys.executable,
            "-c",
            "import cProfile, sys; from broker.main import main;"
            f" sys.argv = ['qpidd', *{args!r}]; cProfile.run('main()', {profile!r})",
        ]
    else:
        command = [str(Path(sys.executable).with_name("qpidd")), *args]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    children: list[mp.Process] = []
    stop = mp.Event()
    try:
        poll_until(lambda: port_open(port), 15, "qpidd to listen")
        url = f"amqp://guest:guest@127.0.0.1:{port}/%2F"
        admin = pika.BlockingConnection(pika.URLParameters(url))
        channel = admin.channel()
        channel.queue_declare(QUEUE)
        ready, received = mp.Value("i", 0), mp.Value("i", 0)
        per = [consumers // connections + (i < consumers % connections) for i in range(connections)]
        for count in per:
            if count:
                child = mp.Process(
                    target=_consume, args=(url, count, prefetch, ready, received, stop)
                )
                child.start()
                children.append(child)
        poll_until(lambda: ready.value == consumers, 120, f"{consumers} consumers")
        body = b"c" * size
        cpu0, t0 = process_cpu(proc.pid), time.monotonic()
        for _ in range(messages):
            channel.basic_publish("", QUEUE, body)
        poll_until(lambda: received.value >= messages, 600, "every message received")
        seconds = time.monotonic() - t0
        cpu = (process_cpu(proc.pid) or 0.0) - (cpu0 or 0.0)
        admin.close()
        return {
            "rate": messages / seconds,
            "us_per_msg": cpu / messages * 1e6,
            "load": os.getloadavg()[0],
        }
    finally:
        stop.set()
        for child in children:
            child.join(10)
            if child.is_alive():
                child.kill()
                child.join()
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--consumers", default="16,1000", help="comma list of consumer counts")
    ap.add_argument("--connections", type=int, default=4, help="consumer connections/processes")
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=100, help="body bytes")
    ap.add_argument("--prefetch", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--profile", help="run the broker under cProfile, written to this file")
    opts = ap.parse_args()
    counts = [int(x) for x in opts.consumers.split(",")]
    results: dict[int, list[dict[str, float]]] = {c: [] for c in counts}
    for rep in range(opts.repeat):
        for c in counts:
            profile = f"{opts.profile}.{c}" if opts.profile else None
            r = run(c, opts.connections, opts.messages, opts.size, opts.prefetch, profile)
            results[c].append(r)
            print(
                f"rep {rep + 1} consumers {c:>5}: {r['rate']:>8.0f} msgs/s"
                f" {r['us_per_msg']:>6.1f} us/msg (broker) load {r['load']:.1f}",
                flush=True,
            )
    print(f"{'consumers':>9} {'msgs/s':>9} {'broker us/msg':>14} {'load':>5}  (medians)")
    for c in counts:
        rs = results[c]
        print(
            f"{c:>9} {statistics.median(r['rate'] for r in rs):>9.0f}"
            f" {statistics.median(r['us_per_msg'] for r in rs):>14.1f}"
            f" {statistics.median(r['load'] for r in rs):>5.1f}"
        )


if __name__ == "__main__":
    main()
