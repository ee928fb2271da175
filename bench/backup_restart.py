#!/usr/bin/env python3
"""A backup restarting from its own store (issue 12, item 2; target: ready in under 5 s).

A real two-broker cluster (``qpidd --ha-cluster=yes``, each with its own --data-dir): the
first is promoted primary (epoch 1), the second becomes a ready backup. The primary's durable
queue is filled with --messages persistent messages (delivery_mode 2) of --size bytes by the
lean asyncio client of broker/amqp/client/ (the last one with a publisher confirm: the
journal writes in order and the backup acknowledges only what its own store made durable,
so that confirm covers every message before it on both brokers); the backup's copy is then
polled until it holds them all. Then, --repeat times for each stop in --stops:

1. the backup is stopped: ``kill`` (SIGKILL, its store left dirty) or ``term`` (SIGTERM, a
   clean stop);
2. the cluster manager's part, as ``qpid-ha in-sync --commit`` does (POST /api/ha/in-sync
   without the stopped backup, once the primary lists it pending removal): without it the
   primary would hold confirms for it;
3. meanwhile --publish new messages are published (the last one confirmed) and --ack of the
   oldest are consumed and acknowledged (basic.consume with prefetch = --ack, one basic.ack
   each) on the primary;
4. the backup is restarted on its data directory and timed until it is ``ready``.

The figures of a restart, from the backup's JSON log (timestamps, not polling):

- ``ready``: from just before the process is spawned (interpreter start-up and imports
  included) to its ``ha_state_changed`` -> ready event; split into ``store`` (the
  ``seconds`` of ``store_recovered``: Journal.recover and MessageStore.recover_into),
  ``start`` (the rest of the time to ``store_recovered``: interpreter, imports, options),
  ``to link`` (``store_recovered`` to ``ha_link_up``: listening, connecting to the primary)
  and ``catch-up`` (``ha_link_up`` to ready: the reconnect handshake on the positions it
  recovered, then the messages it lacks);
- the backup's CPU seconds by then (start-up included), and by phase (its CPU read when
  ``store_recovered`` and ``ha_link_up`` show in its log, polled every 50 ms), and the
  primary's CPU during the restart: on shared cores the wall-clock figures depend on
  others' work, the CPU far less;
- ``sent``: messages the primary's stream of the queue sent to the backup since it
  subscribed (GET /api/ha ``backups[].queues[].sent``): about --publish, not --messages,
  when the backup kept its store; ``recovered``: ``store_recovered`` ``messages``;
  ``walker``: which walker read the store (``native``, or ``python`` when the C walker is
  not built, docs/store.md);
- the 1-minute load average before the restart.

Each restart checks that the backup recovered every message it held, that it holds what the
primary holds once ready, and that the primary sent at most --publish messages. Medians over
the restarts of each stop. Every broker runs on loopback in a temporary directory and is
stopped by PID at the end, also on ctrl-C.

    .venv/bin/python bench/backup_restart.py                       # 1M x 1 KiB, 3 of each stop
    .venv/bin/python bench/backup_restart.py --messages 100000 --repeat 1 --stops kill
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import struct
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.append(str(HERE.parent))  # after PYTHONPATH: a worktree given there wins

from ha_brokers import Broker, BrokerError, Brokers, log_time, wait_for  # noqa: E402
from proc_stats import process_cpu  # noqa: E402
from throughput import term_to_exit  # noqa: E402

from broker.amqp.client import connect  # noqa: E402
from broker.amqp.client.wire import Delivery  # noqa: E402

TARGET_S = 5.0
QUEUE = "backup-restart"
PERSISTENT = b"\x10\x00\x02"  # property flags: delivery-mode only; delivery-mode 2
_SEQ = struct.Struct(">Q")
STOPS = {"kill": signal.SIGKILL, "term": signal.SIGTERM}


# -- the primary's clients ---------------------------------------------------------------


async def _publish(port: int, first: int, count: int, size: int) -> None:
    """``count`` persistent messages numbered from ``first``, the last one confirmed."""
    client = await connect("127.0.0.1", port, user="guest", password="guest", timeout=30)
    try:
        channel = await client.open_channel()
        await channel.declare_queue(QUEUE, durable=True)
        pad = b"\0" * max(0, size - _SEQ.size)
        publish = channel.publish
        pack = _SEQ.pack
        for seq in range(first, first + count - 1):
            await publish("", QUEUE, pack(seq) + pad, PERSISTENT)
        await channel.confirm_select()
        await publish("", QUEUE, pack(first + count - 1) + pad, PERSISTENT)
    finally:
        await client.close()


async def _consume_and_ack(port: int, count: int) -> None:
    """Consume the ``count`` oldest messages (prefetch ``count``) and ack each one."""
    client = await connect("127.0.0.1", port, user="guest", password="guest", timeout=30)
    try:
        channel = await client.open_channel()
        await channel.qos(count)
        done = asyncio.get_running_loop().create_future()
        acked = 0

        def delivered(delivery: Delivery) -> None:
            nonlocal acked
            if acked < count:  # later deliveries stay unacked: requeued at the close
                channel.ack(delivery.delivery_tag)
                acked += 1
                if acked == count:
                    done.set_result(None)

        tag = await channel.consume(QUEUE, delivered)
        await asyncio.wait_for(done, 120)
        await channel.cancel(tag)
        # A round trip after the acks: the broker has handled them all.
        await channel.declare_queue(QUEUE, passive=True)
    finally:
        await client.close()


def held(broker: Broker) -> int:
    """Messages on the queue of ``broker`` (GET /api/queues/NAME), -1 if unknown."""
    try:
        return int(broker.http("GET", f"/api/queues/{QUEUE}").get("messages", -1))
    except (OSError, BrokerError):
        return -1


def sent_to_backup(primary: Broker) -> int:
    """Messages the primary's stream of the queue sent to its (one) backup since it
    subscribed (``/api/ha`` ``backups[].queues[].sent``), -1 if not listed."""
    for backup in primary.ha().get("backups") or []:
        for row in backup.get("queues") or []:
            if row.get("queue") == QUEUE:
                return int(row["sent"])
    return -1


def in_sync_backups(primary: Broker) -> int:
    """Backups the primary reports ready and in its in-sync set."""
    return sum(1 for b in primary.ha().get("backups") or [] if b["ready"] and b["in_sync"])


def commit_in_sync(primary: Broker, timeout: float) -> None:
    """The cluster manager's part (``qpid-ha in-sync --commit``): once the primary lists
    the stopped backup pending removal, commit its in-sync set without it."""

    def pending() -> dict[str, Any] | None:
        in_sync = primary.ha()["in_sync"]
        return in_sync if in_sync["pending_removal"] else None

    in_sync = wait_for("the primary to list the backup pending removal", pending, timeout)
    body = {"cluster_manager": True, "epoch": primary.ha()["epoch"], "members": in_sync["wanted"]}
    primary.http("POST", "/api/ha/in-sync", body)


# -- one restart -----------------------------------------------------------------------------


def restart_once(
    primary: Broker, backup: Broker, stop: str, args: argparse.Namespace, first: int
) -> dict[str, Any]:
    wait_for("the primary to count the backup in sync", lambda: in_sync_backups(primary), 30)
    expected = held(backup)
    backup.stop(STOPS[stop])
    commit_in_sync(primary, args.timeout)
    started = time.monotonic()
    asyncio.run(_publish(primary.port, first, args.publish, args.size))
    asyncio.run(_consume_and_ack(primary.port, args.ack))
    meanwhile = time.monotonic() - started
    on_primary = held(primary)
    backup.log_file.unlink(missing_ok=True)  # only this start's events
    load = os.getloadavg()[0]
    primary_cpu0 = process_cpu(primary.pid)
    backup.spawn()
    spawned = backup.started_at
    pid = backup.pid
    # The backup's CPU seconds when each phase's event shows in its log (read just before
    # looking, so at most one polling interval of CPU late): on shared cores the phases'
    # CPU says more than their wall-clock seconds.
    cpu_at: dict[str, float | None] = {}

    def ready() -> bool:
        cpu = process_cpu(pid)
        if backup.proc is not None and backup.proc.poll() is not None:
            raise BrokerError(f"the backup exited with {backup.proc.returncode}")
        for event in backup.events("store_recovered", "ha_link_up"):
            cpu_at.setdefault(event["event"], cpu)
        return "ha_link_up" in cpu_at and backup.state() == "ready"

    wait_for("the backup to be ready", ready, args.timeout, 0.05)
    backup_cpu = process_cpu(pid)
    primary_cpu1 = process_cpu(primary.pid)
    events = {e["event"]: e for e in reversed(backup.events())}  # the first of each
    ready_events = [e for e in backup.events("ha_state_changed") if e.get("new") == "ready"]
    if "store_recovered" not in events or "ha_link_up" not in events or not ready_events:
        raise BrokerError("no store_recovered, ha_link_up or ready event in the backup's log")
    recovered = events["store_recovered"]
    recovered_at = log_time(recovered["ts"])
    link_up = log_time(events["ha_link_up"]["ts"])
    ready_at = log_time(ready_events[0]["ts"])
    sent = sent_to_backup(primary)
    wait_for("the backup to hold what the primary holds", lambda: held(backup) == on_primary, 30)
    if int(recovered["messages"]) != expected:
        raise BrokerError(f"recovered {recovered['messages']} messages, held {expected}")
    if not 0 <= sent <= args.publish:
        raise BrokerError(f"the primary sent {sent} messages, at most {args.publish} lacked")
    store_s = float(recovered["seconds"])
    cpu_recovered, cpu_link = cpu_at.get("store_recovered"), cpu_at.get("ha_link_up")
    known = None not in (backup_cpu, cpu_recovered, cpu_link)
    return {
        "stop": stop,
        "ready_s": ready_at - spawned,
        "store_s": store_s,
        "start_s": recovered_at - spawned - store_s,
        "to_link_s": link_up - recovered_at,
        "catch_up_s": ready_at - link_up,
        "backup_cpu_s": backup_cpu,
        "cpu_to_store_recovered_s": cpu_recovered,
        "cpu_to_link_s": cpu_link - cpu_recovered if known else None,  # type: ignore[operator]
        "cpu_catch_up_s": backup_cpu - cpu_link if known else None,  # type: ignore[operator]
        "primary_cpu_s": (
            None if primary_cpu0 is None or primary_cpu1 is None else primary_cpu1 - primary_cpu0
        ),
        "recovered": int(recovered["messages"]),
        "records": int(recovered["records"]),
        "sent": sent,
        "held": on_primary,
        "store_status": recovered.get("store_status"),
        "walker": recovered.get("walker", "?"),  # not logged before ca5f594
        "meanwhile_s": meanwhile,
        "peak_rss_mb": (backup.peak_rss_bytes() or 0) / 2**20,
        "load1": load,
    }


def _s(value: float | None) -> str:
    return "?" if value is None else f"{value:.2f}"


def _line(k: int, r: dict[str, Any]) -> str:
    cpu = r["backup_cpu_s"]
    return (
        f"{r['stop']} {k}: ready after {r['ready_s']:.2f} s = start {r['start_s']:.2f}"
        f" + store {r['store_s']:.2f} ({r['recovered']:,} msgs, {r['records']:,} records,"
        f" {r['store_status']}, {r['walker']} walker)"
        f" + to link {r['to_link_s']:.2f} + catch-up {r['catch_up_s']:.2f};"
        f" backup CPU {_s(cpu)} s ({_s(r['cpu_to_store_recovered_s'])} to store_recovered,"
        f" {_s(r['cpu_to_link_s'])} to link, {_s(r['cpu_catch_up_s'])} catch-up),"
        f" primary sent {r['sent']:,}, holds {r['held']:,};"
        f" peak RSS {r['peak_rss_mb']:,.0f} MB; load1 {r['load1']:.1f}"
    )


def _median(runs: Sequence[dict[str, Any]], key: str) -> float | None:
    known = [r[key] for r in runs if r[key] is not None]
    return statistics.median(known) if known else None


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--messages", type=int, default=1_000_000, help="the backlog the backup holds")
    ap.add_argument("--size", type=int, default=1024, help=f"body bytes (min {_SEQ.size})")
    ap.add_argument("--publish", type=int, default=10_000, help="published while it is down")
    ap.add_argument("--ack", type=int, default=10_000, help="consumed and acked while down")
    ap.add_argument("--repeat", type=int, default=3, help="restarts of each stop (medians)")
    ap.add_argument("--stops", default="kill,term", help="comma-separated: kill, term")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds a step may take")
    ap.add_argument("--json", action="store_true", help="also one JSON line per restart")
    ap.add_argument("--keep", action="store_true", help="keep the brokers' directories")
    args = ap.parse_args(argv)
    stops = [s for s in args.stops.split(",") if s]
    if args.messages < 1 or args.repeat < 1 or args.size < _SEQ.size or args.publish < 1:
        ap.error(f"counts must be positive, --size at least {_SEQ.size}")
    if not 0 < args.ack <= args.messages or not stops or set(stops) - STOPS.keys():
        ap.error("--ack must be 1..--messages; --stops a list of kill, term")
    signal.signal(signal.SIGTERM, term_to_exit)
    ok = True
    with Brokers(prefix="qpidd-backup-restart-", keep=args.keep) as brokers:
        if args.keep:
            print(f"brokers' directories in {brokers.root}", flush=True)
        primary, backup = brokers.cluster("restart", 1)
        load = os.getloadavg()[0]
        started = time.monotonic()
        asyncio.run(_publish(primary.port, 0, args.messages, args.size))
        wait_for(
            "the backup to hold every message",
            lambda: held(backup) == args.messages,
            args.timeout,
            0.5,
        )
        fill_s = time.monotonic() - started
        print(
            f"filled {args.messages:,} x {args.size} B persistent in {fill_s:.1f} s"
            f" ({args.messages / fill_s:,.0f} msg/s, load1 {load:.1f}), the backup holds them",
            flush=True,
        )
        runs: dict[str, list[dict[str, Any]]] = {s: [] for s in stops}
        first = args.messages
        for k in range(1, args.repeat + 1):
            for stop in stops:
                try:
                    r = restart_once(primary, backup, stop, args, first)
                except BrokerError as exc:
                    print(f"{stop} {k}: {exc}", file=sys.stderr, flush=True)
                    ok = False
                    backup.stop(signal.SIGKILL)
                    return 1
                first += args.publish
                runs[stop].append(r)
                print(_line(k, r), flush=True)
                if args.json:
                    print(json.dumps({"run": k, "messages": args.messages, **r}), flush=True)
        for stop, done in runs.items():
            if not done:
                continue
            ready = statistics.median(r["ready_s"] for r in done)
            verdict = "met" if ready < TARGET_S else "NOT met"
            parts = ", ".join(
                f"{key} {value:.2f}"
                for key in (
                    "start_s",
                    "store_s",
                    "to_link_s",
                    "catch_up_s",
                    "backup_cpu_s",
                    "cpu_to_store_recovered_s",
                    "cpu_to_link_s",
                    "cpu_catch_up_s",
                    "primary_cpu_s",
                )
                if (value := _median(done, key)) is not None
            )
            print(
                f"median of {len(done)} {stop}: ready after {ready:.2f} s (target < {TARGET_S:.0f}"
                f" s: {verdict}); {parts}; primary sent {_median(done, 'sent'):,.0f};"
                f" load1 {_median(done, 'load1'):.1f}"
            )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
