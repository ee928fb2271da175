"""A Celery application for tests/compat/test_celery.py: the broker URL and a result
directory come from the environment (QPIDD_CELERY_BROKER, QPIDD_CELERY_RESULTS), so the
worker process and the test use the same ones."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from celery import Celery

app = Celery(
    "qpidd_compat",
    broker=os.environ.get("QPIDD_CELERY_BROKER", "amqp://guest:guest@127.0.0.1:5672//"),
    backend="file://" + os.environ.get("QPIDD_CELERY_RESULTS", "/tmp/qpidd-celery-results"),
)
app.conf.update(
    task_acks_late=True,
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
    result_chord_join_timeout=30,
)


@app.task  # type: ignore[untyped-decorator]
def add(x: int, y: int) -> int:
    return x + y


@app.task  # type: ignore[untyped-decorator]
def total(numbers: list[int]) -> int:
    return sum(numbers)


@app.task(bind=True, max_retries=5)  # type: ignore[untyped-decorator]
def flaky(self: Any, name: str, failures: int) -> str:
    """Fails ``failures`` times (counted in a file) and retries after 0.2 s each time."""
    counter = Path(os.environ.get("QPIDD_CELERY_RESULTS", "/tmp")) / f"flaky-{name}"
    seen = int(counter.read_text()) if counter.exists() else 0
    if seen < failures:
        counter.write_text(str(seen + 1))
        raise self.retry(countdown=0.2, exc=RuntimeError(f"failure {seen + 1}"))
    return f"ok after {seen} retries"
