"""common.log: the JSON-lines log schema (ARCHITECTURE.md, "Logs as data")."""

from __future__ import annotations

import contextlib
import io
import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from common.log import (
    LOG_FIELDS,
    LOG_SCHEMA_VERSION,
    configure_logging,
    drop_held_lines,
    get_log_context,
    get_logger,
    release_held_lines,
    reset_logging,
    set_log_context,
)

TS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    reset_logging()
    yield
    reset_logging()


@pytest.fixture
def log_file(tmp_path: Path) -> Path:
    return tmp_path / "broker.log"


def configure(path: Path, level: str = "info", **kw: Any) -> None:
    configure_logging(level=level, fmt="json", file=str(path), node="n1", **kw)


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_every_event_has_the_schema_fields(log_file: Path) -> None:
    configure(log_file)
    before = datetime.now(UTC)
    get_logger("amqp").info("connection_opened", connection=7, user="guest")
    after = datetime.now(UTC)
    [event] = lines(log_file)
    assert list(event)[: len(LOG_FIELDS)] == list(LOG_FIELDS)
    assert event["event"] == "connection_opened"
    assert event["level"] == "info"
    assert event["node"] == "n1"
    assert event["cluster"] is None
    assert event["epoch"] is None
    assert event["component"] == "amqp"
    assert event["schema"] == LOG_SCHEMA_VERSION == "1"
    assert (event["connection"], event["user"]) == (7, "guest")
    assert TS.fullmatch(event["ts"])
    ts = datetime.strptime(event["ts"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    assert before - timedelta(seconds=1) <= ts <= after + timedelta(seconds=1)


def test_component_defaults_to_the_configured_one(log_file: Path) -> None:
    configure(log_file, component="ha_agent", cluster="c1")
    get_logger().warning("w")
    get_logger("ha").error("e", component_detail=1)
    first, second = lines(log_file)
    assert (first["component"], first["level"], first["cluster"]) == ("ha_agent", "warning", "c1")
    assert (second["component"], second["level"]) == ("ha", "error")


def test_set_log_context_changes_later_events(log_file: Path) -> None:
    configure(log_file)
    log = get_logger("ha")  # made before the change: still sees it
    log.info("before")
    set_log_context(epoch=3, cluster="prod")
    log.info("after")
    get_logger("broker").info("other")
    set_log_context(node="n2")
    log.info("renamed")
    events = lines(log_file)
    assert [(e["epoch"], e["cluster"], e["node"]) for e in events] == [
        (None, None, "n1"),
        (3, "prod", "n1"),
        (3, "prod", "n1"),
        (3, "prod", "n2"),
    ]
    assert get_log_context()["epoch"] == 3


def test_set_log_context_refuses_reserved_fields() -> None:
    for field in ("ts", "event", "level", "schema"):
        with pytest.raises(ValueError):
            set_log_context(**{field: "x"})


def test_configure_starts_a_fresh_context(log_file: Path) -> None:
    configure(log_file)
    set_log_context(epoch=9)
    configure(log_file)
    get_logger().info("x")
    assert lines(log_file)[-1]["epoch"] is None


def test_level_filter(log_file: Path) -> None:
    configure(log_file, level="warning")
    log = get_logger("broker")
    log.debug("d")
    log.info("i")
    log.warning("w")
    log.critical("c")
    assert [(e["event"], e["level"]) for e in lines(log_file)] == [
        ("w", "warning"),
        ("c", "critical"),
    ]


def test_filtered_levels_are_no_ops(log_file: Path) -> None:
    configure(log_file, level="error")
    log = get_logger("broker")
    # make_filtering_bound_logger replaces filtered methods by one shared no-op.
    assert type(log).debug is type(log).info is type(log).warning
    assert type(log).debug is not type(log).error


def test_exception_is_a_field_on_one_line(log_file: Path) -> None:
    configure(log_file)
    try:
        raise ZeroDivisionError("division by zero")
    except ZeroDivisionError:
        get_logger().exception("tick_failed", password_in_a_local="not shown")
    text = log_file.read_text(encoding="utf-8")
    assert text.count("\n") == 1
    [event] = lines(log_file)
    assert event["level"] == "error"
    assert event["exception"][0]["exc_type"] == "ZeroDivisionError"
    assert "locals" not in json.dumps(event["exception"])


def test_unserialisable_values_do_not_break_the_line(log_file: Path) -> None:
    configure(log_file)
    get_logger().info("odd", value=object(), raw=b"\x00\x01", items={1, 2})
    [event] = lines(log_file)
    assert event["value"].startswith("<object object")


def test_file_is_appended_and_line_buffered(log_file: Path) -> None:
    log_file.write_text("earlier line\n", encoding="utf-8")
    configure(log_file)
    get_logger().info("first")
    # Not closed yet: the line must already be in the file.
    text = log_file.read_text(encoding="utf-8")
    assert text.startswith("earlier line\n")
    assert json.loads(text.splitlines()[1])["event"] == "first"


def test_reconfiguring_closes_the_old_file(tmp_path: Path) -> None:
    configure(tmp_path / "a.log")
    get_logger().info("to_a")
    configure(tmp_path / "b.log")
    get_logger().info("to_b")
    assert [e["event"] for e in lines(tmp_path / "a.log")] == ["to_a"]
    assert [e["event"] for e in lines(tmp_path / "b.log")] == ["to_b"]


def test_a_logger_cached_under_a_closed_file_writes_where_the_latest_configuration_says(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    logger = get_logger(component="cached")
    configure(tmp_path / "a.log")
    logger.info("to_a")  # cached now, under a.log's configuration
    configure(tmp_path / "b.log")  # a.log closed
    logger.info("to_b")
    reset_logging()  # b.log closed
    logger.info("to_stderr")
    assert [e["event"] for e in lines(tmp_path / "a.log")] == ["to_a"]
    assert [e["event"] for e in lines(tmp_path / "b.log")] == ["to_b"]
    assert json.loads(capsys.readouterr().err)["event"] == "to_stderr"


def test_logger_made_before_configuring(log_file: Path) -> None:
    early = get_logger("early")
    configure(log_file)
    early.info("late_use")
    [event] = lines(log_file)
    assert (event["component"], event["node"]) == ("early", "n1")


def test_stderr_by_default(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging(level="info", fmt="json", file=None, node="n1")
    get_logger().info("to_stderr")
    captured = capsys.readouterr()
    assert json.loads(captured.err)["event"] == "to_stderr"
    assert captured.out == ""


def test_stderr_is_the_one_of_each_write(capsys: pytest.CaptureFixture[str]) -> None:
    """A command run in process under a test runner (typer's CliRunner) logs to the
    runner's stderr, which the runner closes afterwards: a logger cached meanwhile writes
    to the stderr of the moment after it, never to the closed one (which made later tests
    on the same worker fail with "I/O operation on closed file")."""
    runners_stderr = io.StringIO()
    logger = get_logger(component="cached")
    with contextlib.redirect_stderr(runners_stderr):
        configure_logging(level="info", fmt="json", file=None, node="n1")
        logger.info("during_the_command")
    runners_stderr.close()
    logger.info("after_the_command")  # raised ValueError: the closed stream
    assert json.loads(capsys.readouterr().err)["event"] == "after_the_command"


def test_held_stderr_lines_wait_for_release_or_are_dropped(
    capsys: pytest.CaptureFixture[str], log_file: Path
) -> None:
    """qpidd's start-up: stderr lines wait until it listens; a failed start drops them."""
    configure_logging(level="info", fmt="json", file=None, node="n1", hold_stderr=True)
    get_logger().info("on_the_way")
    assert capsys.readouterr().err == ""
    drop_held_lines()
    get_logger().info("started")
    release_held_lines()
    get_logger().info("serving")
    assert [json.loads(x)["event"] for x in capsys.readouterr().err.splitlines()] == [
        "started",
        "serving",
    ]
    configure_logging(level="info", fmt="json", file=str(log_file), node="n1", hold_stderr=True)
    get_logger().info("to_the_file")  # a file is written at once
    assert [e["event"] for e in lines(log_file)] == ["to_the_file"]


def test_console_format(log_file: Path) -> None:
    configure_logging(level="info", fmt="console", file=str(log_file), node="n1")
    get_logger("amqp").info("connection_opened", connection=7)
    text = log_file.read_text(encoding="utf-8")
    assert "connection_opened" in text
    assert "connection=7" in text
    assert "component=amqp" in text
    assert "\x1b[" not in text  # no colours when not a terminal
    assert TS.search(text)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="log level"):
        configure_logging(level="loud", fmt="json", file=None, node="n")
    with pytest.raises(ValueError, match="log format"):
        configure_logging(level="info", fmt="xml", file=None, node="n")
