"""bench/ha_vs_rabbitmq.py and the lean client it can run, without RabbitMQ.

A RabbitMQ cluster of 3 takes 80 s or more to start on 2 loaded cores (``bench/rabbitmq.sh
cluster-start``, 2026-11-30): too slow for ``make test``, so the comparison itself is ``make
bench-ha-rabbitmq`` and these tests cover the rest against real qpidd processes:

- the lean 0-9-1 pair (bench/lean_clients.py): its producer's persistent flag reaches the
  broker, its consumer's exactly-once check counts a duplicate and foreign bodies and acks
  them all;
- ``run_once(client="lean")``: every persistent message received once and confirmed;
- the script end to end on its qpidd side (primary + 2 backups, the lean client), every
  process stopped by PID at the end and on SIGTERM in the middle of a run;
- the summary's ratios and verdicts, from made-up results; ``--targets`` and ``--client``.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pika
import pytest

from common.polling import poll_until
from tests.broker_process import BrokerProcess

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
sys.path.insert(0, str(BENCH))

from ha_vs_rabbitmq import TARGET_RATIO, Runs, main, parse_targets, summary  # noqa: E402
from lean_clients import consume_091, produce_091  # noqa: E402
from throughput_clients import HEADER  # noqa: E402
from throughput_results import RunResult  # noqa: E402
from throughput_run import run_once  # noqa: E402

SIZE = 64
SCRIPT = BENCH / "ha_vs_rabbitmq.py"


def _channel(broker: BrokerProcess) -> tuple[Any, Any]:
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    return conn, conn.channel()


def _body(pid: int, seq: int) -> bytes:
    return HEADER.pack(pid, seq) + b"x" * (SIZE - HEADER.size)


class _Go:
    """The producer's go event, already set."""

    def wait(self) -> bool:
        return True


@pytest.mark.parametrize("persistent", [True, False])
def test_the_lean_producer_publishes_persistent_when_asked(
    broker: BrokerProcess, persistent: bool
) -> None:
    conn, ch = _channel(broker)
    try:
        ch.queue_declare("lean-p", durable=True)
        got = produce_091("127.0.0.1", broker.port, "lean-p", 3, 10, SIZE, 4, _Go(),
                          persistent=persistent, timeout=30)  # fmt: skip
        assert (got["accepted"], got["refused"], len(got["latencies"])) == (10, 0, 10)
        for seq in range(10):
            method, props, body = ch.basic_get("lean-p", auto_ack=True)
            assert method is not None
            assert HEADER.unpack_from(body) == (3, seq) and len(body) == SIZE
            assert props.delivery_mode == (2 if persistent else None)
    finally:
        conn.close()


def test_the_lean_consumer_counts_duplicates_and_foreign_bodies(broker: BrokerProcess) -> None:
    conn, ch = _channel(broker)
    try:
        ch.queue_declare("lean-c")
        # producer 0's 0 twice, another producer's 1, producer 0's 5 (past count), then its 1
        for pid, seq in [(0, 0), (0, 0), (7, 1), (0, 5), (0, 1)]:
            ch.basic_publish("", "lean-c", _body(pid, seq))
        ready = threading.Event()
        got = consume_091("127.0.0.1", broker.port, "lean-c", 2, SIZE, 16, ready.set, idx=0,
                          linger=0.3, timeout=30)  # fmt: skip
        assert ready.is_set()
        assert (got["received"], got["duplicates"], got["foreign"]) == (2, 1, 2)
        assert 0 < got["first_at"] <= got["last_at"]
        # every delivery acknowledged: nothing left in the queue
        poll_until(
            lambda: ch.queue_declare("lean-c", passive=True).method.message_count == 0,
            10,
            "the lean consumer's acks",
        )
    finally:
        conn.close()


def test_run_once_with_the_lean_client(broker: BrokerProcess) -> None:
    r = run_once(broker.url, 2, 500, SIZE, 64, 64, "lean-run", 60, label="lean", durable=True,
                 persistent=True, client="lean")  # fmt: skip
    assert r.ok, r
    assert (r.received, r.confirms, r.missing, r.duplicates, r.foreign) == (1000, 1000, 0, 0, 0)
    assert r.msgs_per_s > 0 and r.broker_us_per_msg is not None
    with pytest.raises(ValueError, match="not one of"):
        run_once(broker.url, 1, 1, SIZE, 1, 1, "x", 5, client="proton")


def _result(label: str, rate: float, us: float, ok: bool = True) -> RunResult:
    r = RunResult(label=label, pairs=1, messages=10, received=10, msgs_per_s=rate)
    r.broker_us_per_msg = us
    r.missing = 0 if ok else 1
    return r


def test_the_summary_gives_each_ratio_and_its_verdict() -> None:
    runs = {
        "qpidd": Runs([_result("qpidd", r, 50.0) for r in (900, 1000, 1100)], [1.0, 2.0, 3.0]),
        "mirrored": Runs([_result("mirrored", r, 200.0) for r in (300, 250, 400)], [2.0] * 3),
        "quorum": Runs(
            [_result("quorum", 500, 100.0), _result("quorum", 500, 100.0, ok=False)], [4.0, 5.0]
        ),
    }
    rows, lines, figures = summary(4, runs)
    assert figures["qpidd/mirrored"] == pytest.approx(1000 / 300)
    assert figures["cpu qpidd/mirrored"] == pytest.approx(0.25)
    assert figures["qpidd/quorum"] == pytest.approx(2.0)
    assert lines == [
        f"P=4: qpidd/mirrored = 3.33 msgs/s (target >= {TARGET_RATIO:g}: met), "
        "broker CPU per message 0.25x",
        f"P=4: qpidd/quorum = 2.00 msgs/s (target >= {TARGET_RATIO:g}: NOT met), "
        "broker CPU per message 0.50x",
    ]
    assert rows[0].split()[:3] == ["4", "qpidd", "1000"] and rows[0].endswith("ok")
    assert "1.0-3.0" in rows[0]
    assert rows[2].endswith("FAIL")
    # qpidd alone: its row, no ratio
    rows, lines, figures = summary(1, {"qpidd": runs["qpidd"]})
    assert len(rows) == 1 and lines == [] and figures == {}


def test_targets_and_client_arguments() -> None:
    assert parse_targets("quorum,qpidd") == ["quorum", "qpidd"]
    for bad in ("", "qpidd,qpidd", "classic"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_targets(bad)
    with pytest.raises(SystemExit):
        main(["--client", "proton"])


def _ours(marker: str) -> list[int]:
    """PIDs whose command line holds ``marker``: the script, its forked clients (the same
    command line) and its qpidd processes (their directories are under the marker's root)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if marker.encode() in cmdline:
            found.append(int(pid))
    return found


def _start(tmp_path: Path, *args: str) -> tuple[subprocess.Popen[str], str]:
    marker = f"--timeout={200 + (os.getpid() % 1000) / 1000 + time.time() % 1:.6f}"
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), "--targets", "qpidd", "--pairs", "1", "--client", "lean",
         marker, *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )  # fmt: skip
    return proc, marker


@pytest.mark.timeout(240)
def test_the_qpidd_side_end_to_end(tmp_path: Path) -> None:
    proc, marker = _start(tmp_path, "--repeat", "2", "--total-messages", "2000")
    out, _ = proc.communicate(timeout=200)
    assert proc.returncode == 0, out
    runs = re.findall(r"^qpidd +1 +(\d) +2000 .* ok$", out, re.M)
    assert runs == ["1", "2"], out
    assert re.search(r"^ +1 qpidd +\d+ .* +2 ok$", out, re.M), out
    root = re.search(r"primary \+ 2 backups in (\S+) \.\.\.", out)
    assert root is not None and not Path(root[1]).exists()  # the brokers' directories removed
    assert _ours(marker) == [] and _ours(root[1]) == []


@pytest.mark.timeout(240)
def test_sigterm_in_a_run_stops_every_process(tmp_path: Path) -> None:
    proc, marker = _start(tmp_path, "--repeat", "1", "--total-messages", "50000000")
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:  # until the run has started
        lines.append(line)
        if line.startswith("# load1"):
            break
    root = re.search(r"primary \+ 2 backups in (\S+) \.\.\.", "".join(lines))
    assert root is not None, lines
    poll_until(lambda: len(_ours(marker)) >= 3, 60, "the run's clients")  # script + 2 children
    assert len(_ours(root[1])) == 3  # three qpidd
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=120)
    assert proc.returncode == 143
    assert _ours(marker) == [] and _ours(root[1]) == []
    assert not Path(root[1]).exists()
