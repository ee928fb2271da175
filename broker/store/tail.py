"""The journal's tail: the records appended since the last hand-over, and their counts.

A :class:`Tail` is what :class:`~broker.store.journal.Journal` appends to: ``pending``, the
buffers waiting for the group writer (``(segment, bytearray)``, in order); ``current``, the
segment appends go to, and ``size``, its bytes so far; ``unflushed``, the bytes appended since
the last hand-over; ``appended``, the records appended in all; ``use``, the current segment's
:class:`~broker.store.ledger.SegmentUse` (its record count); ``group``, a transaction's
records while one is open; ``limit``, the segment size.

The functions below are the common appends, each in one step: the record goes to the end of
the current segment's buffer and is counted, or they answer None and change nothing when the
journal has to act first (nothing is pending: its writer must be woken; the record would pass
``limit``: the next segment opens; a transaction holds the records). The journal then appends
the usual way. Natively where broker/store/_records.c is built (the same rules on the same
fields, the records encoded straight into the buffer); these are the reference
tests/store/test_native_tail.py holds the native ones to.

THREAD UNSAFE: the journal's event loop owns it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from broker.store.records import encode_dequeue, encode_message_with_enqueue

try:
    from broker.store import _records as native_records
except ImportError:  # not built (no C compiler at install): the functions below
    native_records = None  # type: ignore[assignment]


class Tail:
    """See the module docstring."""

    __slots__ = ("appended", "current", "group", "limit", "pending", "size", "unflushed", "use")

    def __init__(self, limit: int) -> None:
        self.pending: list[tuple[int, bytearray]] = []
        self.current = 0
        self.size = 0
        self.unflushed = 0
        self.appended = 0
        self.limit = limit
        self.use: Any = None
        self.group: bytearray | None = None


def _append(tail: Tail, record: bytes, count: int) -> int | None:
    """``record`` (``count`` records) to the current segment's buffer, counted; None, and
    nothing changed, when the journal has to act first (see the module docstring)."""
    pending = tail.pending
    size = len(record)
    if (
        tail.group is not None
        or not pending
        or pending[-1][0] != tail.current
        or tail.size + size > tail.limit
    ):
        return None
    tail.use.records += count  # (first: if it fails, nothing changed)
    pending[-1][1].extend(record)
    tail.size += size
    tail.unflushed += size
    tail.appended += count
    return tail.current


def _append_message_with_enqueue(
    tail: Tail,
    message_id: int,
    exchange: str,
    routing_key: str,
    properties_raw: bytes,
    body: bytes,
    queue_id: int,
    position: int,
    expires_at_ms: int,
) -> int | None:
    """A MESSAGE record and its first ENQUEUE (:func:`encode_message_with_enqueue`) appended
    as by :func:`append`; None as well for a name that is no short string (the caller's
    encoder names the problem)."""
    try:
        record = encode_message_with_enqueue(
            message_id,
            exchange,
            routing_key,
            properties_raw,
            body,
            queue_id,
            position,
            expires_at_ms,
        )
    except ValueError:  # a name past 255 bytes, or not UTF-8
        return None
    return _append(tail, record, 2)


def _append_dequeue(tail: Tail, queue_id: int, message_id: int) -> int | None:
    """A DEQUEUE record (:func:`encode_dequeue`) appended as by :func:`append`."""
    return _append(tail, encode_dequeue(queue_id, message_id), 1)


#: A new tail for segments of ``limit`` bytes, and the appends: natively where built (the
#: native Tail has the same fields; the functions take only their own).
new_tail: Callable[[int], Tail] = Tail
append: Callable[[Tail, bytes, int], int | None] = _append
append_message_with_enqueue: Callable[
    [Tail, int, str, str, bytes, bytes, int, int, int], int | None
] = _append_message_with_enqueue
append_dequeue: Callable[[Tail, int, int], int | None] = _append_dequeue
if native_records is not None:
    new_tail = cast(Callable[[int], Tail], native_records.Tail)
    append = cast(Callable[[Tail, bytes, int], "int | None"], native_records.append)
    append_message_with_enqueue = cast(
        Callable[[Tail, int, str, str, bytes, bytes, int, int, int], "int | None"],
        native_records.append_message_with_enqueue,
    )
    append_dequeue = cast(Callable[[Tail, int, int], "int | None"], native_records.append_dequeue)

__all__ = [
    "Tail",
    "append",
    "append_dequeue",
    "append_message_with_enqueue",
    "new_tail",
]
