"""asyncio's own error reports as structured events, never a traceback (issue 24, item 2).

An exception nobody caught in a callback, or in a task nobody awaited, reaches the event
loop's exception handler; asyncio's default prints "Exception in callback ..." or "Task
exception was never retrieved" and a traceback to stderr. :func:`install` puts
:func:`report` in its place where a program's loop starts (the broker: ``broker.main.run``):
each such error is one ``loop_exception`` event (``message``, the ``exception`` as one line,
``where`` it was raised as ``file:line in function``, and the callback or task it came
from). Code that can fail catches at its own shell and logs a better event (naming the
queue, the backup, the reason); this is the net under all of it.

THREAD SAFE: the loop calls the handler on its own thread.
"""

from __future__ import annotations

import asyncio
import traceback
from typing import Any, Protocol

__all__ = ["install", "report", "where_raised"]


class _Log(Protocol):
    def error(self, event: str, **fields: Any) -> Any: ...


def _one_line(value: object, limit: int = 300) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def where_raised(exc: BaseException) -> str | None:
    """The innermost frame that raised ``exc``: ``path:line in function``."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return None
    last = frames[-1]
    return f"{last.filename}:{last.lineno} in {last.name}"


def report(log: _Log, context: dict[str, Any]) -> None:
    """Log one ``loop_exception`` event for an asyncio error ``context``."""
    fields: dict[str, Any] = {"message": _one_line(context.get("message") or "asyncio error")}
    exc = context.get("exception")
    if isinstance(exc, BaseException):
        fields["exception"] = _one_line(f"{type(exc).__name__}: {exc}")
        fields["where"] = where_raised(exc)
    for key in ("task", "future", "handle"):
        if key in context:
            fields[key] = _one_line(repr(context[key]), 200)
    log.error("loop_exception", **fields)


def install(loop: asyncio.AbstractEventLoop, log: _Log) -> None:
    """Make ``loop`` report its errors through :func:`report` on ``log``."""
    loop.set_exception_handler(lambda _loop, context: report(log, context))
