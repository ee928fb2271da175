"""CPU of each slice of a backup's snapshot applied over a backup that holds other queues.

A backup holds QUEUES queues (``old*``), half of them bound to topic exchanges, BIG of them
with a backlog of BACKLOG messages; a snapshot names QUEUES other queues (``new*``), half
bound to other topic exchanges. Applying it deletes every old queue, exchange and binding
and declares the new ones, ``SLICE`` objects a slice
(:meth:`~broker.ha.broker_replicator.BrokerReplicator.apply_steps`). Prints each slice's
CPU (the thread's CPU clock): its maximum, its median, the slowest slices' indexes.
The collector is set as qpidd sets it once it listens (:func:`broker.collector.tune_after_start`,
after the backup's state is built); ``--no-gc``: off while the snapshot is applied (its
passes are not this code's).
``--store``: the backup's vhost has a store (a journal in a temporary directory), its old
queues durable and their backlogs persistent, as on a backup with ``--data-dir``.

    PYTHONPATH=$PWD python bench/snapshot_slices.py [--queues 10000] [--store]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from broker.collector import tune_after_start
from broker.core.message import Message
from broker.core.vhost import VirtualHost
from broker.ha.broker_replicator import BrokerReplicator
from common.slices import SLICE

PERSISTENT = bytes.fromhex("1000") + b"\x02"  # property flags: delivery-mode 2


def snapshot(prefix: str, queues: int, exchanges: int) -> dict[str, Any]:
    return {
        "type": "snapshot",
        "queues": [
            {"name": f"{prefix}{i}", "replicate": "all", "durable": True, "arguments": {}}
            for i in range(queues)
        ],
        "exchanges": [
            {"name": f"{prefix}x{j}", "type": "topic", "durable": True, "arguments": {}}
            for j in range(exchanges)
        ],
        "bindings": [
            {
                "queue": f"{prefix}{i}",
                "exchange": f"{prefix}x{i % exchanges}",
                "routing_key": f"a.{i}.#",
                "arguments": {},
            }
            for i in range(0, queues, 2)
        ],
    }


async def measure(args: argparse.Namespace) -> list[float]:
    vhost = VirtualHost()
    journal = None
    if args.store:
        from broker.store.journal import Journal, SyncPolicy
        from broker.store.message_store import MessageStore

        journal = Journal(Path(tempfile.mkdtemp(prefix="snapslices-")), sync=SyncPolicy.NONE)
        MessageStore(journal, vhost).recover_into(journal.recover())
    replicator = BrokerReplicator(vhost)
    replicator.apply(snapshot("old", args.queues, args.exchanges))
    default = vhost.exchange("")
    for i in range(args.big):
        for n in range(args.backlog):
            vhost.publish(default, Message("", f"old{i}", PERSISTENT, b"m%d" % n))
        await asyncio.sleep(0)
    event = snapshot("new", args.queues, args.exchanges)
    tune_after_start()  # the collector as qpidd sets it, the backup's objects frozen
    if args.no_gc:  # this code's own CPU: the collector's passes apart
        gc.disable()
    steps = replicator.apply_steps(event, args.slice)
    times: list[float] = []
    while True:
        began = time.thread_time()
        try:
            next(steps)
        except StopIteration:
            times.append((time.thread_time() - began) * 1000.0)
            break
        times.append((time.thread_time() - began) * 1000.0)
        await asyncio.sleep(0)
    assert len(vhost.queues) == args.queues
    if journal is not None:
        await journal.close()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--queues", type=int, default=10_000)
    parser.add_argument("--exchanges", type=int, default=20)
    parser.add_argument("--big", type=int, default=3, help="old queues with a backlog")
    parser.add_argument("--backlog", type=int, default=50_000)
    parser.add_argument("--slice", type=int, default=SLICE)
    parser.add_argument("--store", action="store_true")
    parser.add_argument("--no-gc", action="store_true", help="the collector off meanwhile")
    args = parser.parse_args()
    times = asyncio.run(measure(args))
    slowest = sorted(range(len(times)), key=lambda i: -times[i])[:5]
    print(
        f"slices={len(times)} max_ms={max(times):.1f} median_ms={statistics.median(times):.1f}"
        f" total_ms={sum(times):.0f} slowest={[(i, round(times[i], 1)) for i in slowest]}"
    )


if __name__ == "__main__":
    main()
