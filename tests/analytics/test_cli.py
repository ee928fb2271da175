"""``python -m analytics``: bad usage and unusable input give one line and exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from analytics import job

#: The first job of a test session also starts Spark: minutes on a loaded machine.
pytestmark = pytest.mark.timeout(300)


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "analytics", *args], capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "the following arguments are required: PATH"),
        (("/nonexistent/logs",), "no such file or directory: /nonexistent/logs"),
        (("x", "--bogus"), "unrecognized arguments: --bogus"),
    ],
)
def test_bad_usage_is_one_line_exit_2(args: tuple[str, ...], message: str) -> None:
    answer = run(*args)
    assert answer.returncode == 2
    assert answer.stderr.strip().splitlines() == [f"qpid-ha-analytics: error: {message}"]


def test_no_events_is_a_job_error(spark: SparkSession, tmp_path: Path) -> None:
    (tmp_path / "zookeeper.log").write_text("not JSON\n")
    with pytest.raises(job.JobError, match="no JSON log events"):
        job.run(spark, [str(tmp_path)], tmp_path / "out")
