"""Types of the native segment walker (broker/store/_walk.c)."""

from typing import Any

END: int
OTHER: int
BAD: int
UNDECODABLE: int
HARDWARE_CRC: int

def walk(
    data: bytes,
    pos: int,
    segment: int,
    top: int,
    enqueued: dict[tuple[int, int], tuple[int, int, int]],
    messages: dict[int, Any],
    where: dict[int, int],
    dequeued: set[tuple[int, int]],
    delivered: set[tuple[int, int]],
    message_type: type[tuple[object, ...]],
    /,
) -> tuple[int, int, int, int, str]: ...
def crc32c(data: bytes, value: int = 0, /) -> int: ...
