"""Types of the native delivery encoder (broker/amqp/_deliver.c)."""

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
