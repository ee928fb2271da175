#!/usr/bin/env python3
"""Catch-up rate of a new HA backup joining a primary that holds a large backlog.

A primary (``qpidd --ha-cluster=yes``, promoted with epoch 1) is filled with --messages
messages of --size bytes (default 1,000,000 x 1 KiB) on --queues queues (default one),
published by the lean asyncio client of broker/amqp/client/; then, --repeat times, a
new backup (fresh data directory) is started and timed until it is ``ready``:

- ``from start``: from just before the backup process is spawned to its
  ``ha_state_changed`` -> ready log event (so interpreter start-up is included);
- ``from link up``: from its ``ha_link_up`` log event to ready: the replication itself;
- msgs/s: messages / that time, for both;
- the backup's peak RSS (VmHWM) when ready, and the CPU seconds the backup and the
  primary used from link up to ready, with ``other%``: CPU used meanwhile by processes that
  are neither of them nor this script, in % of one core (the cores may be shared).

Readiness is polled on the backup's GET /api/ha (``state``); the figures come from the
log events' timestamps, which do not depend on the polling interval. Every repeat checks
that the backup holds every message on every queue, and that the primary reports it ready;
then the backup is stopped (SIGTERM) and the next one starts. Medians over the repeats.
Every broker runs on loopback in a temporary directory and is stopped by PID at the end,
also on ctrl-C.

    .venv/bin/python bench/catchup.py                         # 1M x 1 KiB, one queue, 3 runs
    .venv/bin/python bench/catchup.py --messages 200000 --queues 4 --repeat 5 --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import statistics
import struct
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from ha_brokers import Broker, BrokerError, Brokers, log_time, wait_for  # noqa: E402
from proc_stats import host_cpu, process_cpu  # noqa: E402
from throughput import term_to_exit  # noqa: E402

from broker.amqp.client import connect  # noqa: E402
from common.polling import PollTimeout, poll_until_async  # noqa: E402

TARGET_MSGS_PER_S = 100_000
_SEQ = struct.Struct(">Q")


@dataclass
class CatchUp:
    run: str
    messages: int
    queues: int
    from_start_s: float = 0.0
    from_link_up_s: float = 0.0
    start_to_link_up_s: float = 0.0
    msgs_per_s_from_start: float = 0.0
    msgs_per_s_from_link_up: float = 0.0
    backup_peak_rss_mb: float = 0.0
    backup_cpu_s: float | None = None  # link up to ready
    backup_faults_per_msg: float | None = None  # minor page faults, link up to ready
    primary_cpu_s: float | None = None
    other_pct: float | None = None
    steal_s: float = 0.0
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


# -- filling the primary ------------------------------------------------------------------


async def _fill(port: int, queues: Sequence[str], messages: int, size: int) -> None:
    client = await connect("127.0.0.1", port, user="guest", password="guest", timeout=30)
    try:
        channel = await client.open_channel()
        for name in queues:
            await channel.declare_queue(name)
        pad = b"\0" * max(0, size - _SEQ.size)
        publish = channel.publish
        pack = _SEQ.pack
        count = len(queues)
        for seq in range(messages):
            await publish("", queues[seq % count], pack(seq) + pad)
        # Publishes are handled in order on one connection, so the declares below see them
        # all; poll anyway, in case the broker is still reading the socket.
        counts: list[int] = []

        async def all_held() -> bool:
            held = 0
            for name in queues:
                _, ready, _ = await channel.declare_queue(name, passive=True)
                held += ready
            counts.append(held)
            if held > messages:
                raise BrokerError(f"primary holds {held} messages, {messages} were published")
            return held == messages

        try:
            await poll_until_async(all_held, 120, "the primary to hold every message", interval=0.1)
        except PollTimeout:
            raise BrokerError(
                f"primary holds {counts[-1]} messages, {messages} were published"
            ) from None
    finally:
        await client.close()


def fill(primary: Broker, queues: Sequence[str], messages: int, size: int) -> float:
    """Publish ``messages`` round robin over ``queues``; return the seconds it took."""
    start = time.monotonic()
    asyncio.run(_fill(primary.port, queues, messages, size))
    return time.monotonic() - start


# -- one backup joining ---------------------------------------------------------------------


def _cpu(pid: int | None) -> float | None:
    return process_cpu(pid)


def _faults(pid: int) -> int | None:
    """Minor page faults of process ``pid`` so far (each costs 6-13 us on the reference VM)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[7])
    except (OSError, IndexError, ValueError):
        return None


def join_once(
    backup: Broker,
    primary: Broker,
    queues: Sequence[str],
    messages: int,
    run: str,
    timeout: float,
    poll: float,
) -> CatchUp:
    res = CatchUp(run=run, messages=messages, queues=len(queues))
    backup.spawn()
    started = backup.started_at
    try:
        backup.wait_listening()
        backup_pid = backup.pid
        # The backup's CPU and the host's at link up are read from the log timestamps'
        # neighbourhood: sample until the link is up, then once at ready.
        link_up: float | None = None
        at_link: tuple[float, float | None, float | None, float, float, int | None] | None = None

        def ready() -> bool:
            nonlocal link_up, at_link
            if link_up is None:
                ups = backup.events("ha_link_up")
                if ups:
                    link_up = log_time(ups[0]["ts"])
                    busy, steal = host_cpu()
                    at_link = (
                        busy,
                        _cpu(backup_pid),
                        _cpu(primary.pid),
                        steal,
                        time.process_time(),
                        _faults(backup_pid),
                    )
            return backup.state() == "ready"

        wait_for(f"{backup.name} to be ready", ready, timeout, poll)
        busy1, steal1 = host_cpu()
        backup_cpu1, primary_cpu1, me1 = _cpu(backup_pid), _cpu(primary.pid), time.process_time()
        faults1 = _faults(backup_pid)
        ready_events = [e for e in backup.events("ha_state_changed") if e.get("new") == "ready"]
        link_events = backup.events("ha_link_up")
        if not ready_events or not link_events:
            raise BrokerError("no ha_link_up or ready event in the backup's log")
        ready_at = log_time(ready_events[0]["ts"])
        link_up = log_time(link_events[0]["ts"])
        res.from_start_s = ready_at - started
        res.from_link_up_s = ready_at - link_up
        res.start_to_link_up_s = link_up - started
        res.msgs_per_s_from_start = messages / res.from_start_s
        res.msgs_per_s_from_link_up = messages / res.from_link_up_s
        rss = backup.peak_rss_bytes()
        res.backup_peak_rss_mb = (rss or 0) / 2**20
        if at_link is not None:
            busy0, backup_cpu0, p_cpu0, steal0, me_at_link, faults0 = at_link
            if faults0 is not None and faults1 is not None:
                res.backup_faults_per_msg = (faults1 - faults0) / messages
            if backup_cpu0 is not None and backup_cpu1 is not None:
                res.backup_cpu_s = backup_cpu1 - backup_cpu0
            if p_cpu0 is not None and primary_cpu1 is not None:
                res.primary_cpu_s = primary_cpu1 - p_cpu0
            window = res.from_link_up_s
            if res.backup_cpu_s is not None and res.primary_cpu_s is not None and window > 0:
                other = (busy1 - busy0) - res.backup_cpu_s - res.primary_cpu_s - (me1 - me_at_link)
                res.other_pct = max(0.0, other) / window * 100
            res.steal_s = steal1 - steal0
        _check(backup, primary, queues, messages, res)
    except BrokerError as exc:
        res.errors.append(str(exc))
    finally:
        backup.stop()
    return res


def _check(
    backup: Broker, primary: Broker, queues: Sequence[str], messages: int, res: CatchUp
) -> None:
    """The backup holds every message of every queue; the primary reports it ready."""
    status = backup.ha()
    held = {q["name"]: q for q in status.get("queues", [])}
    total = 0
    for name in queues:
        q = held.get(name)
        if q is None:
            res.errors.append(f"the backup has no queue {name!r}")
            continue
        if not q.get("caught_up"):
            res.errors.append(f"queue {name!r} not caught up on the backup")
        total += int(q.get("messages", 0))
    if total != messages:
        res.errors.append(f"the backup holds {total} messages, the primary {messages}")
    try:
        wait_for("the primary to report the backup ready", lambda: primary.ready_backups() >= 1, 10)
    except BrokerError as exc:
        res.errors.append(str(exc))


# -- reporting -------------------------------------------------------------------------------


def median_of(runs: Sequence[CatchUp]) -> CatchUp:
    med = CatchUp(run="median", messages=runs[0].messages, queues=runs[0].queues)
    for name in (
        "from_start_s",
        "from_link_up_s",
        "start_to_link_up_s",
        "msgs_per_s_from_start",
        "msgs_per_s_from_link_up",
        "backup_peak_rss_mb",
        "steal_s",
    ):
        setattr(med, name, statistics.median(getattr(r, name) for r in runs))
    for name in ("backup_cpu_s", "primary_cpu_s", "other_pct", "backup_faults_per_msg"):
        known = [v for v in (getattr(r, name) for r in runs) if v is not None]
        setattr(med, name, statistics.median(known) if known else None)
    med.errors = [e for r in runs for e in r.errors]
    return med


HEAD = (
    f"{'run':>6} {'msgs':>9} {'Q':>3} {'start->rdy s':>12} {'msgs/s':>9} {'link->rdy s':>11} "
    f"{'msgs/s':>9} {'start->link':>11} {'rss MB':>7} {'bk cpu':>6} {'pr cpu':>6} "
    f"{'flt/msg':>7} {'other%':>6} status"
)


def _opt(value: float | None, width: int, digits: int) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:>{width}.{digits}f}"


def row(r: CatchUp) -> str:
    return (
        f"{r.run:>6} {r.messages:>9} {r.queues:>3} {r.from_start_s:>12.2f} "
        f"{r.msgs_per_s_from_start:>9.0f} {r.from_link_up_s:>11.2f} "
        f"{r.msgs_per_s_from_link_up:>9.0f} {r.start_to_link_up_s:>11.2f} "
        f"{r.backup_peak_rss_mb:>7.0f} {_opt(r.backup_cpu_s, 6, 1)} "
        f"{_opt(r.primary_cpu_s, 6, 1)} {_opt(r.backup_faults_per_msg, 7, 2)} "
        f"{_opt(r.other_pct, 6, 0)} {'ok' if r.ok else 'FAIL'}"
    )


def as_json(r: CatchUp, args: argparse.Namespace, extra: dict[str, Any]) -> str:
    d = asdict(r)
    d.update(ok=r.ok, size=args.size, **extra)
    return json.dumps(d, sort_keys=True)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--messages", type=int, default=1_000_000, help="messages in total")
    ap.add_argument("--size", type=int, default=1024, help="body bytes (min 8)")
    ap.add_argument("--queues", type=int, default=1, help="queues to spread them over")
    ap.add_argument("--repeat", type=int, default=3, help="backups to time (medians reported)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds for one catch-up")
    ap.add_argument("--poll", type=float, default=0.1, help="seconds between /api/ha polls")
    ap.add_argument("--keep", action="store_true", help="keep the brokers' directories")
    ap.add_argument("--json", action="store_true", help="also print JSON lines")
    args = ap.parse_args(argv)
    if args.messages < 1 or args.queues < 1 or args.repeat < 1 or args.size < _SEQ.size:
        ap.error("--messages, --queues, --repeat must be positive, --size at least 8")
    signal.signal(signal.SIGTERM, term_to_exit)

    runs: list[CatchUp] = []
    try:
        with Brokers(prefix="qpidd-catchup-", keep=args.keep) as brokers:
            primary, backup = brokers.cluster_members("catchup", 2)
            primary.start()
            primary.wait_state("joining")
            primary.promote(1)
            primary.wait_state("active")
            queues = [f"catchup-{i}" for i in range(args.queues)]
            print(
                f"filling the primary: {args.messages} x {args.size} B on {args.queues} "
                f"queue(s) ...",
                flush=True,
            )
            seconds = fill(primary, queues, args.messages, args.size)
            primary_rss = (primary.peak_rss_bytes() or 0) / 2**20
            print(
                f"filled in {seconds:.1f} s ({args.messages / seconds:,.0f} msgs/s), "
                f"primary RSS {primary_rss:,.0f} MB; logs in {brokers.root}",
                flush=True,
            )
            extra = {"fill_s": seconds, "primary_peak_rss_mb": primary_rss}
            print(HEAD, flush=True)
            for k in range(args.repeat):
                if k:
                    backup = brokers.replacement(backup, f"catchup-backup-{k + 1}")
                wait_for("the primary to have no backup", lambda: not _backups(primary), 30)
                r = join_once(
                    backup, primary, queues, args.messages, str(k + 1), args.timeout, args.poll
                )
                runs.append(r)
                print(row(r), flush=True)
                for e in r.errors:
                    print(f"    error: {e}", file=sys.stderr, flush=True)
                if args.json:
                    print(as_json(r, args, extra), flush=True)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    med = median_of(runs)
    print()
    print(
        f"median of {len(runs)} backups, {args.messages} x {args.size} B on {args.queues} queue(s):"
    )
    print(HEAD)
    print(row(med))
    if args.json:
        print(as_json(med, args, extra), flush=True)
    rate = med.msgs_per_s_from_start
    verdict = "met" if rate >= TARGET_MSGS_PER_S else "NOT met"
    print(
        f"target >= {TARGET_MSGS_PER_S:,} msgs/s from the backup's start: {verdict} "
        f"({rate:,.0f}; {med.msgs_per_s_from_link_up:,.0f} from link up)"
    )
    return 0 if med.ok else 1


def _backups(primary: Broker) -> list[Any]:
    """Backups the primary still counts as connected."""
    return [b for b in primary.ha().get("backups", []) if b.get("ready")]


if __name__ == "__main__":
    sys.exit(main())
