#!/usr/bin/env python3
"""Recovery rate of qpidd's message store after a SIGKILL (issue 11, target 200k msg/s).

A qpidd with a fresh --data-dir (--store-sync as given, fsync by default) is filled with
--messages persistent messages (delivery_mode 2) of --size bytes on one durable queue by
the lean asyncio client of broker/amqp/client/; the last one is published with a publisher
confirm, and since the journal writes in publish order, its confirm means that every
message before it is on disk too. The broker is then killed with SIGKILL, and --repeat
times restarted on the same directory, timed, and killed again:

- ``store``: the ``seconds`` of its ``store_recovered`` log event (Journal.recover and
  MessageStore.recover_into: read and check every segment, fold the records, re-create
  the queue and its messages), with ``messages`` checked equal to what was published;
- ``to listen``: from just before the process is spawned (interpreter start-up and imports
  included) until its AMQP port accepts connections;
- msg/s for both, the broker's CPU seconds by then (start-up included: on shared cores
  the wall-clock figures depend on others' work, the CPU far less), its peak RSS, and the
  1-minute load average before the start.

With --profile, the recovery is then run once more inside this process under cProfile
(Journal.recover + MessageStore.recover_into into a fresh VirtualHost, the broker
stopped) and the functions with the most time are printed. The broker and its directory
are removed at the end, also on ctrl-C.

    .venv/bin/python bench/store_recovery.py                          # 1M x 1 KiB, 3 restarts
    .venv/bin/python bench/store_recovery.py --messages 200000 --profile
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import signal
import statistics
import struct
import sys
import time
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.append(str(HERE.parent))  # after PYTHONPATH: a worktree given there wins

from ha_brokers import Broker, BrokerError, Brokers, wait_for  # noqa: E402
from proc_stats import process_cpu  # noqa: E402
from throughput import term_to_exit  # noqa: E402

from broker.amqp.client import connect  # noqa: E402

TARGET_MSGS_PER_S = 200_000
QUEUE = "store-recovery"
PERSISTENT = b"\x10\x00\x02"  # property flags: delivery-mode only; delivery-mode 2
_SEQ = struct.Struct(">Q")


async def _fill(port: int, messages: int, size: int) -> None:
    client = await connect("127.0.0.1", port, user="guest", password="guest", timeout=30)
    try:
        channel = await client.open_channel()
        await channel.declare_queue(QUEUE, durable=True)
        pad = b"\0" * max(0, size - _SEQ.size)
        publish = channel.publish
        pack = _SEQ.pack
        for seq in range(messages - 1):
            await publish("", QUEUE, pack(seq) + pad, PERSISTENT)
        # The last one confirmed: the journal writes in order, so all before it are durable.
        await channel.confirm_select()
        await publish("", QUEUE, pack(messages - 1) + pad, PERSISTENT)
        _, held, _ = await channel.declare_queue(QUEUE, passive=True)
        if held != messages:
            raise BrokerError(f"the broker holds {held} messages, {messages} were published")
    finally:
        await client.close()


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def restart_once(broker: Broker, messages: int, timeout: float) -> dict[str, float]:
    broker.log_file.unlink(missing_ok=True)  # only this start's events
    load = os.getloadavg()[0]
    broker.spawn()
    started = broker.started_at
    broker.wait_listening(timeout)
    listening = time.time() - started
    events = wait_for(
        "the store_recovered event", lambda: broker.events("store_recovered"), timeout
    )
    event = events[0]
    # On shared cores the wall-clock seconds depend on others' work; the CPU does not.
    cpu = process_cpu(broker.pid) or 0.0
    if event["messages"] != messages:
        raise BrokerError(f"recovered {event['messages']} messages, {messages} were confirmed")
    rss = broker.peak_rss_bytes() or 0
    broker.stop(signal.SIGKILL)
    seconds = float(event["seconds"])
    return {
        "store_s": seconds,
        "store_msgs_per_s": messages / seconds,
        "to_listen_s": listening,
        "to_listen_msgs_per_s": messages / listening,
        "peak_rss_mb": rss / 2**20,
        "cpu_to_listen_s": cpu,
        "cpu_msgs_per_s": messages / cpu if cpu else 0.0,
        "segments": float(event["segments"]),
        "load1": load,
    }


def profile(data_dir: Path, top: int) -> None:
    """Recovery once more in this process under cProfile; print the top functions."""
    from broker.core.vhost import VirtualHost
    from broker.store.journal import Journal
    from broker.store.message_store import MessageStore

    def recover() -> int:
        journal = Journal(data_dir)
        state = journal.recover()
        store = MessageStore(journal, VirtualHost(default_queue_limit=0))
        store.recover_into(state)
        return store.recovered_messages

    started = time.monotonic()
    recover()  # warm the page cache and imports as a restart finds them
    warm = time.monotonic() - started
    prof = cProfile.Profile()
    started = time.monotonic()
    count = prof.runcall(recover)
    took = time.monotonic() - started
    print(
        f"\nin-process recovery: {count} messages, {warm:.2f} s unprofiled, {took:.2f} s"
        " under cProfile; the functions by own time (tottime):"
    )
    stats = pstats.Stats(prof)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=1024, help=f"body bytes (min {_SEQ.size})")
    ap.add_argument("--repeat", type=int, default=3, help="restarts timed (medians)")
    ap.add_argument("--store-sync", choices=("fsync", "write", "none"), default="fsync")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds a restart may take")
    ap.add_argument("--profile", action="store_true", help="then profile recovery in-process")
    ap.add_argument("--top", type=int, default=25, help="functions shown with --profile")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.messages < 1 or args.repeat < 1 or args.size < _SEQ.size:
        ap.error(f"--messages and --repeat must be positive, --size at least {_SEQ.size}")
    signal.signal(signal.SIGTERM, term_to_exit)
    ok = True
    with Brokers(prefix="qpidd-store-recovery-") as brokers:
        broker = brokers.standalone("recovery", [f"--store-sync={args.store_sync}"])
        load = os.getloadavg()[0]
        started = time.monotonic()
        asyncio.run(_fill(broker.port, args.messages, args.size))
        fill_s = time.monotonic() - started
        data = broker.workdir / "data"
        size = _dir_bytes(data)
        print(
            f"filled {args.messages} x {args.size} B persistent in {fill_s:.1f} s"
            f" ({args.messages / fill_s:,.0f} msg/s, load1 {load:.1f}), store {size / 2**20:,.0f}"
            f" MiB; SIGKILL",
            flush=True,
        )
        broker.stop(signal.SIGKILL)
        runs = []
        for k in range(args.repeat):
            try:
                r = restart_once(broker, args.messages, args.timeout)
            except BrokerError as exc:
                print(f"restart {k + 1}: {exc}", file=sys.stderr)
                broker.stop(signal.SIGKILL)
                ok = False
                continue
            runs.append(r)
            print(
                f"restart {k + 1}: store_recovered {r['store_s']:.2f} s"
                f" ({r['store_msgs_per_s']:,.0f} msg/s), listening after {r['to_listen_s']:.2f} s"
                f" ({r['to_listen_msgs_per_s']:,.0f} msg/s), broker CPU by then"
                f" {r['cpu_to_listen_s']:.2f} s ({r['cpu_msgs_per_s']:,.0f} msg/s),"
                f" peak RSS {r['peak_rss_mb']:,.0f} MB,"
                f" load1 {r['load1']:.1f}",
                flush=True,
            )
            if args.json:
                print(json.dumps({"run": k + 1, "messages": args.messages, **r}), flush=True)
        if runs:
            store = statistics.median(r["store_s"] for r in runs)
            listen = statistics.median(r["to_listen_s"] for r in runs)
            rate = args.messages / store
            verdict = "met" if rate >= TARGET_MSGS_PER_S else "NOT met"
            print(
                f"median of {len(runs)}: store_recovered {store:.2f} s = {rate:,.0f} msg/s"
                f" (target {TARGET_MSGS_PER_S:,}: {verdict});"
                f" listening after {listen:.2f} s = {args.messages / listen:,.0f} msg/s"
            )
        if args.profile:
            profile(data, args.top)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
