#!/usr/bin/env python3
"""The queue's delivery path without sockets: CPU per message with C consumers on one queue.

In this process (the ``broker`` on PYTHONPATH, so two builds can be compared), one
:class:`~broker.core.queue.Queue` with C consumers that count credit as a 0-9-1 channel's
consumers do (a prefetch each, acknowledged one at a time, then ``credit_returned`` and
``dispatch`` as ``Deliveries.settle`` does). A backlog of ``--backlog`` messages keeps every
consumer at its prefetch (the same length for every C: the queue's length is not what is
compared); then each step acknowledges one delivery of a random consumer
(acknowledgements come in any order, as from many connections) and publishes one message.
Reported: CPU microseconds per message (thread time, median of ``--repeat``) and the
collector's share (``gc.callbacks``). The chooser's cost is the difference between C = 16
and C = 1,000 (issue 32: within 10 %).

    .venv/bin/python bench/dispatch_core.py --consumers 16,1000
    PYTHONPATH=/tmp/old-build .venv/bin/python bench/dispatch_core.py   # another build
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.append(str(Path(__file__).resolve().parent.parent))  # after PYTHONPATH

from broker.core import properties
from broker.core.message import Entry, Message
from broker.core.queue import Queue


class _Consumer:
    """A 0-9-1 channel consumer's credit (``ChannelConsumer.can_deliver``), no socket."""

    __slots__ = ("exclusive", "prefetch", "tag", "unacked", "writable")

    def __init__(self, tag: str, prefetch: int) -> None:
        self.tag = tag
        self.exclusive = False
        self.prefetch = prefetch
        self.unacked: list[Entry] = []
        self.writable = True

    def can_deliver(self) -> bool:
        return self.writable and len(self.unacked) < self.prefetch

    def deliver(self, queue: Queue, entry: Entry) -> None:
        queue.delivered(entry, False)
        self.unacked.append(entry)


def run(
    consumers: int, messages: int, prefetch: int, seed: int, backlog: int
) -> tuple[float, float]:
    queue = Queue("q", clock=time.monotonic)
    members = [_Consumer(f"c{i}", prefetch) for i in range(consumers)]
    for consumer in members:
        queue.add_consumer(consumer)
    body = b"x" * 100
    credit_returned: Any = getattr(queue, "credit_returned", None)
    for _ in range(max(backlog, consumers * prefetch * 2)):  # every consumer full, and more
        queue.enqueue(Message("", "q", properties.EMPTY, body))
    rng = random.Random(seed)
    picks = [rng.randrange(consumers) for _ in range(messages)]
    gc_time = [0.0, 0.0]

    def collected(phase: str, _info: dict[str, Any]) -> None:
        if phase == "start":
            gc_time[1] = time.thread_time()
        else:
            gc_time[0] += time.thread_time() - gc_time[1]

    gc.callbacks.append(collected)
    start = time.thread_time()
    try:
        for pick in picks:
            consumer = members[pick]
            while not consumer.unacked:
                consumer = members[(members.index(consumer) + 1) % consumers]
            queue.settle(consumer.unacked.pop(0))
            if credit_returned is not None:
                credit_returned(consumer)
            queue.dispatch()
            queue.enqueue(Message("", "q", properties.EMPTY, body))
    finally:
        gc.callbacks.remove(collected)
    seconds = time.thread_time() - start
    return seconds / messages * 1e6, gc_time[0] / messages * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--consumers", default="16,1000")
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--prefetch", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--backlog", type=int, default=20_000, help="messages queued first")
    opts = ap.parse_args()
    import broker

    print(f"broker from {Path(broker.__file__).parent}")
    print(f"{'consumers':>9} {'us/msg':>7} {'gc us/msg':>9}  (median of {opts.repeat})")
    for count in [int(x) for x in opts.consumers.split(",")]:
        runs = [
            run(count, opts.messages, opts.prefetch, seed, opts.backlog)
            for seed in range(opts.repeat)
        ]
        print(
            f"{count:>9} {statistics.median(r[0] for r in runs):>7.2f}"
            f" {statistics.median(r[1] for r in runs):>9.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
