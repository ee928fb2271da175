"""JSON out: how the management API encodes every response body.

Pure functions, no I/O. :func:`dumps` also encodes what AMQP field tables may hold besides
JSON's own types (bytes as UTF-8 text, dates in ISO 8601, decimals as strings, sets as
arrays, anything else as ``str``), so a queue's or exchange's ``arguments`` never fail to
encode. Error bodies are built on top of this by :func:`broker.management.errors.error_response`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from datetime import date, datetime
from decimal import Decimal
from typing import Any, TypeVar

from aiohttp import web

from common.slices import SLICE, Steps

T = TypeVar("T")
#: Bytes of JSON text encoded between two turns of the event loop.
TEXT_SLICE = 256 * 1024


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


def encode_slices(data: Any, size: int = SLICE) -> Iterator[str]:
    """:func:`dumps` of ``data`` in pieces whose concatenation is the same JSON value: a
    list or an object of more than ``size`` items is encoded ``size`` items a piece; the
    containers around one are walked item by item (each taken as it is when its piece is
    encoded). Everything else is encoded whole, at C speed."""
    if isinstance(data, list) and len(data) > size:
        yield "["
        for start in range(0, len(data), size):
            yield (", " if start else "") + dumps(data[start : start + size])[1:-1]
        yield "]"
    elif isinstance(data, dict) and len(data) > size:
        items = list(data.items())
        yield "{"
        for start in range(0, len(items), size):
            yield (", " if start else "") + dumps(dict(items[start : start + size]))[1:-1]
        yield "}"
    elif isinstance(data, dict) and any(_container(v) for v in data.values()):
        yield "{"
        for i, (key, value) in enumerate(list(data.items())):
            yield (", " if i else "") + dumps(str(key)) + ": "
            yield from encode_slices(value, size)
        yield "}"
    elif isinstance(data, list) and any(_container(v) for v in data):
        yield "["
        for i, value in enumerate(data):
            if i:
                yield ", "
            yield from encode_slices(value, size)
        yield "]"
    else:
        yield dumps(data)


def _container(value: Any) -> bool:
    return isinstance(value, list | dict) and len(value) > 0


async def dumps_sliced(data: Any) -> str:
    """:func:`dumps` of ``data``, about :data:`TEXT_SLICE` bytes of text a turn of the event
    loop (a status of 10,000 queues is megabytes: one ``json.dumps`` held the loop tens of
    milliseconds). ``data`` must not change meanwhile but for what the loop's other work
    changes in objects it holds: build it for the answer (a snapshot), not a live view."""
    parts: list[str] = []
    since = 0
    for piece in encode_slices(data):
        parts.append(piece)
        since += len(piece)
        if since >= TEXT_SLICE:
            since = 0
            await asyncio.sleep(0)
    return "".join(parts)


async def json_response_sliced(data: Any, status: int = 200) -> web.Response:
    """:func:`json_response` encoded a slice a turn of the loop (:func:`dumps_sliced`)."""
    text = await dumps_sliced(data)
    return web.Response(text=text, status=status, content_type="application/json")


async def run_sliced(
    steps: Steps[T], paused: Callable[[], bool] | None = None, poll: float = 0.1
) -> T:
    """The result of a computation in slices (:mod:`common.slices`), one slice a turn of
    the event loop; while ``paused()`` is true between two slices, no slice runs (looked
    at every ``poll`` seconds: housekeeping begun before a promotion waits it out)."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        await asyncio.sleep(0)
        while paused is not None and paused():
            await asyncio.sleep(poll)
