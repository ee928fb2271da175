"""The job on a Spark standalone cluster: a master and one worker (one core, loopback)
from the pyspark package, started by the fixture; ``python -m analytics --master
spark://...`` in a fresh process (the driver's address found by the job, no
``SPARK_LOCAL_IP``) gives the same tables as ``local`` on the same logs, and nothing on
stderr with ``--quiet``. Every JVM of it (master, worker, executor, driver) compiles with
C1 alone (``conftest.FAST_JIT``): the job's run 112 s -> 55 s on a loaded 2-core machine.

The local run it is compared with is the test session's (test_transforms.py), through the
file it is recorded in (``three_clusters.RECORDED``: every table and warning), which
test_transforms.py checks that run against: no Spark session and no second local run here
(they were half of this test's time), so it needs no worker of its own either."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyspark
import pytest

from common.polling import poll_until
from tests.analytics import three_clusters
from tests.analytics.conftest import FAST_JIT

#: A JVM's start took over 60 s at a load average of 50 (2026-11-30): the waits for the
#: master and the worker allow 180 s each, the job 300 s.
START_TIMEOUT = 180.0
pytestmark = pytest.mark.timeout(720)

SPARK_CLASS = Path(pyspark.__file__).parent / "bin" / "spark-class"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop(process: subprocess.Popen[bytes] | subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``spark://127.0.0.1:PORT`` with one registered worker of one core."""
    work = tmp_path_factory.mktemp("standalone")
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOG_DIR": str(work),
           "SPARK_WORKER_DIR": str(work / "worker"), "PYSPARK_PYTHON": sys.executable,
           "SPARK_DAEMON_JAVA_OPTS": FAST_JIT}  # fmt: skip
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    master_log = (work / "master.log").open("wb")
    worker_log = (work / "worker.log").open("wb")
    processes = [
        subprocess.Popen(
            [str(SPARK_CLASS), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
             "--port", str(port), "--webui-port", str(free_port())],
            env=env, stdout=master_log, stderr=subprocess.STDOUT,
        )
    ]  # fmt: skip
    try:
        poll_until(
            lambda: b"I have been elected leader" in (work / "master.log").read_bytes(),
            START_TIMEOUT,
            "the standalone master",
            interval=0.2,
        )
        processes.append(
            subprocess.Popen(
                [str(SPARK_CLASS), "org.apache.spark.deploy.worker.Worker", url, "--cores", "1",
                 "--memory", "1g", "--host", "127.0.0.1", "--webui-port", str(free_port())],
                env=env, stdout=worker_log, stderr=subprocess.STDOUT,
            )
        )  # fmt: skip
        poll_until(
            lambda: b"Successfully registered with master" in (work / "worker.log").read_bytes(),
            START_TIMEOUT,
            "the standalone worker",
            interval=0.2,
        )
        yield url
    finally:
        for process in reversed(processes):
            _stop(process)
        master_log.close()
        worker_log.close()


@pytest.fixture
def fast_jit_conf(tmp_path: Path) -> dict[str, str]:
    """The environment giving the job's driver and its executors :data:`FAST_JIT` (a
    ``spark-defaults.conf`` of that line alone: the pyspark package has no conf dir)."""
    conf = tmp_path / "spark-conf"
    conf.mkdir()
    (conf / "spark-defaults.conf").write_text(f"spark.executor.extraJavaOptions {FAST_JIT}\n")
    return {"SPARK_CONF_DIR": str(conf), "SPARK_SUBMIT_OPTS": FAST_JIT}


def test_standalone_cluster_gives_the_local_tables(
    master: str, fast_jit_conf: dict[str, str], tmp_path: Path
) -> None:
    """The three hand-made clusters (test_transforms.py's golden rows): every table and
    warning of their local run (recorded, see the module's docstring)."""
    logs = three_clusters.write(tmp_path / "logs")
    local = three_clusters.recorded()
    warnings = [w.replace("{logs}", str(logs)) for w in local["warnings"]]
    env = {k: v for k, v in os.environ.items() if k != "SPARK_LOCAL_IP"}
    answer = subprocess.run(
        [sys.executable, "-m", "analytics", str(logs), f"--master={master}", "--quiet",
         f"--out={tmp_path / 'cluster'}"],
        capture_output=True, text=True, timeout=300,
        env={**env, **fast_jit_conf, "PYSPARK_PYTHON": sys.executable},
    )  # fmt: skip
    assert answer.returncode == 0, answer.stderr
    # nothing but the job's own warnings, the same as local (an unread file, two guessed
    # failures withheld)
    assert (
        answer.stderr.splitlines() == [f"qpid-ha-analytics: warning: {w}" for w in warnings]
        and len(warnings) == 2
    ), answer.stderr
    assert answer.stdout.splitlines()[-1] == f"report: {tmp_path / 'cluster' / 'report.html'}"
    assert sorted(local["tables"]) == sorted(three_clusters.TABLES)
    for name in three_clusters.TABLES:
        found = three_clusters.table(tmp_path / "cluster", name, logs)
        assert found == local["tables"][name], name
