#!/usr/bin/env python3
"""AMQP 1.0 throughput and settlement latency against 0-9-1, on qpidd and, with
``--rabbitmq-port``, on RabbitMQ with its 1.0 plugin, in the same run (issue 28, item 5).

For each P in --pairs and each target, alternating: P queues, P consumers and P producers.

- **AMQP 1.0** (python-qpid-proton's event API, one Container per process): producer i
  sends --messages bodies of --size bytes to ``/amq/queue/NAME`` (an address both brokers
  know) unsettled, keeping at most --window unsettled, and counts a message once its
  ``accepted`` disposition came (the settlement latency: send to accepted); consumer i
  receives from the same address with --prefetch credit and accepts each message (at
  least once). Bodies start with (producer id, sequence number): every message is checked
  to arrive exactly once.
- **AMQP 0-9-1** (pika, bench/throughput.py's clients): publisher confirms with the same
  window, basic.qos with the same prefetch, manual acks.

Reported per run: msgs/s end to end (received / time from go to the last receipt),
settlement (1.0) or confirm (0-9-1) latency p50/p99 in ms, the broker's CPU microseconds
per message, the clients' (producers' and consumers' together) CPU microseconds per message,
and other% (other processes' CPU meanwhile, in % of one core: the load). Both
brokers are on this machine; qpidd is started here (``--default-queue-limit=0``) unless
``--qpidd-url`` names one. RabbitMQ: ``RMQ_PLUGINS=rabbitmq_amqp1_0 bench/rabbitmq.sh
start PORT`` first (3.10.8's plugin serves 1.0 on the 0-9-1 port). Exits 1 if a message
was lost, duplicated or refused, or a run failed.

    .venv/bin/python bench/amqp10_throughput.py --pairs 1,4 --repeat 3 --rabbitmq-port 5680
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.append(str(HERE.parent))

import pika  # noqa: E402
from proc_stats import host_cpu, listener_pid, process_cpu  # noqa: E402
from proton import Message  # noqa: E402
from proton.handlers import MessagingHandler  # noqa: E402
from proton.reactor import Container  # noqa: E402
from throughput import term_to_exit  # noqa: E402
from throughput_clients import HEADER  # noqa: E402
from throughput_results import percentile  # noqa: E402
from throughput_run import run_once  # noqa: E402


@dataclass
class Result:
    """One run of one protocol on one broker."""

    target: str
    pairs: int
    messages: int
    received: int = 0
    seconds: float = 0.0
    msgs_per_s: float = 0.0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    broker_us_per_msg: float | None = None
    clients_us_per_msg: float | None = None
    other_pct: float | None = None
    errors: list[str] = field(default_factory=list)


# -- the 1.0 clients (one per process) ---------------------------------------------------
class Producer(MessagingHandler):
    def __init__(self, url: str, address: str, idx: int, count: int, size: int, window: int,
                 go: Any) -> None:  # fmt: skip
        super().__init__(auto_settle=True)
        self.url, self.address, self.idx = url, address, idx
        self.count, self.size, self.window, self.go = count, size, window, go
        self.sent = self.accepted = self.refused = 0
        self.sent_at: dict[Any, float] = {}
        self.latencies: list[float] = []
        self.pad = b"x" * (size - HEADER.size)

    def on_start(self, event: Any) -> None:
        connection = event.container.connect(self.url, allowed_mechs="PLAIN", reconnect=False)
        event.container.create_sender(connection, self.address)

    def on_sendable(self, event: Any) -> None:
        sender = event.sender
        while (
            self.sent < self.count
            and sender.credit > 0
            and self.sent - self.accepted - self.refused < self.window
        ):
            body = HEADER.pack(self.idx, self.sent) + self.pad
            message = Message(body=body)
            message.inferred = True  # a data section, as a 0-9-1 body
            delivery = sender.send(message)
            self.sent_at[delivery.tag] = time.monotonic()
            self.sent += 1

    def _settled(self, event: Any, accepted: bool) -> None:
        started = self.sent_at.pop(event.delivery.tag, None)
        if started is not None:
            self.latencies.append(time.monotonic() - started)
        if accepted:
            self.accepted += 1
        else:
            self.refused += 1
        if self.accepted + self.refused == self.count:
            event.connection.close()
        else:
            self.on_sendable(event)

    def on_accepted(self, event: Any) -> None:
        self._settled(event, True)

    def on_rejected(self, event: Any) -> None:
        self._settled(event, False)

    def on_released(self, event: Any) -> None:
        self._settled(event, False)


class Consumer(MessagingHandler):
    def __init__(self, url: str, address: str, count: int, prefetch: int) -> None:
        super().__init__(prefetch=prefetch, auto_accept=True)
        self.url, self.address, self.count = url, address, count
        self.seen: set[tuple[int, int]] = set()
        self.duplicates = 0
        self.last_at = 0.0

    def on_start(self, event: Any) -> None:
        connection = event.container.connect(self.url, allowed_mechs="PLAIN", reconnect=False)
        event.container.create_receiver(connection, self.address)

    def on_message(self, event: Any) -> None:
        key = HEADER.unpack_from(bytes(event.message.body))
        if key in self.seen:
            self.duplicates += 1
        self.seen.add(key)
        self.last_at = time.monotonic()
        if len(self.seen) == self.count:
            event.connection.close()


def _child(role: str, spec: dict[str, Any], go: Any, results: Any) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        if role == "consumer":
            handler: Any = Consumer(spec["url"], spec["address"], spec["count"], spec["prefetch"])
            results.put(("ready", role))
            cpu = time.process_time()
            Container(handler).run()
            results.put((role, {"received": len(handler.seen), "duplicates": handler.duplicates,
                                "last_at": handler.last_at,
                                "cpu_s": time.process_time() - cpu}))  # fmt: skip
        else:
            results.put(("ready", role))
            go.wait()
            cpu = time.process_time()
            handler = Producer(spec["url"], spec["address"], spec["idx"], spec["count"],
                               spec["size"], spec["window"], go)  # fmt: skip
            Container(handler).run()
            results.put((role, {"accepted": handler.accepted, "refused": handler.refused,
                                "latencies": handler.latencies,
                                "cpu_s": time.process_time() - cpu}))  # fmt: skip
    except Exception as exc:  # one line back to the parent
        results.put((role, {"error": f"{type(exc).__name__}: {exc}"}))


def _declare(url: str, queues: Sequence[str], delete: bool = False) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    try:
        channel = connection.channel()
        for name in queues:
            if delete:
                channel.queue_delete(name)
            else:
                channel.queue_declare(name)
    finally:
        connection.close()


def run_amqp10(url: str, target: str, args: argparse.Namespace, pairs: int) -> Result:
    count = max(1000, args.total_messages // pairs)
    params = pika.URLParameters(url)
    amqp10_url = f"amqp://guest:guest@{params.host}:{params.port}"
    token = uuid.uuid4().hex[:8]
    queues = [f"bench10-{pairs}-{token}-{i}" for i in range(pairs)]
    _declare(url, queues)
    result = Result(target, pairs, pairs * count)
    ctx = mp.get_context("fork")
    go, results = ctx.Event(), ctx.Queue()
    procs = []
    for i, queue in enumerate(queues):
        spec = {"url": amqp10_url, "address": f"/amq/queue/{queue}", "idx": i, "count": count,
                "size": args.size, "window": args.window, "prefetch": args.prefetch}  # fmt: skip
        for role in ("consumer", "producer"):
            procs.append(ctx.Process(target=_child, args=(role, spec, go, results), daemon=True))
    for proc in procs:
        proc.start()
    for _ in procs:
        results.get(timeout=30)  # ready
    time.sleep(0.3)  # the consumers' links attach (their first message is timed from go)
    pid = listener_pid(url)
    cpu0, host0, _ = process_cpu(pid), *host_cpu()
    start = time.monotonic()
    go.set()
    got: list[tuple[str, dict[str, Any]]] = []
    try:
        while len(got) < len(procs):
            got.append(results.get(timeout=args.timeout))
    except Exception:
        result.errors.append(f"timed out after {args.timeout} s ({len(got)} of {len(procs)})")
    cpu1, host1, _ = process_cpu(pid), *host_cpu()
    for proc in procs:
        proc.join(5)
        if proc.is_alive():
            proc.kill()
    _collect(result, got, start, (cpu0, cpu1), (host0, host1))
    _declare(url, queues, delete=True)
    return result


def run_amqp091(url: str, target: str, args: argparse.Namespace, pairs: int) -> Result:
    count = max(1000, args.total_messages // pairs)
    r = run_once(url, pairs, count, args.size, args.window, args.prefetch, "bench091",
                 args.timeout, label=target)  # fmt: skip
    other = None
    if r.other_cpu_s is not None and r.window_s:
        other = r.other_cpu_s / r.window_s * 100
    clients = r.clients_cpu_s / r.received * 1e6 if r.received else None
    return Result(
        target, pairs, r.messages, r.received, r.seconds, r.msgs_per_s, r.confirm_p50_ms,
        r.confirm_p99_ms, r.broker_us_per_msg, clients, other,
        list(r.errors) + ([] if r.ok else ["lost, duplicated or nacked"]),
    )  # fmt: skip


NODE_CLIENTS = HERE / "node_clients.js"
NODE_MODULES = HERE.parent / "tests" / "compat" / "node" / "node_modules"


def run_node(url: str, target: str, args: argparse.Namespace, pairs: int, proto: str) -> Result:
    """One run with the Node.js clients (bench/node_clients.js): rhea for 1.0, amqplib for
    0-9-1, the same window, prefetch and bodies as the Python clients."""
    count = max(1000, args.total_messages // pairs)
    params = pika.URLParameters(url)
    token = uuid.uuid4().hex[:8]
    queues = [f"benchnode-{pairs}-{token}-{i}" for i in range(pairs)]
    _declare(url, queues)
    result = Result(target, pairs, pairs * count)
    env = {**os.environ, "NODE_PATH": str(NODE_MODULES)}
    procs: list[tuple[str, subprocess.Popen[str]]] = []
    try:
        for i, queue in enumerate(queues):
            address = f"/amq/queue/{queue}" if proto == "1.0" else queue
            for role in ("consumer", "producer"):
                window = args.prefetch if role == "consumer" else args.window
                argv = ["node", str(NODE_CLIENTS), role, proto, params.host, str(params.port),
                        address, str(i), str(count), str(args.size), str(window)]  # fmt: skip
                child = subprocess.Popen(
                    argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
                )
                procs.append((role, child))
        for role, proc in procs:
            assert proc.stdout is not None
            ready = proc.stdout.readline().strip()
            if ready != "ready":
                result.errors.append(f"{role} did not start: {ready!r}")
                return result
        time.sleep(0.3)  # as run_amqp10: the consumers' links attach
        pid = listener_pid(url)
        cpu0, host0, _ = process_cpu(pid), *host_cpu()
        start = time.time()
        for role, proc in procs:
            if role == "producer":
                assert proc.stdin is not None
                proc.stdin.write("go\n")
                proc.stdin.flush()
        got: list[tuple[str, dict[str, Any]]] = []
        deadline = time.monotonic() + args.timeout
        for role, proc in procs:
            try:
                out, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                result.errors.append(f"{role} timed out after {args.timeout} s")
                continue
            lines = out.strip().splitlines()
            if proc.returncode != 0 or not lines:
                result.errors.append(f"{role} exited {proc.returncode}")
                continue
            got.append((role, json.loads(lines[-1])))
        cpu1, host1, _ = process_cpu(pid), *host_cpu()
    finally:
        for _, proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    latencies: list[float] = []
    clients_cpu = 0.0
    last = start
    for role, data in got:
        clients_cpu += data["cpu_s"]
        if role == "consumer":
            result.received += data["received"]
            last = max(last, data["last_at"])
            if data["duplicates"]:
                result.errors.append(f"{data['duplicates']} duplicates")
        else:
            latencies += [ms / 1000 for ms in data["latencies_ms"]]
            if data["refused"]:
                result.errors.append(f"{data['refused']} refused")
    _account(result, start, last, latencies, clients_cpu, (cpu0, cpu1), (host0, host1))
    _declare(url, queues, delete=True)
    return result


def run_lean(url: str, target: str, args: argparse.Namespace, pairs: int, proto: str) -> Result:
    """One run with bench/lean_clients.py's pair: the same loop in either protocol."""
    from lean_clients import run_client

    count = max(1000, args.total_messages // pairs)
    params = pika.URLParameters(url)
    token = uuid.uuid4().hex[:8]
    queues = [f"benchlean-{pairs}-{token}-{i}" for i in range(pairs)]
    _declare(url, queues)
    result = Result(target, pairs, pairs * count)
    ctx = mp.get_context("fork")
    go, results = ctx.Event(), ctx.Queue()
    procs = []
    for i, queue in enumerate(queues):
        address = f"/amq/queue/{queue}" if proto == "1.0" else queue
        spec = {"host": params.host, "port": params.port, "address": address, "idx": i,
                "count": count, "size": args.size, "window": args.window,
                "prefetch": args.prefetch}  # fmt: skip
        for role in ("consumer", "producer"):
            procs.append(
                ctx.Process(target=run_client, args=(proto, role, spec, go, results), daemon=True)
            )
    for proc in procs:
        proc.start()
    for _ in procs:
        results.get(timeout=30)  # ready (a consumer: once its consume or credit is sent)
    pid = listener_pid(url)
    cpu0, host0, _ = process_cpu(pid), *host_cpu()
    start = time.monotonic()
    go.set()
    got: list[tuple[str, dict[str, Any]]] = []
    try:
        while len(got) < len(procs):
            got.append(results.get(timeout=args.timeout))
    except Exception:
        result.errors.append(f"timed out after {args.timeout} s ({len(got)} of {len(procs)})")
    cpu1, host1, _ = process_cpu(pid), *host_cpu()
    for proc in procs:
        proc.join(5)
        if proc.is_alive():
            proc.kill()
    _collect(result, got, start, (cpu0, cpu1), (host0, host1))
    _declare(url, queues, delete=True)
    return result


def _collect(
    result: Result,
    got: list[tuple[str, dict[str, Any]]],
    start: float,
    broker_cpu: tuple[float | None, float | None],
    host: tuple[float, float],
) -> None:
    """Add up what the child processes reported (seconds in time.monotonic())."""
    latencies: list[float] = []
    clients_cpu = 0.0
    last = start
    for role, data in got:
        clients_cpu += data.get("cpu_s", 0.0)
        if "error" in data:
            result.errors.append(f"{role}: {data['error']}")
        elif role == "consumer":
            result.received += data["received"]
            last = max(last, data["last_at"])
            if data["duplicates"]:
                result.errors.append(f"{data['duplicates']} duplicates")
        else:
            latencies += data["latencies"]
            if data["refused"]:
                result.errors.append(f"{data['refused']} refused")
    _account(result, start, last, latencies, clients_cpu, broker_cpu, host)


def _account(
    result: Result,
    start: float,
    last: float,
    latencies: list[float],
    clients_cpu: float,
    broker_cpu: tuple[float | None, float | None],
    host: tuple[float, float],
) -> None:
    """Fill in a run's figures from what its clients reported."""
    if result.received != result.messages:
        result.errors.append(f"received {result.received} of {result.messages}")
    result.seconds = last - start
    result.msgs_per_s = result.received / result.seconds if result.seconds > 0 else 0.0
    latencies.sort()
    if latencies:
        result.p50_ms = percentile(latencies, 0.5) * 1000
        result.p99_ms = percentile(latencies, 0.99) * 1000
    if result.received:
        result.clients_us_per_msg = clients_cpu / result.received * 1e6
    cpu0, cpu1 = broker_cpu
    if cpu0 is not None and cpu1 is not None and result.received:
        broker = cpu1 - cpu0
        result.broker_us_per_msg = broker / result.received * 1e6
        window = max(result.seconds, 1e-6)
        result.other_pct = max(0.0, (host[1] - host[0]) - broker - clients_cpu) / window * 100


def runs_of(clients: str) -> list[tuple[str, str]]:
    """(client kind, protocol) pairs one repeat runs, in order."""
    kinds = ["python", "node"] if clients == "both" else clients.split("+")
    return [(kind, proto) for kind in kinds for proto in ("1.0", "0-9-1")]


def run_one(
    kind: str, proto: str, url: str, target: str, args: argparse.Namespace, pairs: int
) -> Result:
    if kind == "node":
        return run_node(url, target, args, pairs, proto)
    if kind == "lean":
        return run_lean(url, target, args, pairs, proto)
    run = run_amqp10 if proto == "1.0" else run_amqp091
    return run(url, target, args, pairs)


#: The client pairs a run may name (``--clients``), alone or joined by ``+``.
CLIENTS = ("python", "node", "lean")


def clients_arg(value: str) -> str:
    """``--clients``: ``both`` or pairs of :data:`CLIENTS` joined by ``+``."""
    if value != "both" and not all(kind in CLIENTS for kind in value.split("+")):
        raise argparse.ArgumentTypeError(f"not python, node, lean, both or a + of them: {value!r}")
    return value


HEAD = (
    f"{'target':<23} {'P':>3} {'run':>3} {'msgs/s':>9} {'p50 ms':>8} {'p99 ms':>8}"
    f" {'us/msg':>7} {'client':>7} {'other%':>7}"
)


def line(r: Result, run: str) -> str:
    us = "-" if r.broker_us_per_msg is None else f"{r.broker_us_per_msg:.0f}"
    other = "-" if r.other_pct is None else f"{r.other_pct:.0f}"
    clients = "-" if r.clients_us_per_msg is None else f"{r.clients_us_per_msg:.0f}"
    return (
        f"{r.target:<23} {r.pairs:>3} {run:>3} {r.msgs_per_s:>9,.0f} {r.p50_ms:>8.1f}"
        f" {r.p99_ms:>8.1f} {us:>7} {clients:>7} {other:>7}"
    )


def median(runs: list[Result]) -> Result:
    first = runs[0]
    known = [r.broker_us_per_msg for r in runs if r.broker_us_per_msg is not None]
    others = [r.other_pct for r in runs if r.other_pct is not None]
    clients = [r.clients_us_per_msg for r in runs if r.clients_us_per_msg is not None]
    return Result(
        first.target, first.pairs, first.messages,
        msgs_per_s=statistics.median(r.msgs_per_s for r in runs),
        p50_ms=statistics.median(r.p50_ms for r in runs),
        p99_ms=statistics.median(r.p99_ms for r in runs),
        broker_us_per_msg=statistics.median(known) if known else None,
        clients_us_per_msg=statistics.median(clients) if clients else None,
        other_pct=statistics.median(others) if others else None,
    )  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--pairs", default="1,4", help="comma list of P (default %(default)s)")
    ap.add_argument("--total-messages", type=int, default=40_000, help="per run (÷ P each)")
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--window", type=int, default=256, help="unsettled / unconfirmed per producer")
    ap.add_argument("--prefetch", type=int, default=256, help="credit / basic.qos per consumer")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--qpidd-url", default=None, help="a running qpidd (default: start one)")
    ap.add_argument("--rabbitmq-port", type=int, default=None, help="also RabbitMQ (1.0 plugin)")
    ap.add_argument("--clients", type=clients_arg, default="python",
                    help="python: Proton (1.0) and pika (0-9-1); node: rhea and amqplib "
                    "(bench/node_clients.js, NODE_PATH from tests/compat/node); both; lean: "
                    "bench/lean_clients.py's pair (the broker's share); or joined: "
                    "lean+node+python")  # fmt: skip
    args = ap.parse_args(argv)
    try:
        pairs = [int(p) for p in args.pairs.split(",")]
    except ValueError:
        ap.error(f"--pairs: not a comma list of integers: {args.pairs!r}")
    if any(p < 1 for p in pairs) or args.size < HEADER.size or args.repeat < 1:
        ap.error(f"--pairs must be positive, --size at least {HEADER.size}, --repeat >= 1")
    signal.signal(signal.SIGTERM, term_to_exit)
    from ha_brokers import Brokers

    ok = True
    with Brokers(prefix="qpidd-amqp10-bench-") as brokers:
        qpidd = args.qpidd_url or brokers.standalone("amqp10", ["--default-queue-limit=0"]).url
        targets = [("qpidd", qpidd)]
        if args.rabbitmq_port:
            targets.append(("rabbitmq", f"amqp://guest:guest@127.0.0.1:{args.rabbitmq_port}/%2F"))
        print(HEAD, flush=True)
        medians: list[Result] = []
        for p in pairs:
            runs: dict[str, list[Result]] = {}
            for k in range(args.repeat):
                for name, url in targets:
                    for kind, proto in runs_of(args.clients):
                        target = f"{name} {proto}" + ("" if kind == "python" else f" {kind}")
                        r = run_one(kind, proto, url, target, args, p)
                        print(line(r, str(k + 1)), flush=True)
                        for error in r.errors:
                            print(f"    error: {error}", file=sys.stderr, flush=True)
                        ok &= not r.errors
                        runs.setdefault(target, []).append(r)
            for target_runs in runs.values():
                med = median(target_runs)
                medians.append(med)
                print(line(med, "med"), flush=True)
        print("\nmedians:")
        print(HEAD)
        for med in medians:
            print(line(med, "med"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
