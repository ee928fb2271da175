#!/usr/bin/env python3
"""Micro benchmark of the HA replication stream format (broker/ha/wire.py), not a test.

Prints encode and decode rates (messages/s and MB/s of message bodies) for ENQUEUE events of
--size-byte bodies packed --batch to a body, through encode_batch, BatchWriter and
decode_batch, plus the IdSet encode/decode cost of a dequeue per batch. The HA target is
catch-up at >= 100k msgs/s of 1 KiB messages.

    .venv/bin/python bench/ha_wire.py [--messages 300000] [--size 1024] [--batch 60]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from broker.ha.id_set import IdSet
from broker.ha.wire import BatchWriter, Dequeue, Enqueue, StreamEvent, decode_batch, encode_batch

# A typical basic.properties payload: content-type, delivery-mode, a message id, headers.
PROPERTIES = bytes.fromhex("98000000106170706c69636174696f6e2f6a736f6e02") + b"\x24" + b"m" * 36


def _rate(
    label: str, messages: int, body_bytes: int, run: Callable[[], object], unit: str = "msgs/s"
) -> float:
    best = float("inf")
    for _ in range(5):  # best of five, in CPU time, to dodge noise from other processes
        start = time.process_time()
        run()
        best = min(best, time.process_time() - start)
    rate = messages / best
    print(f"{label:<36} {rate:>12,.0f} {unit:<6} {body_bytes / best / 1e6:>9,.1f} MB/s of bodies")
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--size", type=int, default=1024, help="body bytes per message")
    parser.add_argument("--batch", type=int, default=60, help="messages per batch")
    args = parser.parse_args()

    body = b"x" * args.size
    batches: list[list[StreamEvent]] = []
    next_id = 1
    while next_id <= args.messages:
        count = min(args.batch, args.messages - next_id + 1)
        batches.append(
            [
                Enqueue(i, "amq.direct", "orders.created", PROPERTIES, body)
                for i in range(next_id, next_id + count)
            ]
        )
        next_id += count
    messages = next_id - 1
    body_bytes = messages * args.size
    encoded = [encode_batch(batch) for batch in batches]
    print(
        f"{messages:,} messages of {args.size} B, {len(batches):,} batches of {args.batch}, "
        f"{len(encoded[0]):,} B each ({len(encoded[0]) - 1 - args.batch * args.size} B of "
        f"headers, names and properties), CPU time, Python {sys.version.split()[0]}"
    )

    def run_encode() -> None:
        for batch in batches:
            encode_batch(batch)

    def run_writer() -> None:
        writer = BatchWriter(max_bytes=65536, max_events=args.batch)
        for batch in batches:
            for event in batch:
                while writer.full:
                    writer.take()
                writer.add(event)
        writer.take()

    def run_decode() -> None:
        for data in encoded:
            decode_batch(data)

    dequeues = [
        encode_batch([Dequeue(IdSet.from_ranges([(b * args.batch + 1, (b + 1) * args.batch)]))])
        for b in range(len(batches))
    ]

    def run_dequeue() -> None:
        for data in dequeues:
            decode_batch(data)

    _rate("encode_batch", messages, body_bytes, run_encode)
    _rate("BatchWriter.add/take", messages, body_bytes, run_writer)
    _rate("decode_batch", messages, body_bytes, run_decode)
    _rate(f"decode_batch, DEQUEUE of {args.batch} ids", messages, 0, run_dequeue, "ids/s")


if __name__ == "__main__":
    main()
