"""bench/backup_apply_cpu.py: a backup's apply path without sockets applies every batch (its
enqueues and dequeues: the queue ends with the messages still in flight) and reports a
figure with the store and without; bad arguments are one line and exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "backup_apply_cpu.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120
    )


def test_every_batch_applied_and_both_figures_reported() -> None:
    done = _run("--messages", "3000", "--batch", "7", "--in-flight", "100", "--repeat", "1")
    assert done.returncode == 0, done.stderr
    row = json.loads(done.stdout)
    assert row["with_store_us_per_msg"] > 0 and row["without_us_per_msg"] > 0


def test_bad_arguments_are_one_line_and_exit_2() -> None:
    for args in (["--messages", "0"], ["--batch", "x"], ["--in-flight", "-1"]):
        done = _run(*args)
        assert done.returncode == 2, args
        assert "Traceback" not in done.stderr
        assert "error:" in done.stderr.splitlines()[-1]
