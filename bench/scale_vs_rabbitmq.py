#!/usr/bin/env python3
"""The scale scenario's figures against RabbitMQ 3.10.8 (issue 25, item 6): not a test.

In one run, on the same machine and with the same client (the broker's own asyncio AMQP
0-9-1 client, requests pipelined 250 at a time on one channel):

- **declare**: the time to declare ``--queues`` durable queues, half of them bound to a
  durable topic exchange; qpidd stand-alone on a store (``--store-sync`` default) and
  RabbitMQ on one node (classic queues: the issue's "classic queues on one node for
  memory"), started fresh for the run by ``bench/rabbitmq.sh``;
- **RSS per idle queue**: the broker's resident set (``/proc/PID/status`` VmRSS, every
  thread; RabbitMQ's ``beam.smp``) after the queues less before, per queue;
- **RSS per idle connection**: ``--connections`` more connections opened and left idle
  (no channel), the resident set after less before, per connection;
- **fail-over** (qpidd only; ``--failover``): a primary and ``--backups`` backups
  (``tests/ha/cluster.py``; with 2, the backup left after the fail-over is in the
  committed in-sync set: it links to the new primary and catches up on every queue, and
  the confirms wait for it queue by queue) with 1 queue, then with ``--queues`` queues,
  ``--active`` of them (spread over the queues, not the first declared) each with a
  publisher of confirmed persistent messages (the one-queue run has as many publishers, on its one
  queue: the clients' own work is the same); the primary SIGKILLed and the backup promoted at once
  by the cluster manager's call (no detection time: the same for both sizes); the time
  from the kill to each active queue's first confirm on the new primary, the longest.

Each broker is measured with its defaults; RSS settles for ``--settle`` seconds before
each reading. The load average is printed with every figure (2 shared cores: wall times
move with it; the RSS figures do not).

    .venv/bin/python bench/scale_vs_rabbitmq.py --queues 10000 --connections 2000 --failover
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from broker.amqp.client import AmqpClient, connect  # noqa: E402
from common.polling import poll_until  # noqa: E402
from tests.broker_process import BrokerProcess  # noqa: E402
from tests.ha.cluster import Cluster, http  # noqa: E402
from tests.ha.scale_scenario import (  # noqa: E402
    BURST,
    PERSISTENT,
    TOPIC,
    _exchange_declare,
    _exchange_declare_ok,
)

RABBITMQ_SH = ROOT / "bench" / "rabbitmq.sh"


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


async def declare(port: int, queues: int, prefix: str = "q") -> float:
    """Declare ``queues`` durable queues, every other one bound to the topic exchange;
    the seconds it took."""
    client = await connect("127.0.0.1", port, user="guest", password="guest", timeout=60)
    try:
        channel = await client.open_channel()
        await channel._call(_exchange_declare(TOPIC), _exchange_declare_ok())
        started = time.monotonic()
        for first in range(0, queues, BURST):
            names = [f"{prefix}{i}" for i in range(first, min(queues, first + BURST))]
            await asyncio.gather(*(channel.declare_queue(n, durable=True) for n in names))
            await asyncio.gather(
                *(
                    channel.bind_queue(n, TOPIC, f"scale.{n}.#")
                    for n in names
                    if int(n[len(prefix) :]) % 2 == 0
                )
            )
        return time.monotonic() - started
    finally:
        await client.close()


async def open_idle(port: int, count: int) -> list[AmqpClient]:
    """``count`` connections, opened 50 at a time, left idle."""
    opened: list[AmqpClient] = []
    for first in range(0, count, 50):
        batch = min(50, count - first)
        opened += await asyncio.gather(
            *(
                connect("127.0.0.1", port, user="guest", password="guest", timeout=120)
                for _ in range(batch)
            )
        )
    return opened


async def close_all(clients: list[AmqpClient]) -> None:
    for first in range(0, len(clients), 100):
        await asyncio.gather(
            *(c.close() for c in clients[first : first + 100]), return_exceptions=True
        )


def measure_broker(name: str, port: int, pid: int, args: argparse.Namespace) -> dict[str, Any]:
    """Declare time, RSS per idle queue and per idle connection of one broker."""
    # warm: logins' code paths and memory (qpidd checks a password with scrypt, 16 MiB in
    # each of its hash threads; 50 at once use every thread) before the first reading
    asyncio.run(close_all(asyncio.run(open_idle(port, 50))))
    time.sleep(args.settle)
    before = rss_kib(pid)
    load_before = load()
    seconds = asyncio.run(declare(port, args.queues))
    load_declare = load()
    time.sleep(args.settle)
    with_queues = rss_kib(pid)

    async def connections() -> int:
        clients = await open_idle(port, args.connections)
        await asyncio.sleep(args.settle)
        rss = rss_kib(pid)
        await close_all(clients)
        return rss

    with_connections = asyncio.run(connections())
    row = {
        "broker": name,
        "queues": args.queues,
        "declare_s": round(seconds, 2),
        "declare_per_s": round(args.queues / seconds),
        "rss_before_mib": round(before / 1024, 1),
        "rss_queues_mib": round(with_queues / 1024, 1),
        "rss_per_queue_kib": round((with_queues - before) / args.queues, 2),
        "connections": args.connections,
        "rss_per_connection_kib": round((with_connections - with_queues) / args.connections, 2),
        "load_before": load_before,
        "load_after_declare": load_declare,
        "load_end": load(),
    }
    print(json.dumps(row), flush=True)
    return row


def qpidd_standalone(root: Path, args: argparse.Namespace) -> dict[str, Any]:
    broker = BrokerProcess(
        root / "standalone",
        args=[
            f"--data-dir={root / 'standalone' / 'data'}",
            f"--max-connections={args.connections + 100}",
            "--log-level=info",
        ],
    ).start(timeout=120)
    try:
        assert broker.proc is not None
        return measure_broker("qpidd", broker.port, broker.proc.pid, args)
    finally:
        broker.stop()


def rabbitmq(args: argparse.Namespace) -> dict[str, Any]:
    port = args.rabbitmq_port
    try:
        # rabbitmq.sh waits 90 s for the node's boot; at load 30 it may take longer
        subprocess.run([str(RABBITMQ_SH), "start", str(port)], check=False)
        poll_until(
            lambda: (
                subprocess.run(
                    [str(RABBITMQ_SH), "status", str(port)], capture_output=True
                ).returncode
                == 0
            ),
            300,
            "RabbitMQ to serve",
            interval=2.0,
        )
        pid = int(Path(f"/tmp/rmq-bench-{port}/rabbitmq.pid").read_text().strip())
        version = subprocess.run(
            [str(RABBITMQ_SH), "ctl", str(port), "version"], capture_output=True, text=True
        ).stdout.strip()
        row = measure_broker(f"RabbitMQ {version}", port, pid, args)
        return row
    finally:
        subprocess.run([str(RABBITMQ_SH), "stop", str(port)], check=False)


class Phases:
    """When each publisher, after the kill, was admitted by a broker and had its first
    confirm, and how many dials were refused or failed meanwhile."""

    def __init__(self) -> None:
        self.killed = asyncio.Event()
        #: Publishers confirmed before the kill (each active queue busy before it).
        self.before: set[str] = set()
        self.first: dict[str, float] = {}
        self.admitted: dict[str, float] = {}
        self.dials_failed = 0


async def _publisher(ports: list[int], queue: str, phases: Phases, who: str) -> None:
    """Publisher ``who``: confirmed persistent messages to ``queue``, one at a time; after
    the kill, note when a broker admitted it and the time of its first confirm (on
    whichever broker admits it). Only a connection dialled after the kill counts: a confirm
    the killed primary sent just before it, read after, is not the new primary's."""
    first, killed = phases.first, phases.killed
    while who not in first:
        for port in ports:
            after = killed.is_set()
            try:
                client = await connect("127.0.0.1", port, user="guest", password="guest", timeout=5)
            except Exception:  # refused (not primary yet), reset, timed out: the next
                if after:
                    phases.dials_failed += 1
                await asyncio.sleep(0.02)
                continue
            if after:
                phases.admitted.setdefault(who, time.monotonic())
            try:
                channel = await client.open_channel()
                await channel.confirm_select()
                while who not in first:
                    await channel.publish("", queue, b"x", PERSISTENT)
                    if after:
                        first[who] = time.monotonic()
                    else:
                        phases.before.add(who)
                        await asyncio.sleep(0.01)
            except Exception:  # the broker died under it: dial again
                pass
            finally:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(client.close(), 2)


def active_names(queues: int, active: int) -> list[str]:
    """The queues of ``active`` publishers: spread evenly over the ``queues`` declared
    (``q0``, ``q1000``, ... of 10,000), not the first ones: a backup catches up on its
    queues in an order of its own, and the first declared came first in it."""
    return [f"q{(i * queues) // active % queues}" for i in range(active)]


def failover(
    root: Path,
    queues: int,
    active: int,
    timeout: float,
    keep: bool,
    backups: int = 1,
    restart: bool = False,
) -> dict[str, Any]:
    """The time from the primary's SIGKILL to every active queue's first confirm on the new
    primary (the promotion called at once, as the cluster manager would, with the other
    backups as the committed in-sync set: they hold every confirmed message, so the new
    primary's confirms wait for each of them, queue by queue, as it links to the new
    primary and catches up). ``active`` publishers whatever the queue count, on
    ``min(active, queues)`` queues (the one-queue run's share it): the clients' own work is
    the same in both runs. Then, timed from the kill, each member left ready again
    (``member2_ready_s``: its catch-up with the new primary), and with ``restart`` the
    killed broker started again on its store, timed until it is ready
    (``restarted_ready_s``: start, recovery, catch-up)."""
    cluster = Cluster(root, 1 + backups, "--ha-backup-timeout=30", "--max-connections=2000").start(
        timeout=120
    )
    try:
        cluster.promote(0, epoch=1)
        for b in range(1, 1 + backups):
            cluster.wait_state(b, "ready", timeout=timeout)
        asyncio.run(declare(cluster.ports[0], queues))
        for b in range(1, 1 + backups):
            poll_until(partial(_holds_queues, cluster, b, queues), timeout, "the backup's queues")
            cluster.wait_state(b, "ready", timeout=timeout)
        others = [str(_http_ha(cluster, b)["broker_id"]) for b in range(2, 1 + backups)]
        names = active_names(queues, active)
        load_before = load()

        async def run() -> dict[str, Any]:
            phases = Phases()
            first = phases.first
            publishers = [
                asyncio.create_task(_publisher(cluster.ports, n, phases, str(i)))
                for i, n in enumerate(names)
            ]
            await asyncio.sleep(2.0)  # steady publishing
            # ...on every active queue: on a loaded machine a publisher may not have had its
            # first confirm yet, and a queue idle before the kill is not among those a
            # member catches up on first (docs/ha-design.md, "Who a confirm waits for")
            began = time.monotonic()
            while len(phases.before) < len(names) and time.monotonic() - began < timeout:
                await asyncio.sleep(0.05)
            busy_before = len(phases.before)
            at = time.monotonic()
            cluster.kill(0)  # SIGKILL, then waits for the process to end (its sockets close)
            dead = time.monotonic()
            phases.killed.set()
            await asyncio.to_thread(cluster.promote, 1, 2, others)
            promoted = time.monotonic()
            deadline = time.monotonic() + timeout
            while len(first) < len(names) and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            for task in publishers:
                task.cancel()
            await asyncio.gather(*publishers, return_exceptions=True)
            if len(first) < len(names):
                raise RuntimeError(f"only {len(first)} of {len(names)} publishers confirmed")
            return {
                "_at": at,
                "failover_s": round(max(first.values()) - at, 3),
                # the killed primary's end (a SIGKILLed process in a disk write ends when
                # the write does: on a loaded disk, most of a second), and from then on
                "exit_s": round(dead - at, 3),
                "after_exit_s": round(max(first.values()) - dead, 3),
                # the phases: the promotion's answer, the last client admitted, the dials
                # refused or failed on the way (the killed primary's and the backup's)
                "promote_answered_s": round(promoted - at, 3),
                "last_admitted_s": round(max(phases.admitted.values()) - at, 3),
                "dials_failed": phases.dials_failed,
                "busy_before": busy_before,
            }

        figures = asyncio.run(run())
        # the catch-up after it: each member left (it links to the new primary and
        # catches up on every queue again), then the killed broker restarted on its store
        killed_at = figures.pop("_at")
        for b in range(2, 1 + backups):
            poll_until(partial(_is_ready, cluster, b), timeout, "the member ready again")
            figures[f"member{b}_ready_s"] = round(time.monotonic() - killed_at, 3)
        if restart:
            began = time.monotonic()
            cluster.brokers[0].start(timeout=timeout)
            poll_until(partial(_is_ready, cluster, 0), timeout, "the restarted broker ready")
            figures["restarted_ready_s"] = round(time.monotonic() - began, 3)
        row = {
            "queues": queues,
            "backups": backups,
            "active": len(set(names)),
            "publishers": len(names),
            **figures,
            "load_before": load_before,
            "load_end": load(),
        }
        if keep:
            row["logs"] = [str(b.log_file) for b in cluster.brokers]
        print(json.dumps(row), flush=True)
        return row
    finally:
        cluster.stop()


def _http_status(cluster: Cluster, i: int) -> dict[str, Any]:
    return dict(http("GET", cluster.brokers[i].mgmt_port, "/api/status"))


def _http_ha(cluster: Cluster, i: int) -> dict[str, Any]:
    return dict(http("GET", cluster.brokers[i].mgmt_port, "/api/ha?queues=summary"))


def _is_ready(cluster: Cluster, i: int) -> bool:
    try:
        return _http_ha(cluster, i).get("state") == "ready"
    except OSError:
        return False


def _holds_queues(cluster: Cluster, i: int, queues: int) -> bool:
    return int(_http_status(cluster, i)["queues"]) >= queues


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queues", type=int, default=10_000)
    parser.add_argument("--connections", type=int, default=2_000)
    parser.add_argument("--settle", type=float, default=5.0, help="seconds before each RSS")
    parser.add_argument("--rabbitmq-port", type=int, default=5680)
    parser.add_argument("--no-rabbitmq", action="store_true")
    parser.add_argument("--no-qpidd", action="store_true", help="no stand-alone qpidd row")
    parser.add_argument("--failover", action="store_true", help="also 1 vs --queues fail-over")
    parser.add_argument("--active", type=int, default=10, help="queues with a publisher")
    parser.add_argument("--repeat", type=int, default=1, help="fail-over pairs (1, N queues)")
    parser.add_argument(
        "--backups",
        type=int,
        default=1,
        help="backups of the fail-over's cluster (2: the one left is in the committed set)",
    )
    parser.add_argument(
        "--restart",
        action="store_true",
        help="after each fail-over, restart the killed broker and time its catch-up",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the brokers' directories (their logs)"
    )
    args = parser.parse_args()
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    root = Path(tempfile.mkdtemp(prefix="scale-vs-rabbitmq-"))
    rows: list[dict[str, Any]] = []
    try:
        if not args.no_qpidd:
            rows.append(qpidd_standalone(root, args))
        if not args.no_rabbitmq:
            rows.append(rabbitmq(args))
        if args.failover:
            for n in range(args.repeat):
                for queues in (1, args.queues):
                    rows.append(
                        failover(
                            root / f"fo{n}-{queues}",
                            queues,
                            args.active,
                            300,
                            args.keep,
                            args.backups,
                            args.restart,
                        )
                    )
    finally:
        if args.keep:
            print(f"kept: {root}", flush=True)
        else:
            shutil.rmtree(root, ignore_errors=True)
    print(json.dumps({"rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
