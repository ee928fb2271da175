#!/usr/bin/env python3
"""CPU per message of an HA backup's apply path, in process (no sockets, no primary).

What a backup does with one queue's replication stream once the batches are read: each
batch body is decoded (:func:`~broker.ha.wire.decode_batch`) and applied by a
:class:`~broker.ha.queue_replicator.QueueReplicator` to a durable queue whose
:class:`~broker.store.message_store.MessageStore` writes to a real
:class:`~broker.store.journal.Journal` (``--store-sync write`` on a temporary directory:
its writer thread, group commits and compaction, the broker's ``compaction_lag`` of 1).
The batches are those a primary sends (``EnqueuePacker``: --batch persistent messages of
--size bytes each, then a DEQUEUE of the messages --in-flight before them, as a consumer
on the primary acknowledges them), and after each batch a group commit is awaited, as the
backup acknowledges a batch only once it is durable. The same run with the queue not
durable (nothing stored) is the rest of the path. Runs alternate (store, no store)
--repeat times; medians of the process's CPU time (every thread) per message printed as
one JSON line.

For comparing builds, run it with each build on PYTHONPATH (from another directory):

    PYTHONPATH=/tmp/wt-main .venv/bin/python bench/backup_apply_cpu.py --repeat 5
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.append(str(Path(__file__).resolve().parent.parent))  # after PYTHONPATH

from store_path_cpu import alternate, report

from broker.core.vhost import VirtualHost
from broker.ha.id_set import IdSet
from broker.ha.queue_replicator import QueueReplicator
from broker.ha.wire import Dequeue, EnqueuePacker, decode_batch, encode_batch
from broker.store.journal import Journal, SyncPolicy
from broker.store.message_store import MessageStore

PERSISTENT = bytes.fromhex("1000") + b"\x02"  # property flags: delivery-mode only; mode 2


def batches(messages: int, size: int, batch: int, in_flight: int) -> list[bytes]:
    """The bodies a primary sends for ``messages`` messages to queue ``q``: ``batch``
    enqueues each, then the dequeue of those ``in_flight`` messages older."""
    packer = EnqueuePacker()
    body = b"x" * size
    bodies = []
    acked = 0
    for first in range(1, messages + 1, batch):
        last = min(first + batch - 1, messages)
        parts = [EnqueuePacker.VERSION_BYTE]
        for position in range(first, last + 1):
            parts += packer.pack(position, "", "q", PERSISTENT, body)[:3]
        if last - in_flight > acked:
            ids = IdSet.from_ranges([(acked + 1, last - in_flight)])
            parts.append(encode_batch([Dequeue(ids)])[1:])  # without its version byte
            acked = last - in_flight
        bodies.append(b"".join(parts))
    return bodies


async def _run(
    directory: Path, bodies: list[bytes], messages: int, in_flight: int, durable: bool
) -> float:
    journal = Journal(directory, sync=SyncPolicy.WRITE)
    journal.compaction_lag = 1  # the broker's
    vhost = VirtualHost()
    MessageStore(journal, vhost).recover_into(journal.recover())
    journal.start()
    queue = vhost.declare_queue("q", durable=durable)
    replicator = QueueReplicator(queue)
    loop = asyncio.get_running_loop()
    cpu0 = time.process_time()
    for body in bodies:
        replicator.apply(decode_batch(body))
        done: asyncio.Future[bool] = loop.create_future()
        journal.after_durable(done.set_result)
        journal.hand_over()
        await done
    cpu = time.process_time() - cpu0
    left = min(messages, in_flight)  # the dequeues stop that many short of the last
    if replicator.enqueued_total != messages or queue.message_count != left:
        raise SystemExit(
            f"applied {replicator.enqueued_total} of {messages} messages,"
            f" {queue.message_count} left on the queue (expected {left})"
        )
    if not await journal.close():
        raise SystemExit("the journal did not close clean")
    return cpu / messages * 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=1024, help="body bytes")
    ap.add_argument("--batch", type=int, default=32, help="enqueues a batch")
    ap.add_argument("--in-flight", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    for name in ("messages", "size", "batch", "repeat"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} must be 1 or more, not {getattr(args, name)}")
    if args.in_flight < 0:
        ap.error(f"--in-flight must be 0 or more, not {args.in_flight}")
    bodies = batches(args.messages, args.size, args.batch, args.in_flight)

    def run(directory: Path, durable: bool) -> Coroutine[Any, Any, float]:
        return _run(directory, bodies, args.messages, args.in_flight, durable)

    stored, plain = alternate(run, args.repeat)
    report(
        args.label,
        stored,
        plain,
        with_store_us_per_msg=round(statistics.median(stored), 2),
        without_us_per_msg=round(statistics.median(plain), 2),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
