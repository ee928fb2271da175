"""JSON out: how the management API encodes every response body.

Pure functions, no I/O. :func:`dumps` also encodes what AMQP field tables may hold besides
JSON's own types (bytes as UTF-8 text, dates in ISO 8601, decimals as strings, sets as
arrays, anything else as ``str``), so a queue's or exchange's ``arguments`` never fail to
encode. Error bodies are built on top of this by :func:`broker.management.errors.error_response`.
"""

from __future__ import annotations

import json
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from aiohttp import web


def _json_default(value: Any) -> Any:
    """JSON for what AMQP field tables may hold besides JSON's own types."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, set | frozenset):
        return list(value)
    return str(value)


def dumps(data: Any) -> str:
    return json.dumps(data, default=_json_default, ensure_ascii=False)


def json_response(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status, dumps=dumps)
