"""common.loop_errors: asyncio's error reports as one structured event each (issue 24)."""

from __future__ import annotations

import asyncio
import gc
import json
from pathlib import Path

import pytest

from common import loop_errors
from common.log import configure_logging, get_logger, reset_logging


def _fails() -> None:
    raise RuntimeError("boom in a callback")


async def _task_fails() -> None:
    raise ValueError("boom in a task\nsecond line")


def test_a_callback_and_an_unretrieved_task_are_one_event_each(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log_file = tmp_path / "broker.log"
    configure_logging(level="info", fmt="json", file=str(log_file), node="n1")
    try:

        async def main() -> None:
            loop_errors.install(asyncio.get_running_loop(), get_logger("broker"))
            asyncio.get_running_loop().call_soon(_fails)
            task = asyncio.ensure_future(_task_fails())
            await asyncio.sleep(0.01)
            assert task.done()
            del task  # never retrieved: reported when collected
            gc.collect()
            await asyncio.sleep(0)

        asyncio.run(main())
    finally:
        reset_logging()
    text = log_file.read_text()
    events = [json.loads(line) for line in text.splitlines()]
    assert [e["event"] for e in events] == ["loop_exception", "loop_exception"], events
    callback, task = events
    assert callback["level"] == "error" and callback["component"] == "broker"
    assert callback["message"].startswith("Exception in callback")
    assert callback["exception"] == "RuntimeError: boom in a callback"
    assert callback["where"].endswith("in _fails") and "test_loop_errors.py:" in callback["where"]
    assert "_fails" in callback["handle"]
    assert task["message"] == "Task exception was never retrieved"
    assert task["exception"] == "ValueError: boom in a task second line"
    assert task["where"].endswith("in _task_fails")
    assert "Traceback" not in text
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and "boom" not in captured.err
