"""Types of the native publisher confirms (broker/core/_confirms.c)."""

from collections.abc import Callable
from typing import Any

class ConfirmHandle:
    """Made only by :meth:`PublisherConfirms.publish`."""

    seq: int
    settled: bool

    def hold(self) -> None: ...
    def release(self, ok: bool = True) -> None: ...

class PublisherConfirms:
    outstanding: int
    has_replies: bool

    def __init__(self, on_settled: Callable[[], None] | None = None) -> None: ...
    def publish(self, message: Any = None) -> ConfirmHandle: ...
    def close(self) -> None: ...
    def take_replies(self) -> list[Any]: ...

def bind_reply(cls: type, /) -> None: ...
