"""Types of the native segment walker (broker/store/_walk.c)."""

import mmap
from typing import Any

END: int
OTHER: int
BAD: int
UNDECODABLE: int
HARDWARE_CRC: int

def walk(
    data: bytes | mmap.mmap,
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
def fold(
    enqueued: dict[tuple[int, int], tuple[int, int, int]],
    lists: dict[int, Any],
    dequeued: set[tuple[int, int]],
    delivered: set[tuple[int, int]],
    messages: dict[int, Any],
    where: dict[int, int],
    used: dict[int, Any],
    uses: dict[int, list[int]],
    live_enqueues: dict[tuple[int, int], int],
    recovered_type: type[tuple[Any, ...]],
    unsorted: set[int],
    /,
) -> tuple[int, int] | None: ...
def entries(
    recovered: list[Any],
    contents: dict[int, Any],
    shared: dict[int, Any] | None,
    make_message: type,
    message_slots: tuple[Any, ...],
    message_fields: tuple[Any, ...],
    entry_template: object,
    entry_slots: tuple[Any, ...],
    entry_fields: tuple[Any, ...],
    now: float,
    wall_now_ms: float,
    crashed: bool,
    /,
) -> tuple[list[Any], int]: ...
