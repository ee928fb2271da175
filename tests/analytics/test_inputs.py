"""What the job reads and whether it trusts it: the glob (rotated logs), files left unread,
schema versions, truncated and malformed lines, the command line's errors without JVM
noise, the driver's address for a ``spark://`` master."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from analytics import __main__ as cli
from analytics import inputs, job
from tests.analytics.conftest import FAST_JIT
from tests.analytics.log_lines import line

pytestmark = pytest.mark.timeout(300)


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The command line in a fresh process; a driver JVM it starts compiles with C1 alone
    (``conftest.FAST_JIT``, as every JVM of these tests: the quiet run on no events
    16 -> 12 CPU s; what reaches stderr is the same)."""
    opts = f"{os.environ.get('SPARK_SUBMIT_OPTS', '')} {FAST_JIT}".strip()
    env = {**os.environ, "SPARK_SUBMIT_OPTS": opts}
    return subprocess.run(
        [sys.executable, "-m", "analytics", *args],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("name", "read"),
    [
        ("a.log", True), ("a.json", True), ("a.jsonl", True), ("a.log.1", True),
        ("a.log.12", True), ("a.log.2.gz", True), ("a.jsonl.3", True),
        ("a.txt", False), ("a.log.bak", False), ("a.log.old", False), ("alog", False),
    ],
)  # fmt: skip
def test_default_glob_reads_rotated_logs(name: str, read: bool) -> None:
    assert bool(inputs.glob_regex(inputs.DEFAULT_GLOB).match(name)) is read


def test_glob_regex_classes_and_alternatives() -> None:
    pattern = inputs.glob_regex("node?.{agent,broker}.[!x]og")
    assert pattern.match("node1.agent.log") and pattern.match("node2.broker.Log")
    assert not pattern.match("node1.agent.xog") and not pattern.match("node12.agent.log")


def test_listing_names_the_unread_files(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    for name in ("a.log", "a.log.1", "sub/b.json", "notes.txt", "sub/c.log.bak", "_SUCCESS"):
        (tmp_path / name).write_text("x\n")
    listing = inputs.list_local([str(tmp_path)], inputs.DEFAULT_GLOB)
    assert sorted(Path(f).name for f in listing.read) == ["a.log", "a.log.1", "b.json"]
    assert sorted(Path(f).name for f in listing.unread) == ["c.log.bak", "notes.txt"]
    # a file named on the command line is read whatever its name
    named = inputs.list_local([str(tmp_path / "notes.txt")], inputs.DEFAULT_GLOB)
    assert named.read == [str(tmp_path / "notes.txt")]


def test_empty_directory_is_one_line_without_a_jvm(tmp_path: Path) -> None:
    (tmp_path / "zookeeper.out").write_text("not a log\n")
    for quiet in ((), ("--quiet",)):
        answer = run_cli(str(tmp_path), *quiet)
        assert answer.returncode == 2
        assert answer.stderr.splitlines() == [
            f"qpid-ha-analytics: error: no log files in {tmp_path} (files matching "
            f"{inputs.DEFAULT_GLOB}) (1 other files)"
        ]


def test_quiet_run_on_no_events_prints_one_line_and_no_jvm_noise(tmp_path: Path) -> None:
    """Spark starts (a file matches) and finds no event: with --quiet, stderr holds the
    error line only (no log4j banner, no JVM warning)."""
    (tmp_path / "zookeeper.log").write_text("2026-11-22 00:00:00,000 [myid:] - INFO  x\n")
    answer = run_cli(str(tmp_path), "--quiet", f"--out={tmp_path / 'out'}")
    assert answer.returncode == 2
    assert answer.stderr.splitlines() == [
        f"qpid-ha-analytics: error: no JSON log events in {tmp_path} "
        f"(files matching {inputs.DEFAULT_GLOB})"
    ]


def test_help_has_no_raw_markup() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "analytics", "--help"], capture_output=True, text=True, timeout=60
    ).stdout
    assert "``" not in out and "`" not in out
    assert "Exit status" in out and "SPARK_LOCAL_IP" in out


def test_driver_address_for_a_standalone_master() -> None:
    assert job.driver_address("spark://127.0.0.1:7077") == "127.0.0.1"
    assert job.driver_address("spark://127.0.0.1:7077,127.0.0.1:7078") == "127.0.0.1"
    assert job.driver_address("local[2]") is None
    assert job.driver_address("yarn") is None


def event(ms: float, ev: str, node: str, component: str, **f: Any) -> str:
    return json.dumps(line(ms, ev, node, component, **f)) + "\n"


def test_unknown_schema_versions_stop_the_job_naming_the_files(
    spark: SparkSession, tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    good = event(0, "agent_started", "a1", "agent", cluster="a", session_timeout=2.0)
    (logs / "a1.agent.log").write_text(good)
    v2 = {**json.loads(good), "ts": 1763769600.25, "schema": 2}
    (logs / "a2.agent.log").write_text(json.dumps(v2) + "\n")
    bare = {k: v for k, v in json.loads(good).items() if k != "schema"}
    (logs / "a3.agent.log").write_text(json.dumps(bare) + "\n")
    with pytest.raises(job.JobError) as raised:
        job.run(spark, [str(logs)], tmp_path / "out")
    message = str(raised.value)
    assert "schema 2: " + str(logs / "a2.agent.log") in message
    assert "schema none: " + str(logs / "a3.agent.log") in message
    assert "a1.agent.log" not in message
    assert "\n" not in message


def test_exit_status_strict() -> None:
    problem = inputs.FileProblem("file:/x.log", 1, 0, ("a1",))
    result = job.Result(
        out=Path("."), html=Path("."), lines=1, skipped=0, events_used=1, problems=[problem]
    )
    assert cli.exit_status(result, strict=False) == 0
    assert cli.exit_status(result, strict=True) == 1
    result.problems = []
    assert cli.exit_status(result, strict=True) == 0


def test_line_problems_name_files_and_nodes() -> None:
    stats = [
        {"file": "file:/l/a.log", "truncated": 1, "nodes": ["a1", "a2"]},
        {"file": "file:/l/b.log", "truncated": 0, "nodes": ["b1"]},
        {"file": "file:/l/c.log", "truncated": 0, "nodes": ["c1"]},
    ]
    malformed = [{"file": "file:/l/b.log", "node": "b9", "lines": 2}]
    problems = inputs.line_problems(stats, malformed)
    assert [(p.file, p.truncated, p.malformed, p.nodes) for p in problems] == [
        ("file:/l/a.log", 1, 0, ("a1", "a2")),
        ("file:/l/b.log", 0, 2, ("b1", "b9")),
    ]
    assert problems[0].describe() == "/l/a.log: 1 truncated line(s)"
    assert inputs.suspect_nodes(problems) == ["a1", "a2", "b1", "b9"]
