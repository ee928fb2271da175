#!/usr/bin/env python3
"""CPU per message of the broker's 0-9-1 path without sockets: publish, confirm, deliver, ack.

In this process (the ``broker`` on PYTHONPATH, so two builds can be compared), two sans-I/O
:class:`~broker.amqp.connection.Connection` objects of one broker context: a producer in
confirm mode and a consumer with ``basic.qos`` --prefetch and manual acks, on --queues
queues (one pair a queue, as ``bench/throughput.py``'s P). Each step feeds each producer a
read of --window publishes (method, content header, one body frame of --size bytes: what a
lean client's write brings), takes its output (the confirms) and the consumer's (the
deliveries), and acknowledges what was delivered with one ``multiple`` ack, as
``bench/lean_clients.py`` does every prefetch/4. Everything above the socket's read and
write is here: the frame parser, the channel, routing, the queue, the consumer ring, the
confirm holds, the delivery frames; the event loop, the syscalls and the store are not.

Reported: CPU microseconds a message (process time, median of --repeat runs of --messages
after a warm-up run). The figure is for comparing builds (the same machine, alternately),
not a throughput: under callgrind (``--callgrind``: one run, no warm-up) its instruction
count a message is exact enough to show a 1 % change.

    .venv/bin/python bench/wire_path_cpu.py --queues 1,4,16
    PYTHONPATH=/tmp/old-build .venv/bin/python bench/wire_path_cpu.py   # another build
"""

from __future__ import annotations

import argparse
import json
import statistics
import struct
import sys
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parent.parent))  # after PYTHONPATH

from pamqp import body as content_body
from pamqp import commands, frame, header

from broker.amqp.connection import Connection
from broker.amqp.context import BrokerContext
from broker.core.vhost import VirtualHost
from broker.security.sasl import Authenticator, UserDatabase

#: basic.deliver's and basic.ack's class and method ids, as they open a method payload.
_DELIVER = struct.pack(">HH", 60, 60)
_ACK = struct.pack(">HH", 60, 80)
_TAG = struct.Struct(">Q")


def _last_confirmed(output: bytes) -> int:
    """The delivery tag of the last basic.ack in a producer's output (0: none)."""
    at = output.rfind(_ACK)
    return 0 if at < 0 else _TAG.unpack_from(output, at + 4)[0]


def _drain(conn: Connection) -> bytes:
    """What the connection has to send after a read, its parse finished as the shell would."""
    while conn.unparsed:
        conn.parse_more()
    return conn.data_to_send()


def _feed(conn: Connection, data: bytes) -> bytes:
    conn.receive_data(data)
    check = conn.login_check
    if check is not None:
        conn.password_checked(check.run())
    return _drain(conn)


def _open(ctx: BrokerContext, name: str, setup: list[object]) -> Connection:
    """A connection through the handshake, channel 1 open and ``setup`` sent on it."""
    conn = Connection(ctx, name)
    _feed(conn, b"AMQP\x00\x00\x09\x01")
    start_ok = commands.Connection.StartOk(
        client_properties={"product": "wire_path_cpu", "capabilities": {}},
        mechanism="PLAIN",
        response="\0guest\0guest",
        locale="en_US",
    )
    _feed(conn, frame.marshal(start_ok, 0))
    _feed(conn, frame.marshal(commands.Connection.TuneOk(0, 131072, 0), 0))
    _feed(conn, frame.marshal(commands.Connection.Open(virtual_host="/"), 0))
    _feed(conn, frame.marshal(commands.Channel.Open(), 1))
    for method in setup:
        _feed(conn, frame.marshal(method, 1))  # type: ignore[arg-type]
    return conn


def _publishes(queue: str, window: int, size: int) -> bytes:
    one = frame.marshal(commands.Basic.Publish(exchange="", routing_key=queue), 1)
    one += frame.marshal(header.ContentHeader(0, size, commands.Basic.Properties()), 1)
    one += frame.marshal(content_body.ContentBody(b"x" * size), 1)
    return one * window


def _ack(tag: int) -> bytes:
    return frame.marshal(commands.Basic.Ack(delivery_tag=tag, multiple=True), 1)


def run(queues: int, messages: int, window: int, prefetch: int, size: int) -> float:
    """CPU seconds a message of one run on a fresh broker context."""
    ctx = BrokerContext(
        vhost=VirtualHost(), authenticator=Authenticator(UserDatabase.default(), True)
    )
    pairs = []
    for i in range(queues):
        name = f"wire-{i}"
        producer = _open(
            ctx,
            f"producer-{i}",
            [commands.Confirm.Select(), commands.Queue.Declare(queue=name)],
        )
        consumer = _open(
            ctx,
            f"consumer-{i}",
            [
                commands.Basic.Qos(prefetch_count=prefetch),
                commands.Basic.Consume(queue=name, consumer_tag="c"),
            ],
        )
        pairs.append((producer, consumer, _publishes(name, window, size)))
    delivered = [0] * queues
    confirmed = [0] * queues
    steps = max(1, messages // (window * queues))
    cpu0 = time.process_time()
    for _ in range(steps):
        for i, (producer, consumer, batch) in enumerate(pairs):
            confirmed[i] = _last_confirmed(_feed(producer, batch)) or confirmed[i]
            got = _drain(consumer).count(_DELIVER)
            while got:
                delivered[i] += got
                got = _feed(consumer, _ack(delivered[i])).count(_DELIVER)
    cpu = time.process_time() - cpu0
    total = steps * window * queues
    if sum(delivered) != total or sum(confirmed) != total:
        raise SystemExit(f"delivered {sum(delivered)}, confirmed {sum(confirmed)} of {total}")
    return cpu / total


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--queues", default="1,4,16", help="producer/consumer pairs, e.g. 1,4,16")
    ap.add_argument("--messages", type=int, default=200_000, help="messages a run")
    ap.add_argument("--window", type=int, default=64, help="publishes a read")
    ap.add_argument("--prefetch", type=int, default=256)
    ap.add_argument("--size", type=int, default=1024, help="body bytes")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--callgrind", action="store_true", help="one run, no warm-up")
    args = ap.parse_args()
    try:
        counts = [int(q) for q in args.queues.split(",")]
    except ValueError:
        ap.error(f"--queues: not a list of integers: {args.queues!r}")
    if min(counts) < 1 or args.messages < 1 or args.window < 1 or args.repeat < 1:
        ap.error("--queues, --messages, --window and --repeat must be positive")
    if args.prefetch < args.window:
        ap.error("--prefetch must be at least --window (each read's publishes delivered)")
    for queues in counts:
        if args.callgrind:
            us = run(queues, args.messages, args.window, args.prefetch, args.size) * 1e6
            print(json.dumps({"queues": queues, "us_a_message": round(us, 2)}))
            continue
        run(queues, args.messages // 4, args.window, args.prefetch, args.size)  # warm-up
        runs = [
            run(queues, args.messages, args.window, args.prefetch, args.size) * 1e6
            for _ in range(args.repeat)
        ]
        print(
            json.dumps(
                {
                    "queues": queues,
                    "us_a_message": round(statistics.median(runs), 2),
                    "runs": [round(r, 2) for r in runs],
                }
            )
        )


if __name__ == "__main__":
    main()
