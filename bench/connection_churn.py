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

``--qpidd`` runs a real ``qpidd`` process instead (the tree on PYTHONPATH), whose own
policy freezes its heap when it decides to (a storm of connections is such a time): no
forced freeze, no forced collection; its RSS is read 5 s after each round's clients are
gone, and its ``gc_frozen`` log lines counted.

    PYTHONPATH=. .venv/bin/python bench/connection_churn.py --rounds 6 --connections 500
    PYTHONPATH=. .venv/bin/python bench/connection_churn.py --qpidd --connections 1000
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import uvloop

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from broker.collector import tune_after_start  # noqa: E402
from broker.options import BrokerOptions  # noqa: E402
from broker.server import Broker  # noqa: E402
from common.log import configure_logging  # noqa: E402
from common.polling import free_port, poll_until, port_open  # noqa: E402

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


def rss_mb(pid: int | str = "self") -> float:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * PAGE / 1e6


async def _until(check: object, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise SystemExit(f"not within {timeout} s")
        await asyncio.sleep(0.05)


async def _clients(
    port: int, args: argparse.Namespace, first: int, connected: Callable[[], Awaitable[None]]
) -> None:
    """One round's clients: started, all connected (``connected`` is then awaited), killed."""
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
    await connected()
    for client in clients:
        assert client.stdin is not None
        client.stdin.write(b"go\n")
        await client.stdin.drain()
    for client in clients:
        await client.wait()


async def one_round(broker: Broker, args: argparse.Namespace, first: int) -> None:
    async def connected() -> None:
        await _until(lambda: len(broker.connections) >= args.connections, 60)
        if args.freeze:
            gc.freeze()

    await _clients(broker.options.port, args, first, connected)
    await _until(lambda: not broker.connections, 60)
    await asyncio.sleep(0.5)  # the last releases' turns
    gc.collect()


async def _nothing() -> None:
    return None


async def in_qpidd(args: argparse.Namespace) -> list[float]:
    """The rounds against a ``qpidd`` process: its RSS before and after each."""
    with tempfile.TemporaryDirectory() as work:
        port = free_port()
        log_path = Path(work) / "qpidd.log"
        with open(log_path, "w") as log:
            proc = subprocess.Popen(
                [
                    str(Path(sys.executable).with_name("qpidd")),
                    "--interface=127.0.0.1",
                    f"--port={port}",
                    "--mgmt-port=0",
                    f"--data-dir={work}/data",
                    f"--max-connections={args.connections + 10}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            poll_until(lambda: port_open(port), 90, "qpidd to listen")
            rss = [rss_mb(proc.pid)]
            for r in range(args.rounds):
                await _clients(port, args, r * args.connections, _nothing)
                await asyncio.sleep(5.0)  # its releases, at its own pace
                rss.append(rss_mb(proc.pid))
                frozen = log_path.read_text().count('"gc_frozen"')
                print(
                    f"round {r + 1}: RSS {rss[-1]:.1f} MB (+{rss[-1] - rss[-2]:.2f}),"
                    f" gc_frozen lines {frozen}",
                    flush=True,
                )
            return rss
        finally:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


async def main(args: argparse.Namespace) -> dict[str, object]:
    rss = await in_qpidd(args) if args.qpidd else await in_this_process(args)
    growth = [b - a for a, b in itertools.pairwise(rss[1:])]  # after the first round
    median = statistics.median(growth) if growth else 0.0
    return {
        "rounds": args.rounds,
        "connections": args.connections,
        "broker": "qpidd" if args.qpidd else "in this process",
        "freeze": "its own" if args.qpidd else args.freeze,
        "rss_mb": [round(x, 2) for x in rss],
        "growth_mb_per_round_median": round(median, 3),
        "kib_per_connection": round(median * 1e6 / 1024 / args.connections, 2),
    }


async def in_this_process(args: argparse.Namespace) -> list[float]:
    """The rounds against a broker in this process: its RSS before and after each."""
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
    return rss


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--connections", type=int, default=500)
    parser.add_argument("--per-process", type=int, default=125)
    parser.add_argument("--messages", type=int, default=3)
    parser.add_argument("--qpidd", action="store_true", help="a qpidd process, its own freezes")
    parser.add_argument(
        "--freeze",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="freeze the heap while the clients are connected (default: yes)",
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    print(json.dumps(uvloop.run(main(parse()))))
