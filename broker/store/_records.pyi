"""Types of the store's native publish-path records and tail (broker/store/_records.c)."""

from typing import Any

def encode_message_with_enqueue(
    message_id: int,
    route: bytes,
    properties: bytes,
    body: bytes | bytearray | memoryview,
    queue_id: int,
    position: int,
    expires_at_ms: int,
    /,
) -> bytes: ...
def encode_dequeue(queue_id: int, message_id: int, /) -> bytes: ...

class Tail:
    """broker/store/tail.py's Tail, natively."""

    pending: list[tuple[int, bytearray]]
    current: int
    size: int
    unflushed: int
    appended: int
    limit: int
    use: Any
    group: bytearray | None
    def __init__(self, limit: int) -> None: ...

def append(tail: Tail, record: bytes | bytearray | memoryview, count: int, /) -> int | None: ...
def append_message_with_enqueue(
    tail: Tail,
    message_id: int,
    exchange: str,
    routing_key: str,
    properties: bytes,
    body: bytes | bytearray | memoryview,
    queue_id: int,
    position: int,
    expires_at_ms: int,
    /,
) -> int | None: ...
def append_dequeue(tail: Tail, queue_id: int, message_id: int, /) -> int | None: ...
