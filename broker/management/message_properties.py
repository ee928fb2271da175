"""A message's properties as the management API takes and shows them (RabbitMQ's JSON).

Pure: :func:`properties_from_json` turns the ``properties`` object of ``POST
/api/exchanges/{name}/publish`` into AMQP basic properties (a 400 naming the bad field);
:func:`properties_to_json` turns a message's properties into the ``properties`` object
``POST /api/queues/{name}/get`` answers. The names are RabbitMQ's (``type``, not pamqp's
``message_type``); ``user_id`` is not taken (the broker would have to check it is the
publisher's: a client does that over AMQP).
"""

from __future__ import annotations

import datetime
from decimal import Decimal
from typing import Any

from pamqp import commands

from broker.core import properties
from broker.management.errors import ApiError

__all__ = ["ACK_MODES", "properties_from_json", "properties_to_json"]

#: RabbitMQ's ``ackmode`` of a get: (requeue, reject). A reject without requeue
#: dead-letters the message as a client's basic.reject would.
ACK_MODES = {
    "ack_requeue_true": (True, False),
    "ack_requeue_false": (False, False),
    "reject_requeue_true": (True, True),
    "reject_requeue_false": (False, True),
}

_STRINGS = {
    "content_type": "content_type",
    "content_encoding": "content_encoding",
    "correlation_id": "correlation_id",
    "reply_to": "reply_to",
    "expiration": "expiration",
    "message_id": "message_id",
    "type": "message_type",
    "app_id": "app_id",
}
_FIELDS = (*_STRINGS, "delivery_mode", "priority", "timestamp", "headers")


def _bad(field: str, why: str) -> ApiError:
    return ApiError(400, f"field 'properties.{field}' {why}")


def _check_table(value: Any, where: str, depth: int = 0) -> None:
    """Header values AMQP carries: text, numbers, booleans, null, lists and tables."""
    if depth > 16:
        raise _bad(where, "is nested more than 16 deep")
    if isinstance(value, dict):
        for key, item in value.items():
            if len(key.encode("utf-8")) > 128:
                raise _bad(where, f"has a key longer than 128 bytes: {key[:20]!r}...")
            _check_table(item, f"{where}.{key}", depth + 1)
    elif isinstance(value, list):
        for item in value:
            _check_table(item, where, depth + 1)
    elif not (value is None or isinstance(value, str | int | float | bool)):
        raise _bad(where, f"is not a JSON value AMQP carries: {value!r}")


def properties_from_json(data: Any) -> bytes:
    """The raw basic properties of the JSON object ``data`` (None: none)."""
    if data is None:
        return properties.EMPTY
    if not isinstance(data, dict):
        raise ApiError(400, "field 'properties' must be an object")
    unknown = sorted(set(data) - set(_FIELDS))
    if unknown:
        raise _bad(unknown[0], f"is not a property (expected {', '.join(_FIELDS)})")
    given: dict[str, Any] = {}
    for field, name in _STRINGS.items():
        value = data.get(field)
        if value is None:
            continue
        if not isinstance(value, str) or len(value.encode("utf-8")) > 255:
            raise _bad(field, "must be a string of at most 255 bytes")
        given[name] = value
    if "expiration" in given:
        try:
            properties.parse_expiration(given["expiration"])
        except ValueError as exc:
            raise _bad("expiration", f"must be milliseconds: {exc}") from None
    for field, low, high in (("delivery_mode", 1, 2), ("priority", 0, 255)):
        value = data.get(field)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise _bad(field, f"must be an integer from {low} to {high}: {value!r}")
        given[field] = value
    stamp = data.get("timestamp")
    if stamp is not None:
        if isinstance(stamp, bool) or not isinstance(stamp, int) or not 0 <= stamp < 2**63:
            raise _bad("timestamp", f"must be seconds since 1970 (an integer): {stamp!r}")
        given["timestamp"] = datetime.datetime.fromtimestamp(stamp, tz=datetime.UTC)
    headers = data.get("headers")
    if headers is not None:
        if not isinstance(headers, dict):
            raise _bad("headers", "must be an object")
        _check_table(headers, "headers")
        given["headers"] = headers
    return properties.encode(commands.Basic.Properties(**given))


def _plain(value: Any) -> Any:
    """A header value as JSON shows it."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, datetime.datetime):
        return int(value.timestamp())
    return value


def properties_to_json(raw: bytes) -> dict[str, Any]:
    """The properties a message carries, by RabbitMQ's names (unset ones left out)."""
    try:
        props = properties.decode(raw)
    except ValueError:
        return {}
    shown: dict[str, Any] = {}
    for field, name in _STRINGS.items():
        value = getattr(props, name, None)
        if value:
            shown[field] = value
    for field in ("delivery_mode", "priority"):
        value = getattr(props, field, None)
        if value is not None:
            shown[field] = value
    if props.timestamp is not None:
        shown["timestamp"] = _plain(props.timestamp)
    if props.headers:
        shown["headers"] = _plain(props.headers)
    return shown
