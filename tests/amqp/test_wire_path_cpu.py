"""bench/wire_path_cpu.py: the 0-9-1 path without sockets delivers every message it
publishes, confirms each, and reports a figure; bad arguments are one line and exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "wire_path_cpu.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120
    )


def test_every_message_delivered_and_a_figure_reported() -> None:
    done = _run("--queues", "1,3", "--messages", "3000", "--repeat", "1", "--window", "32")
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [row["queues"] for row in rows] == [1, 3]
    assert all(row["us_a_message"] > 0 for row in rows)


def test_run_counts_deliveries_and_confirms() -> None:
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import wire_path_cpu
    finally:
        sys.path.remove(str(SCRIPT.parent))
    # A run raises SystemExit when a message is not delivered; here it returns a figure.
    assert wire_path_cpu.run(2, 1024, 64, 256, 100) > 0


def test_bad_arguments_are_one_line_and_exit_2() -> None:
    for args in (["--queues", "x"], ["--queues", "0"], ["--window", "512", "--prefetch", "256"]):
        done = _run(*args)
        assert done.returncode == 2, args
        assert "Traceback" not in done.stderr
        assert "error:" in done.stderr.splitlines()[-1]
