"""Types of the native decoder of a replication batch's common events (broker/ha/_batch.c)."""

from collections.abc import Callable
from typing import Any

def decode_simple(
    data: bytes,
    enqueue: type,
    slots: tuple[Any, Any, Any, Any, Any],
    dequeue: Callable[[Any], Any],
    decode_ids: Callable[[bytes], Any],
    caught_up: Callable[[], Any],
    watermark: Callable[[int], Any],
    /,
) -> list[Any] | None: ...
def pack_enqueues(
    packer: Any,
    backlog: Any,
    parts: list[bytes],
    ids: list[int],
    size: int,
    budget: int,
    max_events: int,
    /,
) -> int: ...
