"""A real Celery worker (kombu on py-amqp, its default) through qpidd: tasks, a chord and
retries with a countdown. The worker is a separate process, stopped by its PID."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from celery import chord

from tests.broker_process import BrokerProcess
from tests.compat import celery_app

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def worker(shared_broker: BrokerProcess, tmp_path: Path) -> Iterator[Path]:
    url = f"amqp://guest:guest@127.0.0.1:{shared_broker.port}//"
    results = tmp_path / "results"
    results.mkdir()
    env = dict(os.environ, QPIDD_CELERY_BROKER=url, QPIDD_CELERY_RESULTS=str(results))
    log = (tmp_path / "worker.log").open("w")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "tests.compat.celery_app",
            "worker",
            "--pool=solo",
            "--loglevel=INFO",
            f"--hostname=compat-{os.getpid()}@localhost",
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    app = celery_app.app
    saved = (app.conf.broker_url, app.conf.result_backend)
    app.conf.broker_url = url
    app.conf.result_backend = "file://" + str(results)
    old_env = os.environ.get("QPIDD_CELERY_RESULTS")
    os.environ["QPIDD_CELERY_RESULTS"] = str(results)
    try:
        yield tmp_path / "worker.log"
    finally:
        app.conf.broker_url, app.conf.result_backend = saved
        if old_env is None:
            os.environ.pop("QPIDD_CELERY_RESULTS", None)
        else:
            os.environ["QPIDD_CELERY_RESULTS"] = old_env
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def test_celery_tasks_chord_and_retries(worker: Path) -> None:
    try:
        assert celery_app.add.delay(2, 3).get(timeout=60) == 5
        header = [celery_app.add.s(i, i) for i in range(5)]
        assert chord(header)(celery_app.total.s()).get(timeout=60) == 20
        assert celery_app.flaky.delay("two", 2).get(timeout=60) == "ok after 2 retries"
    except Exception:
        print(worker.read_text())
        raise
