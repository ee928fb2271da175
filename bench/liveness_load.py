#!/usr/bin/env python3
"""Liveness against status under real load (issue 25), not a test.

Starts one cluster member (``--ha-cluster yes``, no peer, promoted by hand), declares
``--queues`` queues (not replicated: nothing to wait for), then runs ``--viewers`` threads
each fetching ``GET /api/queues`` (every queue, serialised on the event loop, as a console
viewer's list) and ``--publishers`` pika publishers flooding a queue. Meanwhile it samples
``GET /api/status`` (answered on the loop) and ``GET /liveness`` (answered by the liveness
thread) and prints p50/p90/max of each, the loop lag of ``/metrics`` and the load average:
what the agent's check (0.4 s at ``--check-interval 0.1``) would see.

    .venv/bin/python bench/liveness_load.py --queues 5000 --viewers 6 --seconds 20
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pika

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from common.polling import free_port, poll_until  # noqa: E402

QPIDD = str(Path(sys.executable).parent / "qpidd")
AUTH = "Basic " + base64.b64encode(b"guest:guest").decode()


def get(url: str, timeout: float = 30.0, auth: bool = False) -> tuple[float, Any]:
    request = urllib.request.Request(url)
    if auth:
        request.add_header("Authorization", AUTH)
    started = time.monotonic()
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        body = json.load(answer) if "metrics" not in url else answer.read().decode()
    return time.monotonic() - started, body


def quantiles(values: list[float]) -> str:
    ordered = sorted(values)
    if not ordered:
        return "none"

    def q(p: float) -> float:
        return ordered[min(len(ordered) - 1, round(p * (len(ordered) - 1)))] * 1000

    top = ordered[-1] * 1000
    return f"p50 {q(0.5):.1f} ms, p90 {q(0.9):.1f} ms, max {top:.1f} ms (n={len(ordered)})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queues", type=int, default=5000)
    parser.add_argument("--viewers", type=int, default=6)
    parser.add_argument("--publishers", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="liveness-load-"))
    port, mgmt = free_port(), free_port()
    broker = subprocess.Popen(
        [
            QPIDD, f"--port={port}", f"--mgmt-port={mgmt}", "--ha-cluster=yes",
            f"--ha-brokers-url=127.0.0.1:{free_port()}", f"--data-dir={work / 'data'}",
            f"--log-file={work / 'qpidd.log'}", "--log-format=json",
        ],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    stop = threading.Event()
    threads: list[threading.Thread] = []
    try:
        base = f"http://127.0.0.1:{mgmt}"
        poll_until(lambda: _answers(base), 30, "the broker's management API")
        promote = urllib.request.Request(
            f"{base}/api/ha/promote",
            data=json.dumps({"cluster_manager": True, "epoch": 1}).encode(),
            headers={"Authorization": AUTH, "Content-Type": "application/json"},
        )
        urllib.request.urlopen(promote, timeout=30).close()  # a primary admits clients
        _took, ha = get(f"{base}/api/ha", auth=True)
        live_url = f"http://127.0.0.1:{ha['liveness']['port']}/liveness"
        started = time.monotonic()
        connection = pika.BlockingConnection(
            pika.ConnectionParameters(
                "127.0.0.1", port, credentials=pika.PlainCredentials("guest", "guest")
            )
        )
        channel = connection.channel()
        for i in range(args.queues):
            channel.queue_declare(f"q{i}", arguments={"qpid.replicate": "none"})
        connection.close()
        print(f"declared {args.queues} queues in {time.monotonic() - started:.1f} s")

        def viewer() -> None:
            while not stop.is_set():
                with contextlib.suppress(OSError):
                    get(f"{base}/api/queues", auth=True)

        def publisher() -> None:
            conn = pika.BlockingConnection(
                pika.ConnectionParameters(
                    "127.0.0.1", port, credentials=pika.PlainCredentials("guest", "guest")
                )
            )
            ch = conn.channel()
            body = b"x" * 512
            while not stop.is_set():
                for _ in range(200):
                    ch.basic_publish("", "q0", body)
                conn.process_data_events(0)
            conn.close()

        for target in [viewer] * args.viewers + [publisher] * args.publishers:
            thread = threading.Thread(target=target, daemon=True)
            thread.start()
            threads.append(thread)
        status: list[float] = []
        status_timeouts = 0
        live: list[float] = []
        last_progress: list[float] = []
        deadline = time.monotonic() + args.seconds
        while time.monotonic() < deadline:
            took, answer = get(live_url, timeout=5)
            live.append(took)
            last_progress.append(answer["last_progress_ms"] / 1000)
            try:
                took, _ = get(f"{base}/api/status", timeout=5)
                status.append(took)
                if took > 0.4:
                    status_timeouts += 1
            except OSError:
                status_timeouts += 1
            time.sleep(0.1)
        _took, metrics = get(f"{base}/metrics")
        lag = [line for line in metrics.splitlines() if line.startswith("qpidd_loop_lag")]
        print(f"GET /api/status: {quantiles(status)}; over 0.4 s: {status_timeouts}")
        print(f"GET /liveness:   {quantiles(live)}")
        print(f"last_progress:   {quantiles(last_progress)}")
        print("loop lag (last 10 s): " + "; ".join(lag))
        print(f"load average: {os.getloadavg()}")
        return 0
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=10)
        broker.send_signal(signal.SIGTERM)
        try:
            broker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            broker.kill()


def _answers(base: str) -> bool:
    try:
        get(f"{base}/api/status", timeout=1)
    except OSError:
        return False
    return True


if __name__ == "__main__":
    sys.exit(main())
