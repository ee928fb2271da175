"""Types of the 0-9-1 wire's native part (broker/amqp/_wire.c)."""

def deliver_frames(
    channel: int,
    consumer_tag: bytes,
    delivery_tag: int,
    redelivered: bool,
    exchange_and_key: bytes,
    properties_raw: bytes,
    body: bytes | bytearray | memoryview,
    frame_max: int,
    /,
) -> bytes: ...
def scan_publish(
    data: bytes,
    pos: int,
    max_payload: int,
    decoded: dict[bytes, tuple[str, str, bool, bool]],
    /,
) -> tuple[int, int, int, tuple[str, str, bool, bool], bytes, bytes] | None: ...
