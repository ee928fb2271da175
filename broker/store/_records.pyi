"""Types of the store's native publish-path records (broker/store/_records.c)."""

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
