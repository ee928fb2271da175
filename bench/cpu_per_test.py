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
session, so no test's children count them. Each test's row also holds the CPU seconds the
live ``java`` children spent during it (``"live_jvm"``: the Spark session JVM's work for
the test; the ZooKeepers' apart, ``"live_zookeeper"``) and its start (``"start"``, Unix
time: the workers' schedule). :func:`summarise` counts ``live_jvm`` in a test's CPU (the
session JVM's start in the first test that asks for it), not ``live_zookeeper`` (the
session ZooKeepers' line says the whole).

``python -m bench.cpu_per_test DIR`` prints the costliest files by CPU (and by wall), then
each worker's schedule: when it began and ended, its last tests (a tail where one worker
runs on alone).
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
    for seconds, is_zookeeper in _java_children().values():
        if is_zookeeper:
            zookeeper += seconds
        else:
            other += seconds
    return zookeeper, other


def _java_children() -> dict[str, tuple[float, bool]]:
    """This process's live children named ``java``: pid -> (user + system CPU seconds,
    whether it runs ZooKeeper's main class)."""
    found: dict[str, tuple[float, bool]] = {}
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
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            found[pid] = (seconds, b"org.apache.zookeeper.server." in cmdline)
        except (OSError, IndexError, ValueError):
            continue
    return found


def _live_jvm_delta(
    before: dict[str, tuple[float, bool]], after: dict[str, tuple[float, bool]]
) -> tuple[float, float]:
    """The CPU seconds the live ``java`` children spent between two readings (one started
    between them: all of its CPU), ZooKeepers' apart: (ZooKeepers, others). One gone by the
    second reading counts nothing here (reaped, it is in the children's times)."""
    zookeeper = other = 0.0
    for pid, (seconds, is_zookeeper) in after.items():
        spent = seconds - before.get(pid, (0.0, False))[0]
        if is_zookeeper:
            zookeeper += spent
        else:
            other += spent
    return zookeeper, other


def _write(config: pytest.Config, row: dict[str, Any]) -> None:
    with open(_out_path(config), "a") as out:
        out.write(json.dumps(row) + "\n")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None]:
    jvms, start = _java_children(), time.time()
    began, wall = os.times(), time.monotonic()
    yield
    ended, now = os.times(), time.monotonic()
    live_zookeeper, live_jvm = _live_jvm_delta(jvms, _java_children())
    _write(
        item.config,
        {
            "nodeid": item.nodeid,
            "start": round(start, 3),
            "wall": round(now - wall, 3),
            "live_jvm": round(live_jvm, 3),
            "live_zookeeper": round(live_zookeeper, 3),
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
    """The ``top`` costliest files and tests by CPU (own + children + the live JVMs' for
    them), with their wall seconds; then each worker's schedule."""
    cpu: dict[str, float] = defaultdict(float)
    wall: dict[str, float] = defaultdict(float)
    tests: dict[str, int] = defaultdict(int)
    per_test: list[tuple[float, float, str]] = []
    schedule: dict[str, list[tuple[float, float, str]]] = {}
    jvm = other_jvm = live_jvm = 0.0
    for path in sorted(directory.glob("*.jsonl")):
        reaped = 0.0  # the JVMs' CPU, in the children of the row after theirs (the last test)
        rows = schedule.setdefault(path.stem, [])
        for line in path.read_text().splitlines():
            row = json.loads(line)
            if row["nodeid"] == SESSION_ZOOKEEPER:
                jvm += row["jvm"]
                other_jvm += row.get("other_jvm", 0.0)
                reaped = row["jvm"]
                continue
            name = row["nodeid"].split("::", 1)[0]
            seconds = row["cpu"] + max(0.0, row["children"] - reaped) + row.get("live_jvm", 0.0)
            live_jvm += row.get("live_jvm", 0.0)
            cpu[name] += seconds
            reaped = 0.0
            wall[name] += row["wall"]
            tests[name] += 1
            per_test.append((seconds, row["wall"], row["nodeid"]))
            if "start" in row:
                rows.append((row["start"], row["start"] + row["wall"], row["nodeid"]))
    lines = [f"{'cpu s':>8} {'wall s':>8} {'tests':>5}  file"]
    for name in sorted(cpu, key=cpu.__getitem__, reverse=True)[:top]:
        lines.append(f"{cpu[name]:8.1f} {wall[name]:8.1f} {tests[name]:5d}  {name}")
    lines.append(
        f"{sum(cpu.values()):8.1f} {sum(wall.values()):8.1f} {sum(tests.values()):5d}  "
        f"all (the session ZooKeepers' JVMs: {jvm:.1f} CPU s more, taken out of the last tests';"
        f" live JVMs' CPU during the tests, in theirs: {live_jvm:.1f}; other JVMs' alive at"
        f" the end: {other_jvm:.1f})"
    )
    by_dir: dict[str, float] = defaultdict(float)
    for name, seconds in cpu.items():
        by_dir["/".join(name.split("/")[:2])] += seconds
    lines += [f"{seconds:8.1f}  {d}" for d, seconds in sorted(by_dir.items(), key=lambda x: -x[1])]
    lines.append(f"{'cpu s':>8} {'wall s':>8}  test")
    for seconds, took, nodeid in sorted(per_test, reverse=True)[:top]:
        lines.append(f"{seconds:8.1f} {took:8.1f}  {nodeid}")
    lines += _schedule(schedule)
    return "\n".join(lines)


def _schedule(schedule: dict[str, list[tuple[float, float, str]]]) -> list[str]:
    """Each worker's first start, last end and busy seconds (from the run's first start),
    and its last three tests."""
    rows = {worker: sorted(r) for worker, r in schedule.items() if r}
    if not rows:
        return []
    t0 = min(r[0][0] for r in rows.values())
    lines = ["worker   first     end    busy  (s from the first start; its last tests)"]
    for worker, r in sorted(rows.items()):
        end = max(e for _, e, _ in r)
        busy = sum(e - s for s, e, _ in r)
        lines.append(f"{worker:6} {r[0][0] - t0:7.0f} {end - t0:7.0f} {busy:7.0f}")
        lines += [f"{'':14}{s - t0:7.0f}-{e - t0:<7.0f} {n}" for s, e, n in r[-3:]]
    return lines


if __name__ == "__main__":
    print(summarise(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 20))
