"""A pytest plugin: each test's wall time and CPU seconds, its reaped children's included.

:Status: Beta (a measuring tool: ``pytest -p bench.cpu_per_test``)

Each test's setup, call and teardown together: the wall-clock seconds and the deltas of
``os.times()``, user + system of the test's process and of its children (children count only
once reaped: a process a module fixture started counts at the teardown that reaps it). One
JSON line a test, appended to ``$CPU_PER_TEST_DIR/<worker>.jsonl`` (default
``var/cpu-per-test``). At the last test's teardown the session's ZooKeeper JVMs (children of
this process named ``java`` running ZooKeeper's main class) are read from /proc before they
are stopped, as one more line (``"nodeid": "<session zookeeper>"``, ``"jvm"``): their CPU is
then also in that test's children, and :func:`summarise` takes it out again. The other live
``java`` children (the Spark group's session JVM) go in ``"other_jvm"``: they outlive the
session, so no test's children count them.

``python -m bench.cpu_per_test DIR`` prints the costliest files by CPU (and by wall).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import defaultdict
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

_TICK = float(os.sysconf("SC_CLK_TCK"))
SESSION_ZOOKEEPER = "<session zookeeper>"


def _out_path(config: pytest.Config) -> Path:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    root = Path(os.environ.get("CPU_PER_TEST_DIR", str(config.rootpath / "var/cpu-per-test")))
    root.mkdir(parents=True, exist_ok=True)
    return root / f"{worker}.jsonl"


def _java_children_cpu() -> tuple[float, float]:
    """User + system CPU seconds of this process's live children named ``java``: those that
    run ZooKeeper's main class, and the others."""
    zookeeper = other = 0.0
    pids: set[str] = set()
    for task in Path("/proc/self/task").iterdir():
        try:
            pids.update((task / "children").read_text().split())
        except OSError:
            continue
    for pid in pids:
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() != "java":
                continue
            rest = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            seconds = (int(rest[11]) + int(rest[12])) / _TICK
            if b"org.apache.zookeeper.server." in Path(f"/proc/{pid}/cmdline").read_bytes():
                zookeeper += seconds
            else:
                other += seconds
        except (OSError, IndexError, ValueError):
            continue
    return zookeeper, other


def _write(config: pytest.Config, row: dict[str, Any]) -> None:
    with open(_out_path(config), "a") as out:
        out.write(json.dumps(row) + "\n")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None]:
    began, wall = os.times(), time.monotonic()
    yield
    ended, now = os.times(), time.monotonic()
    _write(
        item.config,
        {
            "nodeid": item.nodeid,
            "wall": round(now - wall, 3),
            "cpu": round(ended.user - began.user + ended.system - began.system, 3),
            "children": round(
                ended.children_user
                - began.children_user
                + ended.children_system
                - began.children_system,
                3,
            ),
        },
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None]:
    if nextitem is None:
        zookeeper, other = _java_children_cpu()
        _write(
            item.config,
            {
                "nodeid": SESSION_ZOOKEEPER,
                "wall": 0.0,
                "cpu": 0.0,
                "jvm": zookeeper,
                "other_jvm": other,
            },
        )
    yield


def summarise(directory: Path, top: int = 20) -> str:
    """The ``top`` costliest files by CPU (own + children), with their wall seconds."""
    cpu: dict[str, float] = defaultdict(float)
    wall: dict[str, float] = defaultdict(float)
    tests: dict[str, int] = defaultdict(int)
    jvm = other_jvm = 0.0
    for path in sorted(directory.glob("*.jsonl")):
        reaped = 0.0  # the JVMs' CPU, in the children of the row after theirs (the last test)
        for line in path.read_text().splitlines():
            row = json.loads(line)
            if row["nodeid"] == SESSION_ZOOKEEPER:
                jvm += row["jvm"]
                other_jvm += row.get("other_jvm", 0.0)
                reaped = row["jvm"]
                continue
            name = row["nodeid"].split("::", 1)[0]
            cpu[name] += row["cpu"] + max(0.0, row["children"] - reaped)
            reaped = 0.0
            wall[name] += row["wall"]
            tests[name] += 1
    lines = [f"{'cpu s':>8} {'wall s':>8} {'tests':>5}  file"]
    for name in sorted(cpu, key=cpu.__getitem__, reverse=True)[:top]:
        lines.append(f"{cpu[name]:8.1f} {wall[name]:8.1f} {tests[name]:5d}  {name}")
    lines.append(
        f"{sum(cpu.values()):8.1f} {sum(wall.values()):8.1f} {sum(tests.values()):5d}  "
        f"all (the session ZooKeepers' JVMs: {jvm:.1f} CPU s more, taken out of the last tests';"
        f" other JVMs alive at the end, in no test: {other_jvm:.1f})"
    )
    by_dir: dict[str, float] = defaultdict(float)
    for name, seconds in cpu.items():
        by_dir["/".join(name.split("/")[:2])] += seconds
    lines += [f"{seconds:8.1f}  {d}" for d, seconds in sorted(by_dir.items(), key=lambda x: -x[1])]
    return "\n".join(lines)


if __name__ == "__main__":
    print(summarise(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 20))
