"""The hand-made logs' lines: schema-1 events at milliseconds after :data:`BASE`, written
one JSON object a line."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

#: Time 0 of the hand-made logs.
BASE = datetime(2026, 11, 22, tzinfo=UTC)
BASE_US = int(BASE.timestamp() * 1_000_000)


def ts(ms: float) -> str:
    return (BASE + timedelta(milliseconds=ms)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def us(ms: float) -> int:
    return BASE_US + int(ms * 1000)


def line(ms: float, event: str, node: str, component: str, **fields: Any) -> dict[str, Any]:
    """One schema-1 event ``ms`` milliseconds after :data:`BASE`."""
    return {
        "ts": ts(ms), "level": "info", "event": event, "node": node,
        "cluster": fields.pop("cluster", None), "epoch": fields.pop("epoch", None),
        "component": component, "schema": "1", **fields,
    }  # fmt: skip


def write_logs(directory: Path, files: dict[str, list[dict[str, Any]]]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, lines in files.items():
        (directory / name).write_text("".join(json.dumps(x) + "\n" for x in lines))
    return directory
