"""Validate JSON log lines against ``analytics/log_schema.json`` (schema version 1)."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]

SCHEMA_FILE = Path(__file__).resolve().parents[2] / "analytics" / "log_schema.json"


@cache
def validator() -> Any:
    schema = json.loads(SCHEMA_FILE.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def problems(event: dict[str, Any]) -> list[str]:
    """Why ``event`` does not follow the schema (empty: it does)."""
    return [
        f"{'/'.join(map(str, error.absolute_path)) or '(event)'}: {error.message}"
        for error in validator().iter_errors(event)
    ]


def check_log_file(path: Path) -> tuple[int, list[str]]:
    """(lines checked, problems) of a JSON-lines log file; every line must be an event."""
    checked = 0
    found: list[str] = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        checked += 1
        try:
            event = json.loads(line)
        except json.JSONDecodeError as exc:
            found.append(f"{path.name}:{number}: not JSON ({exc}): {line[:200]}")
            continue
        found += [f"{path.name}:{number}: {p}: {line[:300]}" for p in problems(event)]
    return checked, found
