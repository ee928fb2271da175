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
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

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


def alternate(
    run: Callable[[Path, bool], Coroutine[Any, Any, float]], repeat: int
) -> tuple[list[float], list[float]]:
    """``run(directory, durable)`` ``repeat`` times each way, alternating, each in a new
    temporary directory and event loop: (the figures with the store, those without)."""
    stored: list[float] = []
    plain: list[float] = []
    for _ in range(repeat):
        for durable, into in ((True, stored), (False, plain)):
            with tempfile.TemporaryDirectory() as tmp:
                into.append(asyncio.run(run(Path(tmp), durable)))
    return stored, plain


def report(label: str, stored: list[float], plain: list[float], **figures: float) -> None:
    """One JSON line: the label, the broker package measured, ``figures`` and every run."""
    result = {
        "label": label,
        "broker": str(Path(broker.__file__)),
        **figures,
        "with_store": [round(v, 2) for v in stored],
        "without": [round(v, 2) for v in plain],
    }
    print(json.dumps(result))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=1024, help="body bytes")
    ap.add_argument("--in-flight", type=int, default=256)
    ap.add_argument("--batch", type=int, default=128, help="messages per group commit")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--label", default="")
    args = ap.parse_args()

    def run(directory: Path, durable: bool) -> Coroutine[Any, Any, float]:
        return _run(directory, args.messages, args.size, args.in_flight, args.batch, durable)

    stored, plain = alternate(run, args.repeat)
    store = statistics.median(stored) - statistics.median(plain)
    report(args.label, stored, plain, store_us_per_msg=round(store, 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
