#!/usr/bin/env python3
"""What one console viewer costs a broker with 10,000 queues (issue 25, item 5): a benchmark.

A stand-alone qpidd with ``--queues`` queues (half bound to a topic exchange), a pika
producer and consumer moving about ``--rate`` messages a second through 10 of them, and
one real console viewer: headless Chromium (``tests/chromium.py``) logged in on the queues
page (the server's page of 50 queues by name, deltas each second). Phases of ``--window``
seconds alternate without and with the viewer (``--pairs`` of each; the browser goes to
``about:blank`` between, which closes its stream); each phase measures the broker's CPU
(``/proc``, all threads) and the longest loop step of its 10 s windows (``/metrics``
``qpidd_loop_step_seconds{quantile="1"}``, CPU time: ``broker/loop_steps.py``). The
viewer's cost is the median with it less the median without. A raw stream reader then
counts the bytes a viewer is sent a second. Figures in docs/benchmarks.md.

    .venv/bin/python bench/console_viewer_scale.py --queues 10000
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import pika  # noqa: E402
from proc_stats import process_cpu  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402

from tests.broker_process import BrokerProcess  # noqa: E402
from tests.chromium import headless_chromium  # noqa: E402
from tests.console.page import console_url, log_in, seen  # noqa: E402
from tests.console.support import write_users  # noqa: E402

AUTH = "Basic " + base64.b64encode(b"guest:guest").decode()
BUSY = [f"cv-{i:05d}" for i in range(10)]  # the queues with traffic


def http(port: int, path: str) -> bytes:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", headers={"Authorization": AUTH}
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        return bytes(answer.read())


def longest_step(port: int) -> float:
    """The longest loop step of the last 10 s window (seconds of CPU)."""
    for line in http(port, "/metrics").decode().splitlines():
        if line.startswith('qpidd_loop_step_seconds{quantile="1"}'):
            return float(line.split()[-1])
    return 0.0


def declare(url: str, queues: int) -> float:
    began = time.monotonic()
    with pika.BlockingConnection(pika.URLParameters(url)) as connection:
        channel = connection.channel()
        channel.exchange_declare("cv-topic", "topic")
        for i in range(queues):
            name = f"cv-{i:05d}"
            channel.queue_declare(name)
            if i % 2:
                channel.queue_bind(name, "cv-topic", f"cv.{i}.#")
    return time.monotonic() - began


class Traffic:
    """A producer and a consumer (threads, pika) through :data:`BUSY` at ``rate`` msg/s."""

    def __init__(self, url: str, rate: float) -> None:
        self.url, self.rate = url, rate
        self.stop = threading.Event()
        self.sent = 0
        self.threads = [
            threading.Thread(target=self._produce, daemon=True),
            threading.Thread(target=self._consume, daemon=True),
        ]

    def start(self) -> Traffic:
        for thread in self.threads:
            thread.start()
        return self

    def _produce(self) -> None:
        with pika.BlockingConnection(pika.URLParameters(self.url)) as connection:
            channel = connection.channel()
            began = time.monotonic()
            while not self.stop.is_set():
                channel.basic_publish("", BUSY[self.sent % len(BUSY)], b"x" * 100)
                self.sent += 1
                ahead = began + self.sent / self.rate - time.monotonic()
                if ahead > 0:
                    connection.sleep(ahead)

    def _consume(self) -> None:
        with pika.BlockingConnection(pika.URLParameters(self.url)) as connection:
            channel = connection.channel()
            channel.basic_qos(prefetch_count=50)
            for name in BUSY:
                channel.basic_consume(name, lambda ch, m, p, b: ch.basic_ack(m.delivery_tag))
            while not self.stop.is_set():
                connection.process_data_events(time_limit=0.2)

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=10)


def rows(browser: Any) -> list[Any]:
    return list(browser.find_elements(By.CSS_SELECTOR, "#queues tbody tr"))


def phase(broker: BrokerProcess, window: float) -> dict[str, float]:
    """The broker's CPU (share of a core) and longest loop step over ``window`` seconds."""
    assert broker.proc is not None
    pid = broker.proc.pid
    cpu0, t0 = process_cpu(pid) or 0.0, time.monotonic()
    steps = []
    while (left := window - (time.monotonic() - t0)) > 0:
        time.sleep(min(10.0, left))  # the metric's window is 10 s
        steps.append(longest_step(broker.mgmt_port))
    cpu1, t1 = process_cpu(pid) or 0.0, time.monotonic()
    loop = json.loads(http(broker.mgmt_port, "/api/status"))["loop"]
    return {
        "cpu": (cpu1 - cpu0) / (t1 - t0),
        "step_max": max(steps, default=0.0),
        "steps": steps,
        "gc_pauses": loop["gc_pauses"],
        "gc_max_ms": loop["gc_max_ms"],
    }


def stream_bytes(port: int, seconds: float) -> tuple[float, int]:
    """Bytes a second a raw viewer of the default query is sent after its first events,
    and the size of those first events (its snapshot and page)."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/console/live?page=1&page_size=50",
        headers={"Authorization": AUTH},
    )
    first = total = 0
    with urllib.request.urlopen(request, timeout=60) as stream:
        began = None
        for line in stream:
            if began is None:
                first += len(line)
                if line.startswith(b"event: delta"):
                    began = time.monotonic()
                continue
            total += len(line)
            if time.monotonic() - began >= seconds:
                return total / (time.monotonic() - began), first
    return 0.0, first


def in_process(queues: int, ticks: int = 5) -> dict[str, Any]:
    """The viewer's work on the loop without sockets: the sampler's ticks of a stand-in
    broker with ``queues`` queues (half bound to a topic exchange), nobody following and
    then one viewer, each step's CPU time (``time.thread_time``); a whole page, a page
    delta, the shared snapshot."""
    import gc

    from broker.core.message import Message
    from broker.management.console.live import LiveFeed
    from broker.management.console.live_lists import CONSOLE_QUEUES, ListPage
    from broker.management.lists import parse_query
    from common.log import get_logger
    from tests.management.support import FakeBroker

    broker = FakeBroker()
    vhost = broker.vhost
    vhost.declare_exchange("cv-topic", "topic")
    for i in range(queues):
        vhost.declare_queue(f"cv-{i:05d}")
        if i % 2:
            vhost.bind(f"cv-{i:05d}", "cv-topic", f"cv.{i}.#")
    feed = LiveFeed(broker, get_logger("bench"))
    gc.disable()  # the collector's pauses are the broker's, measured apart (loop_steps)

    def run(steps: Any) -> tuple[float, float]:
        total = longest = 0.0
        while True:
            began = time.thread_time()
            try:
                next(steps)
            except StopIteration:
                return total + (spent := time.thread_time() - began), max(longest, spent)
            spent = time.thread_time() - began
            total, longest = total + spent, max(longest, spent)

    def traffic() -> None:
        for q in BUSY:
            vhost.publish(vhost.exchange(""), Message("", q, body=b"x"))

    idle = []
    for _ in range(ticks):
        traffic()
        idle.append(run(feed.sample_steps()))
    feed.viewers = 1
    first = run(feed.sample_steps())
    page = ListPage(parse_query({"page": "1", "page_size": "50"}, CONSOLE_QUEUES))
    whole = run(feed.lists.page_steps(page, True))
    snapshot = run(feed.lists.shared_snapshot_steps("{}"))
    followed = []
    for _ in range(ticks):
        traffic()
        tick = run(feed.sample_steps())
        delta = run(feed.lists.page_steps(page, False))
        shared = run(feed.lists.shared_delta_steps("{}"))
        followed.append((tick[0] + delta[0] + shared[0], max(tick[1], delta[1], shared[1])))
    gc.enable()

    def ms(value: float) -> float:
        return round(1000 * value, 1)

    return {
        "tick_ms_nobody": ms(statistics.median(t for t, _ in idle)),
        "tick_ms_one_viewer": ms(statistics.median(t for t, _ in followed)),
        "longest_step_ms_nobody": ms(max(s for _, s in idle)),
        "longest_step_ms_one_viewer": ms(max(s for _, s in followed)),
        "first_tick_followed_ms": ms(first[0]),
        "first_tick_longest_step_ms": ms(first[1]),
        "whole_page_ms": ms(whole[0]),
        "shared_snapshot_ms": ms(snapshot[0]),
        "shared_snapshot_longest_step_ms": ms(snapshot[1]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queues", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=200.0, help="messages a second")
    parser.add_argument("--window", type=float, default=30.0, help="seconds a phase")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--in-process", action="store_true", help="the steps of the viewer's work, no sockets"
    )
    args = parser.parse_args()
    if args.in_process:
        print(json.dumps({"queues": args.queues, **in_process(args.queues)}, indent=1))
        return 0
    root = Path(tempfile.mkdtemp(prefix="console-viewer-scale-"))
    users = write_users(root / "users")
    broker = BrokerProcess(root / "qpidd", args=[f"--sasl-users={users}"]).start()
    traffic = None
    try:
        declared = declare(broker.url, args.queues)
        print(f"declared {args.queues} queues in {declared:.1f} s", flush=True)
        traffic = Traffic(broker.url, args.rate).start()
        results: dict[str, list[dict[str, float]]] = {"without": [], "with": []}
        with headless_chromium(1366, 860) as browser:
            log_in(browser, broker, "watcher", page="queues")
            for _ in range(args.pairs):
                browser.get("about:blank")
                time.sleep(3)  # the stream closed, the sampler stops following
                results["without"].append(phase(broker, args.window))
                began = time.monotonic()
                browser.get(console_url(broker, "queues"))
                seen(browser, lambda: len(rows(browser)) == 50, 60, "the first page")
                started = time.monotonic() - began
                time.sleep(3)
                measured = phase(broker, args.window)
                measured["start_s"] = started
                results["with"].append(measured)
                print(json.dumps({"without": results["without"][-1], "with": measured}), flush=True)
        rate, first = stream_bytes(broker.mgmt_port, 20.0)
        loop_at_end = json.loads(http(broker.mgmt_port, "/api/status"))["loop"]
    finally:
        if traffic is not None:
            traffic.close()
        broker.stop()
    without = statistics.median(r["cpu"] for r in results["without"])
    with_viewer = statistics.median(r["cpu"] for r in results["with"])
    summary: dict[str, Any] = {
        "queues": args.queues,
        "declare_s": round(declared, 1),
        "rate_msgs": args.rate,
        "cpu_without_pct": round(100 * without, 2),
        "cpu_with_pct": round(100 * with_viewer, 2),
        "viewer_pct": round(100 * (with_viewer - without), 2),
        "step_max_without_ms": round(1000 * max(r["step_max"] for r in results["without"]), 1),
        "step_max_with_ms": round(1000 * max(r["step_max"] for r in results["with"]), 1),
        "viewer_start_s": [round(r["start_s"], 2) for r in results["with"]],
        "stream_bytes_per_s": round(rate),
        "stream_first_bytes": first,
        "loop_at_end": loop_at_end,
        "runs": results,
        "load": os.getloadavg(),
    }
    print(json.dumps(summary) if args.json else json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
