#!/usr/bin/env python3
"""The broker's AMQP 1.0 path against its 0-9-1 path without sockets: CPU per message.

In this process, one sans-I/O connection per protocol (``broker.amqp10.connection`` and
``broker.amqp.connection``, driven as tests/amqp10 and tests/amqp drive them) carries a
producer and a consumer of one queue, 1 KiB bodies, at least once, in batches of
``--batch``: the batch's publishes in one read (1.0: rhea's transfers, list32, an empty
header and properties and a data section; 0-9-1: basic.publish on a confirm channel), then
what the broker writes (dispositions or confirms, deliveries), then one settlement of every
delivery so far (1.0: a disposition range, accepted, settled, and a flow topping the credit
up to 256; 0-9-1: basic.ack multiple, prefetch 256). Reported: thread CPU microseconds per
message, the median of ``--repeat`` runs, for each protocol, and their ratio (0-9-1 / 1.0:
1.0's share of 0-9-1's capacity). No sockets, no event loop: the protocols' own cost, with
the machine's load left out as far as thread time does.

    .venv/bin/python bench/amqp10_core.py
    PYTHONPATH=/tmp/old-build .venv/bin/python bench/amqp10_core.py   # another build
"""

from __future__ import annotations

import argparse
import statistics
import struct
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parent.parent))  # after PYTHONPATH

from pamqp import body, commands, frame, header

from broker.amqp10.framing import frame as frame10
from broker.amqp10.performatives import RECEIVER, Accepted, Disposition, Flow
from tests.amqp.helpers import Client, make_context
from tests.amqp10.helpers import Client10
from tests.amqp10.helpers import make_context as make_context10

_HEAD10 = struct.Struct(">IBBH")
_HEAD091 = struct.Struct(">BHI")
SIZE = 1024
#: rhea's sections for a data body of SIZE bytes: an empty header, empty properties.
_SECTIONS = b"\x00\x53\x70\x45\x00\x53\x73\x45\x00\x53\x75\xb0" + struct.pack(">I", SIZE)


def _uint(value: int) -> bytes:
    if value == 0:
        return b"\x43"
    if value < 256:
        return b"\x52" + bytes((value,))
    return b"\x70" + struct.pack(">I", value)


def rhea_transfer(delivery_id: int) -> bytes:
    """One transfer frame as rhea writes it (a list32 performative)."""
    tag = str(delivery_id).encode()
    items = b"\x43" + _uint(delivery_id) + b"\xa0" + bytes((len(tag),)) + tag + b"\x43\x42\x42"
    performative = b"\x00\x53\x14\xd0" + struct.pack(">II", len(items) + 4, 6) + items
    payload = performative + _SECTIONS + b"x" * SIZE
    return _HEAD10.pack(8 + len(payload), 2, 0, 0) + payload


def _transfers(data: bytes) -> int:
    pos = count = 0
    while pos < len(data):
        size = _HEAD10.unpack_from(data, pos)[0]
        if data[pos + 8 : pos + 11] == b"\x00\x53\x14":
            count += 1
        pos += size
    return count


def run_amqp10(messages: int, batch: int) -> float:
    ctx = make_context10()
    ctx.vhost.declare_queue("q")
    client = Client10(ctx)
    client.connect()
    client.attach_sender("/amq/queue/q", handle=0)
    client.attach_receiver("/amq/queue/q", handle=1)
    client.credit(1, 256)
    client.take()
    conn = client.conn
    frames = [rhea_transfer(i) for i in range(messages)]
    sent = delivered = settled = 0
    started = time.thread_time()
    while sent < messages:
        conn.receive_data(b"".join(frames[sent : sent + batch]))
        sent += batch
        delivered += _transfers(conn.data_to_send())
        if delivered > settled:
            conn.receive_data(
                frame10(0, Disposition(role=RECEIVER, first=settled, last=delivered - 1,
                                       settled=True, state=Accepted()))
                + frame10(0, Flow(next_incoming_id=delivered, incoming_window=2048,
                                  next_outgoing_id=sent, outgoing_window=2**31, handle=1,
                                  delivery_count=delivered, link_credit=256))
            )  # fmt: skip
            settled = delivered
            delivered += _transfers(conn.data_to_send())
    took = time.thread_time() - started
    assert ctx.vhost.queues["q"].message_count == 0 and delivered == messages
    return took / messages * 1e6


def _delivers(data: bytes) -> int:
    pos = count = 0
    while pos + 7 <= len(data):
        kind, _channel, size = _HEAD091.unpack_from(data, pos)
        if kind == 1 and data[pos + 7 : pos + 11] == b"\x00\x3c\x00\x3c":  # basic.deliver
            count += 1
        pos += 8 + size
    return count


def run_amqp091(messages: int, batch: int) -> float:
    ctx = make_context()
    ctx.vhost.declare_queue("q")
    client = Client(ctx)
    client.handshake()
    client.open_channel(1)
    client.open_channel(2)
    client.send(1, commands.Confirm.Select())
    client.send(2, commands.Basic.Qos(prefetch_count=256))
    client.send(2, commands.Basic.Consume(queue="q", consumer_tag="c"))
    client.take()
    conn = client.conn
    one = frame.marshal(commands.Basic.Publish(exchange="", routing_key="q"), 1)
    one += frame.marshal(header.ContentHeader(0, SIZE, commands.Basic.Properties()), 1)
    one += frame.marshal(body.ContentBody(b"x" * SIZE), 1)
    sent = delivered = acked = 0
    started = time.thread_time()
    while sent < messages:
        conn.receive_data(one * batch)
        while conn.unparsed:
            conn.parse_more()
        sent += batch
        delivered += _delivers(conn.data_to_send())
        if delivered > acked:
            ack = commands.Basic.Ack(delivery_tag=delivered, multiple=True)
            conn.receive_data(frame.marshal(ack, 2))
            acked = delivered
            delivered += _delivers(conn.data_to_send())
    took = time.thread_time() - started
    assert ctx.vhost.queues["q"].message_count == 0
    return took / messages * 1e6


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--messages", type=int, default=20_480)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    if args.messages < 1 or args.batch < 1 or args.repeat < 1 or args.messages % args.batch:
        ap.error("--messages, --batch, --repeat must be positive, --messages a multiple of --batch")
    runs: dict[str, list[float]] = {"1.0": [], "0-9-1": []}
    for _ in range(args.repeat):  # alternating, so both see the same machine
        runs["1.0"].append(run_amqp10(args.messages, args.batch))
        runs["0-9-1"].append(run_amqp091(args.messages, args.batch))
    med = {name: statistics.median(values) for name, values in runs.items()}
    for name, values in runs.items():
        each = " ".join(f"{v:.1f}" for v in values)
        print(f"AMQP {name:<6} {med[name]:6.1f} us/msg (median; runs: {each})")
    print(f"1.0 / 0-9-1 capacity: {med['0-9-1'] / med['1.0']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
