#!/usr/bin/env python3
"""CPU per persistent message of the store's part of the publish path, in process.

A :class:`~broker.core.vhost.VirtualHost` with a durable queue and a
:class:`~broker.store.message_store.MessageStore` on a real
:class:`~broker.store.journal.Journal` (``--store-sync write`` on a temporary directory: its
writer thread, group commits and compaction, the broker's ``compaction_lag`` of 1): each
message is published with a publisher-confirm handle, as a channel does, and once
--in-flight later ones are stored it is taken and acknowledged (``get`` + ``delivered``
no-ack: the enqueue, the content, the dequeue), with a group commit awaited every --batch
messages. The same run with the queue not durable (nothing stored) is the rest of the
path; the difference of the process's CPU time (every thread) per message is the store's.
Runs alternate (store, no store) --repeat times; medians printed as one JSON line.

For comparing builds, run it with each build on PYTHONPATH (from another directory):

    PYTHONPATH=/tmp/wt-main .venv/bin/python bench/store_path_cpu.py --repeat 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parent.parent))  # after PYTHONPATH

import broker
from broker.core.confirms import PublisherConfirms
from broker.core.message import Message
from broker.core.vhost import VirtualHost
from broker.store.journal import Journal, SyncPolicy
from broker.store.message_store import MessageStore

PERSISTENT = bytes.fromhex("1000") + b"\x02"  # property flags: delivery-mode only; mode 2


async def _run(
    directory: Path, messages: int, size: int, in_flight: int, batch: int, durable: bool
) -> float:
    journal = Journal(directory, sync=SyncPolicy.WRITE)
    journal.compaction_lag = 1  # the broker's (an attribute older builds do not read)
    vhost = VirtualHost()
    MessageStore(journal, vhost).recover_into(journal.recover())
    journal.start()
    queue = vhost.declare_queue("q", durable=durable)
    exchange = vhost.exchange("")
    confirms = PublisherConfirms()
    body = b"x" * size
    cpu0 = time.process_time()
    for i in range(messages):
        handle = confirms.publish()
        vhost.publish(exchange, Message("", "q", PERSISTENT, body, confirm=handle))
        handle.release()
        if i >= in_flight:
            entry = queue.get()
            assert entry is not None
            queue.delivered(entry, no_ack=True)
        if i % batch == batch - 1:
            done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
            journal.after_durable(done.set_result)
            await done
            confirms.take_replies()
    cpu = time.process_time() - cpu0
    assert await journal.close()
    return cpu / messages * 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=1024, help="body bytes")
    ap.add_argument("--in-flight", type=int, default=256)
    ap.add_argument("--batch", type=int, default=128, help="messages per group commit")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    stored: list[float] = []
    plain: list[float] = []
    for _ in range(args.repeat):
        for durable, into in ((True, stored), (False, plain)):
            with tempfile.TemporaryDirectory() as tmp:
                run = _run(Path(tmp), args.messages, args.size, args.in_flight, args.batch, durable)
                into.append(asyncio.run(run))
    result = {
        "label": args.label,
        "broker": str(Path(broker.__file__)),
        "store_us_per_msg": round(statistics.median(stored) - statistics.median(plain), 2),
        "with_store": [round(v, 2) for v in stored],
        "without": [round(v, 2) for v in plain],
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
