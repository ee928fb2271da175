"""Types of the ledger's native per-message operations (broker/store/_ledger.c)."""

from typing import Any

SHARD_BITS: int

def message_enqueued(
    messages: Any, enqueues: Any, segments: dict[int, Any], key: tuple[int, int], segment: int, /
) -> None: ...
def dequeued(
    messages: Any,
    enqueues: Any,
    segments: dict[int, Any],
    delivered: set[tuple[int, int]],
    key: tuple[int, int],
    /,
) -> bool: ...
