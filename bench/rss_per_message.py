#!/usr/bin/env python3
"""Resident memory per queued message (issue 11, item 5): in memory, and paged to disk.

Starts a qpidd (from the tree on PYTHONPATH) for each mode, publishes ``--count`` messages
of ``--size`` bytes to one queue nobody consumes, and reads the broker's resident set size
(/proc/<pid>/statm) after every ``--step`` messages:

* ``memory``: no data directory, no memory limit: every message stays in memory.
* ``paged``: ``--data-dir`` and ``--max-memory`` (paging starts past half of it): the first
  messages fill the paging budget, the rest go to page files.

It prints the RSS growth per message over the whole run and the marginal growth per message
over the last half (for ``paged``: messages that all went to disk). Targets: under 1.5 KiB
per message in memory, under 0.3 KiB per paged message (1 KiB bodies).

``--release drain`` (consume every message, acknowledged in batches) or ``--release delete``
(delete the queue) then empties the queue and reads the RSS at once (``0 s MB``), half of
``--settle`` later (``mid MB``) and ``--settle`` seconds later (issue
32: within 20 % of its level before the fill, 30 s after a 300,000-message queue is drained
or deleted); ``after/base`` is that ratio. Where the rest stays is shown from
/proc/<pid>/smaps: ``heap`` (glibc's main heap: the bodies; ``malloc_trim`` hands it back)
and ``anon`` (anonymous mappings: Python's 1 MiB object arenas, each kept while one small
object in it lives), both after the release, and their growth over the level before the fill.

    .venv/bin/python bench/rss_per_message.py --count 1000000
    .venv/bin/python bench/rss_per_message.py --count 5000000 --modes paged
    .venv/bin/python bench/rss_per_message.py --count 300000 --modes memory --release delete
    .venv/bin/python bench/rss_per_message.py --count 100000 --modes memory --confirm

``--confirm`` publishes on a confirm channel, each publish waiting for its basic.ack.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pika

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from common.polling import free_port, poll_until, port_open  # noqa: E402

PAGE = 4096


def rss(pid: int) -> int:
    with open(f"/proc/{pid}/statm", "rb") as statm:
        return int(statm.read().split()[1]) * PAGE


def mapped(pid: int) -> tuple[int, int]:
    """Resident bytes of the process's main heap and of its anonymous mappings."""
    heap = anon = 0
    name = ""
    with open(f"/proc/{pid}/smaps") as smaps:
        for line in smaps:
            if line[0] in "0123456789abcdef" and "-" in line.split(" ", 1)[0]:
                parts = line.split()
                name = parts[5] if len(parts) > 5 else ""
            elif line.startswith("Rss:"):
                kib = int(line.split()[1]) * 1024
                if name == "[heap]":
                    heap += kib
                elif not name:
                    anon += kib
    return heap, anon


def _release(channel: Any, how: str, count: int) -> None:
    """Empty the queue: consume and acknowledge every message, or delete the queue."""
    if how == "delete":
        channel.queue_delete("rss")
        return
    channel.basic_qos(prefetch_count=1000)
    for taken, (method, _props, _body) in enumerate(
        channel.consume("rss", inactivity_timeout=30), 1
    ):
        if method is None:
            raise RuntimeError(f"drain stalled after {taken - 1} of {count} messages")
        if taken % 500 == 0 or taken == count:
            channel.basic_ack(method.delivery_tag, multiple=True)
        if taken == count:
            break
    channel.cancel()


def run(
    mode: str,
    count: int,
    size: int,
    step: int,
    max_memory: str,
    release: str,
    settle: float,
    confirm: bool = False,
) -> dict[str, float]:
    work = Path(tempfile.mkdtemp(prefix="rss-bench-"))
    port = free_port()
    args = [
        str(Path(sys.executable).with_name("qpidd")),
        "--interface=127.0.0.1",
        f"--port={port}",
        "--mgmt-port=0",
        "--log-level=warning",
        "--default-queue-limit=0",
    ]
    if mode == "paged":
        args += [f"--data-dir={work / 'data'}", f"--max-memory={max_memory}"]
    else:
        args += ["--max-memory=0"]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        poll_until(lambda: port_open(port), 90, "qpidd to listen")  # slow on a loaded machine
        url = f"amqp://guest:guest@127.0.0.1:{port}/%2F"
        connection = pika.BlockingConnection(pika.URLParameters(url))
        channel = connection.channel()
        if confirm:  # each publish waits for its basic.ack (pika's blocking channel)
            channel.confirm_delivery()
        channel.queue_declare("rss")
        body = b"r" * size

        def queued() -> int:
            return int(channel.queue_declare("rss", passive=True).method.message_count)

        time.sleep(0.5)
        base = rss(proc.pid)
        base_heap, base_anon = mapped(proc.pid)
        samples: list[tuple[int, int]] = [(0, base)]
        started = time.monotonic()
        sent = 0
        while sent < count:
            batch = min(step, count - sent)
            for _ in range(batch):
                channel.basic_publish("", "rss", body)
            sent += batch
            poll_until(lambda: queued() == sent, 120, f"{sent} messages queued")  # noqa: B023
            samples.append((sent, rss(proc.pid)))
        seconds = time.monotonic() - started
        after = after_0 = after_15 = after_heap = after_anon = 0
        if release:
            _release(channel, release, count)
            connection.close()
            released = time.monotonic()
            after_0 = rss(proc.pid)
            time.sleep(max(0.0, released + settle / 2 - time.monotonic()))
            after_15 = rss(proc.pid)
            time.sleep(max(0.0, released + settle - time.monotonic()))
            after = rss(proc.pid)
            after_heap, after_anon = mapped(proc.pid)
        else:
            connection.close()
        end = samples[-1][1]
        half_n, half_rss = samples[len(samples) // 2]
        paged = 0
        pages = work / "data" / "paging"
        if pages.exists():
            paged = sum(p.stat().st_size for p in pages.glob("*.page"))
        return {
            "base_mb": base / 1e6,
            "end_mb": end / 1e6,
            "per_msg_b": (end - base) / count,
            "marginal_b": (end - half_rss) / max(1, count - half_n),
            "page_mb": paged / 1e6,
            "publish_s": seconds,
            "after_0_mb": after_0 / 1e6,
            "after_15_mb": after_15 / 1e6,
            "after_mb": after / 1e6,
            "heap_mb": after_heap / 1e6,
            "heap_growth_mb": (after_heap - base_heap) / 1e6,
            "anon_mb": after_anon / 1e6,
            "anon_growth_mb": (after_anon - base_anon) / 1e6,
        }
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=1024, help="body bytes")
    ap.add_argument("--step", type=int, default=50_000, help="messages between RSS samples")
    ap.add_argument("--max-memory", default="400MB", help="qpidd --max-memory in paged mode")
    ap.add_argument("--modes", default="memory,paged")
    ap.add_argument("--release", choices=["", "drain", "delete"], default="")
    ap.add_argument("--settle", type=float, default=30.0, help="seconds after the release")
    ap.add_argument(
        "--confirm", action="store_true", help="publish on a confirm channel (each waits)"
    )
    opts = ap.parse_args()
    print(
        f"{'mode':8} {'count':>9} {'size':>6} {'base MB':>8} {'end MB':>8} {'B/msg':>7}"
        f" {'marginal B/msg':>15} {'pages MB':>9} {'publish s':>10}"
        + (
            f" {'0 s MB':>7} {'mid MB':>7} {'after MB':>9} {'after/base':>10}"
            f" {'heap MB (+)':>13} {'anon MB (+)':>13}"
            if opts.release
            else ""
        )
    )
    for mode in opts.modes.split(","):
        r = run(
            mode,
            opts.count,
            opts.size,
            opts.step,
            opts.max_memory,
            opts.release,
            opts.settle,
            opts.confirm,
        )
        print(
            f"{mode:8} {opts.count:>9} {opts.size:>6} {r['base_mb']:>8.1f} {r['end_mb']:>8.1f}"
            f" {r['per_msg_b']:>7.0f} {r['marginal_b']:>15.0f} {r['page_mb']:>9.1f}"
            f" {r['publish_s']:>10.1f}"
            + (
                f" {r['after_0_mb']:>7.1f} {r['after_15_mb']:>7.1f}"
                f" {r['after_mb']:>9.1f} {r['after_mb'] / r['base_mb']:>10.2f}"
                f" {r['heap_mb']:>6.1f} ({r['heap_growth_mb']:+5.1f})"
                f" {r['anon_mb']:>6.1f} ({r['anon_growth_mb']:+5.1f})"
                if opts.release
                else ""
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
