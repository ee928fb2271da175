"""``analytics/log_schema.json`` itself: a valid draft 2020-12 schema that takes good events
and refuses bad ones. (Real logs are checked in test_drill_command and test_drill_failover.)"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.drill.log_schema import SCHEMA_FILE, problems

COMMON: dict[str, Any] = {
    "ts": "2026-11-22T07:42:02.123456Z",
    "level": "info",
    "node": "n1",
    "cluster": None,
    "epoch": 2,
    "schema": "1",
}

GOOD: list[dict[str, Any]] = [
    {"event": "broker_started", "component": "broker", "port": 5672},
    {"event": "something_new", "component": "amqp"},  # other events: common fields only
    {"event": "ha_state_changed", "component": "ha", "old": "ready", "new": "recovering",
     "reason": "promoted", "expected": ["127.0.0.1:5673"]},
    {"event": "election_won", "component": "agent"},
    {"event": "broker_started", "component": "broker", "cluster": "prod"},
    {"event": "nemesis_cycle_started", "component": "nemesis", "cluster": "nemesis",
     "cycle": 1, "nemesis": "kill", "target": "n1"},
    {"event": "agent_promoted", "component": "agent", "new_epoch": 2, "ha_state": "recovering",
     "reason": "a ready backup", "took_ms": 12.5},
    {"event": "broker_state", "component": "agent", "ha_state": None, "broker_epoch": None,
     "reason": "connection refused"},
    {"event": "broker_process_exited", "component": "agent", "pid": 7, "code": -9,
     "ran_s": 3.2},
    {"event": "zookeeper_session_fence", "component": "agent", "reason": "session_lost",
     "leading": True, "broker_primary": False},
    {"event": "ha_promote_refused", "component": "management", "user": "guest",
     "managed_by": "n2"},
    {"event": "ha_promote_forced", "component": "management", "user": None,
     "managed_by": "n2"},
    {"event": "ha_in_sync_refused", "component": "management", "user": "guest",
     "managed_by": "n2"},
    {"event": "ha_replication_error", "component": "ha", "level": "warning",
     "object": "queue 'q' in vhost '/'", "reason": "ValueError: bad batch"},
    {"event": "ha_replication_error", "component": "ha", "level": "warning", "backup": "b-1",
     "url": "127.0.0.1:5673", "reason": "backup: queue 'q' in vhost '/': TypeError: x"},
    {"event": "loop_exception", "component": "broker", "level": "error",
     "message": "Task exception was never retrieved", "exception": "RuntimeError: boom",
     "where": "/x.py:3 in f", "task": "<Task ...>"},
    {"event": "internal_error", "component": "amqp", "level": "error",
     "connection": "127.0.0.1:5 #1", "exception": "RuntimeError: boom", "where": None},
    {"event": "confirm_gap", "component": "drill", "gap_ms": 120.5, "stall_ms": 100.0,
     "last_confirm_ts": "2026-11-22T07:42:02.000001Z",
     "first_confirm_ts": "2026-11-22T07:42:02.120501Z", "message": 9},
    {"event": "broker_stopped", "component": "broker", "uptime": 3.5, "reason": "SIGTERM",
     "store_status": "none"},
    {"event": "store_recovered", "component": "store", "store_status": "empty"},
    {"event": "loop_step_long", "component": "broker", "level": "warning", "cpu_ms": 142.5,
     "gc_ms": 61.0, "where": "broker/management/metrics.py:281 collect"},
    {"event": "loop_lag", "component": "broker", "samples": 200, "p50_ms": 0.25, "p99_ms": 5.0,
     "max_ms": 12.1, "step_samples": 1000, "step_p50_ms": 0.1, "step_p99_ms": 2.5,
     "step_max_ms": 40.2, "gc_max_ms": 20.0},
    {"event": "loop_lag", "component": "broker", "samples": 200, "p50_ms": 0.25, "p99_ms": 5.0,
     "max_ms": 12.1},  # before the steps were measured
    {"event": "gc_frozen", "component": "broker", "freezes": 1},
    {"event": "broker_loop", "component": "agent", "loop": "running", "counted": True,
     "last_progress_ms": 2200.5, "pid": 4242,
     "reason": "its loop thread ran 0.21 s and waited for a CPU 0.78 s of 1.00 s"},
    {"event": "broker_loop", "component": "agent", "level": "warning", "loop": "stopped",
     "counted": False, "last_progress_ms": 900.0, "pid": None, "reason": "..."},
    {"event": "broker_loop", "component": "agent", "loop": "progressing", "counted": True,
     "last_progress_ms": 40.0, "pid": 4242, "reason": "...", "late_max_ms": 1162.1,
     "late_for_s": 31.2},
]  # fmt: skip

BAD: list[tuple[dict[str, Any], str]] = [
    ({"event": "broker_loop", "component": "agent", "loop": "slow", "counted": True,
      "last_progress_ms": 1.0, "pid": 1, "reason": ""}, "loop"),
    ({"event": "broker_loop", "component": "agent", "loop": "progressing", "counted": True,
      "last_progress_ms": 1.0, "pid": 1, "reason": "", "late_max_ms": -1.0}, "late_max_ms"),
    ({"event": "loop_step_long", "component": "broker", "level": "warning", "cpu_ms": 50.0,
      "gc_ms": 0.0, "where": None}, "cpu_ms"),  # not a long step
    ({"event": "loop_step_long", "component": "broker", "level": "warning", "cpu_ms": 150.0,
      "gc_ms": 0.0}, "'where' is a required property"),
    ({"event": "broker_stopped", "component": "broker", "uptime": 1, "reason": "SIGTERM",
      "store_status": "unknown"}, "store_status"),  # the word before "none"
    ({"event": "store_recovered", "component": "store", "store_status": "none"},
     "store_status"),  # a recovered store is empty, clean or dirty
    ({"event": "broker_started", "component": "broker", "ts": "2026-11-22 07:42:02"}, "ts"),
    ({"event": "Broker Started", "component": "broker"}, "event"),
    ({"event": "broker_started", "component": "spark"}, "component"),
    ({"event": "broker_started", "component": "broker", "schema": "2"}, "schema"),
    ({"event": "broker_started", "component": "broker", "epoch": "2"}, "epoch"),
    ({"event": "ha_state_changed", "component": "ha", "old": "ready", "new": "primary",
      "reason": "x"}, "new"),
    ({"event": "ha_state_changed", "component": "ha", "old": "ready", "new": "active"},
     "'reason' is a required property"),
    ({"event": "agent_promoted", "component": "agent", "new_epoch": 2, "ha_state": "active",
      "reason": "r"}, "'took_ms' is a required property"),
    ({"event": "client_reconnected", "component": "drill", "role": "publisher",
      "address": "h:1", "epoch": 2, "outage_ms": -1}, "outage_ms"),
    ({"event": "drill_finished", "component": "drill", "sent": 1, "confirmed": 1,
      "received": 1, "lost": 0, "max_gap_ms": 0}, "'duplicated' is a required property"),
    ({"event": "ha_promote_refused", "component": "management", "user": "guest"},
     "'managed_by' is a required property"),
    ({"event": "ha_promote_forced", "component": "ha", "user": "guest", "managed_by": "n2"},
     "component"),
    ({"event": "ha_replication_error", "component": "ha", "level": "warning"},
     "'reason' is a required property"),
    ({"event": "loop_exception", "component": "broker", "level": "error"},
     "'message' is a required property"),
    ({"event": "client_connected", "component": "broker", "role": "consumer", "address": "h",
      "epoch": None}, "component"),
]  # fmt: skip


def test_the_schema_is_draft_2020_12() -> None:
    schema = json.loads(SCHEMA_FILE.read_text())
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["required"] == [
        "ts", "level", "event", "node", "cluster", "epoch", "component", "schema"
    ]  # fmt: skip
    assert problems({**COMMON, **GOOD[0]}) == []  # check_schema ran in problems()


@pytest.mark.parametrize("event", GOOD, ids=lambda e: str(e["event"]))
def test_good_events(event: dict[str, Any]) -> None:
    assert problems({**COMMON, **event}) == []


@pytest.mark.parametrize(("event", "why"), BAD, ids=lambda v: str(v)[:40])
def test_bad_events(event: dict[str, Any], why: str) -> None:
    found = problems({**COMMON, **event})
    assert found and any(why in p for p in found), found


@pytest.mark.parametrize("field", ["ts", "level", "event", "node", "cluster", "epoch"])
def test_every_common_field_is_required(field: str) -> None:
    event = {**COMMON, **GOOD[0]}
    del event[field]
    assert any(f"'{field}' is a required property" in p for p in problems(event))


def test_the_docs_and_the_schema_list_the_same_components() -> None:
    """docs/log-schema.md's common ``component`` row and the schema's enum agree."""
    docs = (Path(__file__).resolve().parents[2] / "docs" / "log-schema.md").read_text()
    [row] = [line for line in docs.splitlines() if line.startswith("| `component` |")]
    listed = re.findall(r"`(\w+)`", row.split("|")[3])
    schema = json.loads(SCHEMA_FILE.read_text())
    assert listed == schema["properties"]["component"]["enum"]
