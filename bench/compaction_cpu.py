#!/usr/bin/env python3
"""CPU per message of the store's compaction, in process (the persistent path's share).

Drives a real :class:`~broker.store.journal.Journal` (its writer, its group commits, its
compaction) as the message store does on the persistent publish path: per message one
MESSAGE + ENQUEUE append (``encode_message_with_enqueue``, --size bytes of body) and, once
--in-flight later messages are stored, its DEQUEUE (the consumer's ack), with the ledger
kept as :class:`~broker.store.message_store.MessageStore` keeps it; a queue record stays
live, so every filled segment is scanned and compacted (as in a broker: its queues and
exchanges are copied forward each time). Each run stores --messages messages twice: with
compaction on and with it off (``Journal._maybe_compact`` a no-op), alternately; the
difference of the process's CPU time (every thread) per message is compaction's cost.

For comparing builds, run it with each build on PYTHONPATH (the journal is imported from
there; run from a directory other than the repository's root):

    PYTHONPATH=/tmp/wt-old .venv/bin/python bench/compaction_cpu.py --repeat 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parent.parent))  # after PYTHONPATH

import broker
from broker.store.journal import Journal, SyncPolicy
from broker.store.records import (
    Kind,
    QueueRecord,
    encode_message_with_enqueue,
    encode_queue,
    encode_queue_entry,
)

QUEUE_ID = 1


class _Copied:
    """The journal's log: counts the records compaction copied."""

    def __init__(self) -> None:
        self.copied = 0

    def info(self, event: str, **fields: object) -> None:
        if event == "store_segment_compacted":
            self.copied += int(fields.get("copied", 0))  # type: ignore[call-overload]

    def warning(self, event: str, **fields: object) -> None:
        pass

    def error(self, event: str, **fields: object) -> None:
        raise SystemExit(f"{event}: {fields}")


async def _written(journal: Journal) -> None:
    """Until what is appended so far is written (a group commit)."""
    done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

    def written(ok: bool) -> None:
        if not done.done():
            done.set_result(ok)

    journal.after_durable(written)
    await done


async def _run(
    directory: Path, messages: int, size: int, in_flight: int, compact: bool
) -> dict[str, float]:
    log = _Copied()
    journal = Journal(directory, sync=SyncPolicy.WRITE, log=log)
    journal.recover()
    journal.compaction_lag = 1  # as the broker's (an attribute older builds do not read)
    if not compact:
        journal._maybe_compact = lambda: None  # type: ignore[method-assign]
    journal.start()
    ledger = journal.ledger
    queue_record = encode_queue(QueueRecord(QUEUE_ID, "bench", False, {}))
    segment = journal.append(queue_record)
    try:  # with its bytes, as MessageStore: compaction copies it without reading
        ledger.config_created(QUEUE_ID, segment, queue_record)  # type: ignore[call-arg,unused-ignore]
    except TypeError:  # a build before that
        ledger.config_created(QUEUE_ID, segment)
    body = b"x" * size
    live: deque[int] = deque()
    props = b"\x10\x00\x02"  # delivery-mode 2
    cpu0, wall0 = time.process_time(), time.monotonic()
    for i in range(messages):
        message_id = journal.new_id()
        record = encode_message_with_enqueue(
            message_id, "", "bench", props, body, QUEUE_ID, i + 1, 0
        )
        segment = journal.append(record, 2)
        ledger.message_written(message_id, segment)
        ledger.enqueued((QUEUE_ID, message_id), segment)
        live.append(message_id)
        if len(live) > in_flight:
            gone = live.popleft()
            journal.append(encode_queue_entry(Kind.DEQUEUE, QUEUE_ID, gone))
            ledger.dequeued((QUEUE_ID, gone))
        if i % 256 == 255:  # a group commit's worth: the loop turns, the writer writes
            await _written(journal)
    deadline = time.monotonic() + 60
    while journal._compacting is not None and time.monotonic() < deadline:  # a pass under way
        await asyncio.sleep(0.001)
    cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    compacted = journal.compacted_segments
    await journal.close()
    return {
        "cpu_us_per_msg": cpu / messages * 1e6,
        "wall_s": wall,
        "compacted": compacted,
        "copied": log.copied,
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=1024, help="body bytes")
    ap.add_argument("--in-flight", type=int, default=4096, help="stored and not yet acked")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--label", default="")
    args = ap.parse_args(argv)
    on: list[float] = []
    off: list[float] = []
    compacted = copied = 0.0
    for _ in range(args.repeat):
        for compact, into in ((True, on), (False, off)):
            with tempfile.TemporaryDirectory(prefix="compaction-cpu-") as tmp:
                r = asyncio.run(_run(Path(tmp), args.messages, args.size, args.in_flight, compact))
            into.append(r["cpu_us_per_msg"])
            if compact:
                compacted, copied = r["compacted"], r["copied"]
    result = {
        "label": args.label,
        "broker": broker.__file__,
        "messages": args.messages,
        "segments_compacted": compacted,
        "records_copied": copied,
        "on_us_per_msg": round(statistics.median(on), 2),
        "off_us_per_msg": round(statistics.median(off), 2),
        "compaction_us_per_msg": round(
            statistics.median(a - b for a, b in zip(on, off, strict=True)), 2
        ),
        "on": [round(v, 2) for v in on],
        "off": [round(v, 2) for v in off],
    }
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
