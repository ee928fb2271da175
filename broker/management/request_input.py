"""What a request brings in: its JSON body, query flags and path names, checked.

Contract: every bad input raises :class:`~broker.management.errors.ApiError` 400 with a
reason naming the field, parameter or name at fault; nothing here touches the broker.
A body is a JSON object or empty (``{}``); ``NaN``, ``Infinity`` and floats out of range
are refused; unknown body fields are refused (:class:`Body`); names are AMQP short strings
(at most :data:`MAX_NAME_BYTES` bytes of UTF-8).
"""

from __future__ import annotations

import json
import math
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from broker.management.errors import ApiError

#: AMQP short strings (queue and exchange names) hold at most 255 bytes.
MAX_NAME_BYTES = 255


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text} is out of range")
    return value


async def read_json_object(request: web.Request) -> dict[str, Any]:
    """The request body as a JSON object; an absent or blank body is ``{}``."""
    try:
        raw = await request.read()
    except (ConnectionError, EOFError, HttpProcessingError) as exc:
        # The client hung up before sending its Content-Length (fuzzing): a client error.
        raise ApiError(400, f"request body incomplete: {exc or type(exc).__name__}") from None
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw, parse_constant=_reject_constant, parse_float=_finite_float)
    except (ValueError, RecursionError) as exc:
        raise ApiError(400, f"request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ApiError(400, f"request body must be a JSON object, got {_type_name(data)}")
    return data


class Body:
    """Typed access to the fields of a JSON request body, with 400s that name the field."""

    def __init__(self, data: dict[str, Any], allowed: tuple[str, ...]) -> None:
        unknown = sorted(set(data) - set(allowed))
        if unknown:
            raise ApiError(
                400,
                f"unknown field '{unknown[0]}' in request body (expected {', '.join(allowed)})",
            )
        self.data = data

    def flag(self, name: str, default: bool = False) -> bool:
        value = self.data.get(name, default)
        if not isinstance(value, bool):
            raise ApiError(400, f"field '{name}' must be a boolean, got {_type_name(value)}")
        return value

    def string(self, name: str, default: str | None = None) -> str:
        value = self.data.get(name, default)
        if value is None:
            raise ApiError(400, f"field '{name}' is required")
        if not isinstance(value, str):
            raise ApiError(400, f"field '{name}' must be a string, got {_type_name(value)}")
        return value

    def table(self, name: str) -> dict[str, Any]:
        value = self.data.get(name)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise ApiError(400, f"field '{name}' must be an object, got {_type_name(value)}")
        return value


_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off", ""})


def query_flag(request: web.Request, name: str) -> bool:
    value = request.query.get(name)
    if value is None:
        return False
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ApiError(400, f"query parameter '{name}' must be true or false, got {value!r}")


def check_name(kind: str, name: str) -> str:
    if len(name.encode("utf-8")) > MAX_NAME_BYTES:
        raise ApiError(400, f"{kind} name is longer than {MAX_NAME_BYTES} bytes")
    return name
