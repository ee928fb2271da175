#!/usr/bin/env python3
"""Memory a closed connection leaves behind when the heap was frozen while it was open
(issue 32, item 3: memory back).

``qpidd`` freezes its heap as it grows (``broker.collector``: ``FreezePolicy``, a catch-up's
``CatchUpGc``): the cyclic collector never walks a frozen object again, so a connection
whose objects formed reference cycles, frozen while it was open and closed later, stayed
in memory until the broker stopped. This benchmark runs a broker in its own process (the
tree on PYTHONPATH, uvloop, collector set as ``qpidd`` sets it), then ``--rounds`` times:
``--connections`` pika clients (processes of ``--per-process`` connections each) connect,
each with a confirm channel that publishes ``--messages`` and a consumer that leaves them
unacknowledged; the heap is frozen (``--freeze``, what the policy does at scale); the
clients are killed (their sockets reset); once the broker has released them, a full
collection runs and the broker's resident set size is read (/proc/self/statm). It prints
the RSS after each round and the growth per round and per connection after the first
(which also warms the allocator up).

    PYTHONPATH=. .venv/bin/python bench/connection_churn.py --rounds 6 --connections 500
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import uvloop

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from broker.collector import tune_after_start  # noqa: E402
from broker.options import BrokerOptions  # noqa: E402
from broker.server import Broker  # noqa: E402
from common.log import configure_logging  # noqa: E402
from common.polling import free_port  # noqa: E402

PAGE = os.sysconf("SC_PAGE_SIZE")

CLIENT = r"""
import os, sys, pika
port, n, messages, first = (int(a) for a in sys.argv[1:5])
kept = []
for i in range(first, first + n):
    c = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    ch = c.channel(); ch.confirm_delivery()
    ch.queue_declare(f"churn-{i}", auto_delete=True)
    for _ in range(messages):
        ch.basic_publish("", f"churn-{i}", b"x" * 100)
    got = []
    ch.basic_consume(f"churn-{i}", lambda _c, m, _p, _b: got.append(m))
    while len(got) < messages:
        c.process_data_events(0.05)
    kept.append(c)
print("ready", flush=True)
sys.stdin.readline()
os._exit(0)
"""


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE / 1e6


async def _until(check: object, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise SystemExit(f"not within {timeout} s")
        await asyncio.sleep(0.05)


async def one_round(broker: Broker, args: argparse.Namespace, first: int) -> None:
    port = broker.options.port
    clients = []
    for start in range(0, args.connections, args.per_process):
        n = min(args.per_process, args.connections - start)
        clients.append(
            await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                CLIENT,
                str(port),
                str(n),
                str(args.messages),
                str(first + start),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
            )
        )
    for client in clients:
        assert client.stdout is not None
        line = await asyncio.wait_for(client.stdout.readline(), 300)
        assert line == b"ready\n", line
    await _until(lambda: len(broker.connections) >= args.connections, 60)
    if args.freeze:
        gc.freeze()
    for client in clients:
        assert client.stdin is not None
        client.stdin.write(b"go\n")
        await client.stdin.drain()
    for client in clients:
        await client.wait()
    await _until(lambda: not broker.connections, 60)
    await asyncio.sleep(0.5)  # the last releases' turns
    gc.collect()


async def main(args: argparse.Namespace) -> dict[str, object]:
    configure_logging(level="warning", fmt="json", file=None, node="churn")
    with tempfile.TemporaryDirectory() as data:
        broker = Broker(
            BrokerOptions(
                port=free_port(),
                interface="127.0.0.1",
                mgmt_port=free_port(),
                mgmt_interface="127.0.0.1",
                node_name="churn",
                data_dir=data,
            )
        )
        await broker.start(before_listening=tune_after_start)
        try:
            rss = [rss_mb()]
            for r in range(args.rounds):
                await one_round(broker, args, r * args.connections)
                rss.append(rss_mb())
                print(
                    f"round {r + 1}: RSS {rss[-1]:.1f} MB (+{rss[-1] - rss[-2]:.2f}),"
                    f" frozen objects {gc.get_freeze_count()}",
                    flush=True,
                )
        finally:
            await broker.stop()
    growth = [b - a for a, b in itertools.pairwise(rss[1:])]  # after the first round
    median = statistics.median(growth) if growth else 0.0
    return {
        "rounds": args.rounds,
        "connections": args.connections,
        "freeze": args.freeze,
        "rss_mb": [round(x, 2) for x in rss],
        "growth_mb_per_round_median": round(median, 3),
        "kib_per_connection": round(median * 1e6 / 1024 / args.connections, 2),
    }


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--connections", type=int, default=500)
    parser.add_argument("--per-process", type=int, default=125)
    parser.add_argument("--messages", type=int, default=3)
    parser.add_argument(
        "--freeze",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="freeze the heap while the clients are connected (default: yes)",
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    print(json.dumps(uvloop.run(main(parse()))))
